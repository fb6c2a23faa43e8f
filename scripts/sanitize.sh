#!/usr/bin/env bash
# The test suite built with AddressSanitizer and UndefinedBehaviorSanitizer (clang;
# -fno-sanitize-recover=all: the first report stops the process) into
# ${ASAN_BUILD_DIR:-build-asan}, instrumented for libFuzzer's coverage as well, so that the same
# build holds the fuzz targets scripts/fuzz.sh runs: one configuration, one compile.
#   scripts/sanitize.sh [configure|build|test]   (build and test when not said)
# Every process the tests start (profd, profctl, the agent inside its host program, the test
# binaries) writes its reports under build-asan/sanitizer-reports/, and any report fails this
# script, also one from a child whose exit status no test looked at. libprofagent.so is built
# and dlopened instrumented like the rest; the sanitizers' runtime is in the programs that load it.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${ASAN_BUILD_DIR:-build-asan}
mode=${1:-all}
# Every report is fatal, except the checks tests/sanitizers/ubsan.supp lists for third-party
# headers: those recover so that the suppressions can apply. -fno-sanitize=function: profd
# declares the C APIs it loads with dlopen (NVML, CUPTI, the driver) itself, and clang takes a
# call into the tests' fake libraries through those declarations for a call through the wrong
# type (gcc has no such check).
flags="-fsanitize=address,undefined,fuzzer-no-link -fno-sanitize=function -fno-sanitize-recover=all"
flags+=" -fsanitize-recover=pointer-overflow -fno-omit-frame-pointer"
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  # -O1 -gline-tables-only: OSS-Fuzz's flags (file:line in reports, a fast compile on a 2-core
  # machine), asserts on; clang compiles this a third faster than gcc. The tests' own code at -O0
  # (tests/CMakeLists.txt says why); the headers most files include precompiled (CMakeLists.txt);
  # no benchmarks: nothing runs them here.
  CC=clang-14 CXX=clang++-14 cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
    -DPROFD_TEST_COMPILE_OPTIONS=-O0 -DPROFD_PRECOMPILE_HEADERS=ON -DPROFD_FUZZ=ON \
    -DPROFD_BUILD_BENCHES=OFF \
    -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
    -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined"
fi
[ "$mode" = configure ] && exit 0
[ "$mode" = test ] || cmake --build "$BUILD_DIR" -j "$(nproc)"
[ "$mode" = build ] && exit 0

reports="$(pwd)/$BUILD_DIR/sanitizer-reports"
rm -rf "$reports"
mkdir -p "$reports"
supp="$(pwd)/tests/sanitizers"  # third-party code only, each entry says why
export ASAN_OPTIONS="log_path=$reports/asan:detect_leaks=1:strict_string_checks=1"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="log_path=$reports/ubsan:print_stacktrace=1:halt_on_error=1:suppressions=$supp/ubsan.supp"

status=0
ctest --test-dir "$BUILD_DIR" --output-on-failure -j 2 --timeout 900 || status=$?
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
echo "sanitize: ok (ASan+UBSan, every test, no report)"
