#!/usr/bin/env bash
# profd's and the agent's threaded parts built with ThreadSanitizer into
# ${TSAN_BUILD_DIR:-build-tsan} (gcc), and their tests run with every report fatal:
#   - the agent: the launch counters (application threads counting while the sampler thread folds
#     and the agent thread reads), the CUPTI broker (callbacks, buffer hand-outs and Kineto's calls
#     from several threads, against the fake CUPTI and Kineto of tests/agent/cupti_fakes), the GOT
#     patcher, the wire encoding;
#   - profd: the agent channel server and registry, the spool and retention threads, the capture
#     session and sinks, the Kineto IPC server, the /metrics server; and, end to end, a TSan profd,
#     profctl and agent (the real capture path, its converter thread against the fake CUPTI, the
#     orchestrator, faults: kill, SIGTERM, cancel, disk full) through the integration tests.
# profd locks with absl::Mutex, and Debian's Abseil is not built with TSan: daemon/common/mutex.h
# tells TSan what those locks order. Child processes (profd, agents) inherit TSAN_OPTIONS, so their
# reports land in the same folder and fail the run too.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${TSAN_BUILD_DIR:-build-tsan}
# -Wno-tsan: gcc warns that TSan does not model atomic_thread_fence, which Abseil's flags use
# (read once at start).
flags="-fsanitize=thread -fno-omit-frame-pointer -Wno-tsan"
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  # As scripts/sanitize.sh: -O1 -g1, the tests' own code at -O0, no benchmarks.
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
    -DPROFD_TEST_COMPILE_OPTIONS=-O0 \
    -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" -DPROFD_BUILD_BENCHES=OFF \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=thread"
fi
tests=(launch_counters_unittest cuda_entry_points_unittest cupti_broker_unittest got_patcher_unittest wire_unittest
  agent_channel_server_test agent_registry_test agent_event_batch_test spool_test retention_test
  capture_session_test process_sink_test kineto_ipc_server_test metrics_server_test
  capture_test faults_test cupti_sharing_test)
# The integration tests' processes: profd, profctl, the agent and the programs it is injected in.
helpers=(profd profctl profagent agent_host replay_agent fake_kineto fake_libcuda)
cmake --build "$BUILD_DIR" -j "$(nproc)" --target "${tests[@]}" "${helpers[@]}"

reports="$(pwd)/$BUILD_DIR/tsan-reports"
rm -rf "$reports"
mkdir -p "$reports"
# ignore_noninstrumented_modules: memory touched by calls from Debian's uninstrumented gRPC,
# protobuf and Abseil (their malloc, memcpy, epoll_wait) is not checked: their threads' ordering
# is invisible, so gRPC handing a request from its poller to a handler thread would be reported.
# Every access of profd's own code is still checked.
export TSAN_OPTIONS="log_path=$reports/tsan:halt_on_error=1:second_deadlock_stack=1:ignore_noninstrumented_modules=1"
status=0
for t in "${tests[@]}"; do
  bin=$(find "$BUILD_DIR/tests" -type f -name "$t" | head -1)
  echo "tsan: $t"
  "$bin" --gtest_brief=1 || status=1
done
if compgen -G "$reports/*" >/dev/null; then
  echo "tsan: ThreadSanitizer reports:" >&2
  for f in "$reports"/*; do
    echo "==== $f" >&2
    cat "$f" >&2
  done
  status=1
fi
if [ "$status" -ne 0 ]; then
  echo "tsan: FAILED" >&2
  exit "$status"
fi
echo "tsan: ok (${tests[*]}, no report)"
