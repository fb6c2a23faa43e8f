#!/usr/bin/env bash
# The ASan+UBSan suite (ctest label asan; tests/CMakeLists.txt lists it and says why: the tests of
# what parses others' bytes, the threaded parts, the end-to-end captures under attack and faults),
# built with AddressSanitizer and UndefinedBehaviorSanitizer into ${ASAN_BUILD_DIR:-build-asan}
# (gcc, as the main build; -fno-sanitize-recover=all: the first report stops the process). Every process the tests start (profd, profctl, the agent inside its
# host program, the test binaries) writes its reports under build-asan/sanitizer-reports/, and
# any report fails this script, also one from a child whose exit status no test looked at.
# libprofagent.so is built and dlopened instrumented like the rest: gcc links it against the
# shared libasan, which its instrumented host programs have already loaded first.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${ASAN_BUILD_DIR:-build-asan}
# Every report is fatal, except the checks tests/sanitizers/ubsan.supp lists for third-party
# headers: those recover so that the suppressions can apply.
flags="-fsanitize=address,undefined -fno-sanitize-recover=all -fsanitize-recover=pointer-overflow"
flags+=" -fno-omit-frame-pointer"
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  # -O1: the usual optimisation for sanitizer builds, and a faster compile on a 2-core machine.
  # -g1: line tables, all a report's file:line needs (full -g costs a fifth more to compile).
  # The tests' own code at -O0 (tests/CMakeLists.txt says why); no benchmarks: nothing runs them.
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
    -DPROFD_TEST_COMPILE_OPTIONS=-O0 \
    -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" -DPROFD_BUILD_BENCHES=OFF \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
    -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined"
fi
cmake --build "$BUILD_DIR" -j "$(nproc)" --target asan_suite

reports="$(pwd)/$BUILD_DIR/sanitizer-reports"
rm -rf "$reports"
mkdir -p "$reports"
supp="$(pwd)/tests/sanitizers"  # third-party code only, each entry says why
export ASAN_OPTIONS="log_path=$reports/asan:detect_leaks=1:strict_string_checks=1"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="log_path=$reports/ubsan:print_stacktrace=1:halt_on_error=1:suppressions=$supp/ubsan.supp"

status=0
ctest --test-dir "$BUILD_DIR" -L asan --output-on-failure -j 2 --timeout 900 || status=$?
if compgen -G "$reports/*" >/dev/null; then
  echo "sanitize: sanitizer reports (from the tests or the processes they started):" >&2
  for f in "$reports"/*; do
    echo "==== $f" >&2
    cat "$f" >&2
  done
  status=1
fi
if [ "$status" -ne 0 ]; then
  echo "sanitize: FAILED. Reproduce one test with: ASAN_OPTIONS=... ctest --test-dir $BUILD_DIR -R NAME --output-on-failure" >&2
  exit "$status"
fi
echo "sanitize: ok (ASan+UBSan, the asan suite, no report)"
