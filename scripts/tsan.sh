#!/usr/bin/env bash
# profd's and the agent's threaded parts built with ThreadSanitizer into
# ${TSAN_BUILD_DIR:-build-tsan} (clang, as scripts/sanitize.sh), and their tests run with every
# report fatal:
#   - the agent: the launch counters (application threads counting while the sampler thread folds
#     and the agent thread reads), the CUPTI broker (callbacks, buffer hand-outs and Kineto's calls
#     from several threads, against the fake CUPTI and Kineto of tests/agent/cupti_fakes), the GOT
#     patcher, the wire encoding;
#   - profd: the agent channel server and registry, the spool and retention threads, the capture
#     session and sinks, the Kineto IPC server, the /metrics server; and, end to end, a TSan profd,
#     profctl and agent (the real capture path, its converter thread against the fake CUPTI, the
#     orchestrator, faults: kill, SIGTERM, cancel, disk full) through the integration tests.
# profd locks with absl::Mutex, and Debian's Abseil is not built with TSan: common/mutex.h
# tells TSan what those locks order. Child processes (profd, agents) inherit TSAN_OPTIONS, so their
# reports land in the same folder and fail the run too.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${TSAN_BUILD_DIR:-build-tsan}
flags="-fsanitize=thread -fno-omit-frame-pointer"
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  # As scripts/sanitize.sh: clang (a third less compile time than gcc), -O1 -gline-tables-only
  # (file:line in reports), the tests' own code at -O0, the headers most files include
  # precompiled, no benchmarks.
  CC=clang-14 CXX=clang++-14 cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
    -DPROFD_TEST_COMPILE_OPTIONS=-O0 -DPROFD_PRECOMPILE_HEADERS=ON \
    -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" -DPROFD_BUILD_BENCHES=OFF \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=thread"
fi
# The suite: ctest label tsan (tests/CMakeLists.txt); the integration tests among it build the
# TSan profd, profctl and agent they start.
cmake --build "$BUILD_DIR" -j "$(nproc)" --target tsan_suite

reports="$(pwd)/$BUILD_DIR/tsan-reports"
rm -rf "$reports"
mkdir -p "$reports"
# ignore_noninstrumented_modules: memory touched by calls from Debian's uninstrumented gRPC,
# protobuf and Abseil (their malloc, memcpy, epoll_wait) is not checked: their threads' ordering
# is invisible, so gRPC handing a request from its poller to a handler thread would be reported.
# Every access of profd's own code is still checked.
supp="$(pwd)/tests/sanitizers"  # third-party code only, each entry says why
export TSAN_OPTIONS="log_path=$reports/tsan:halt_on_error=1:second_deadlock_stack=1:ignore_noninstrumented_modules=1:suppressions=$supp/tsan.supp"
status=0
ctest --test-dir "$BUILD_DIR" -L tsan --output-on-failure -j 2 --timeout 900 || status=$?
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
echo "tsan: ok (the tsan suite, no report)"
