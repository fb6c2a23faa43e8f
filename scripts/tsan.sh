#!/usr/bin/env bash
# The agent's threaded parts built with ThreadSanitizer into ${TSAN_BUILD_DIR:-build-tsan} (gcc),
# and their tests run with every report fatal: the launch counters (application threads counting
# while the sampler thread folds and the agent thread reads), the CUPTI broker (callbacks, buffer
# hand-outs and Kineto's calls from several threads, against the fake CUPTI and Kineto of
# tests/agent/cupti_fakes) and the GOT patcher, and the agent's wire encoding.
#
# Only the agent: it has no Abseil. profd's threaded parts lock with absl::Mutex, and Debian's
# Abseil is not built with TSan, so TSan would not see those locks and would report every access
# they guard (docs/RELIABILITY.md, "Not covered yet").
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${TSAN_BUILD_DIR:-build-tsan}
# -Wno-tsan: gcc warns that TSan does not model atomic_thread_fence, which Abseil's flags use
# (read once at start).
flags="-fsanitize=thread -fno-omit-frame-pointer -Wno-tsan"
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
    -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" -DPROFD_BUILD_BENCHES=OFF \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=thread"
fi
tests=(launch_counters_unittest cupti_broker_unittest got_patcher_unittest wire_unittest)
cmake --build "$BUILD_DIR" -j "$(nproc)" --target "${tests[@]}"

reports="$(pwd)/$BUILD_DIR/tsan-reports"
rm -rf "$reports"
mkdir -p "$reports"
export TSAN_OPTIONS="log_path=$reports/tsan:halt_on_error=1:second_deadlock_stack=1"
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
