#!/usr/bin/env bash
# The test command: installs dependencies, builds, and runs every test that needs no GPU; then
# the tests of parsers, threads and end-to-end captures built with ASan+UBSan (scripts/sanitize.sh),
# the agent's and profd's threaded parts built with TSan (scripts/tsan.sh; tests/CMakeLists.txt
# names both suites) and each fuzz target for a bounded time (scripts/fuzz.sh). TEST_SANITIZE=0,
# TEST_TSAN=0 or TEST_FUZZ=0 skip those (e.g. while iterating); CI runs everything. Each stage
# prints how long it took and the CPU it used.
set -euo pipefail
cd "$(dirname "$0")/.."
# cpu: seconds of CPU (user + system) this script's children have used so far. A stage's share
# does not depend on what else the machine runs, as its wall time does. (`times` runs in this
# shell: a subshell would count its own children only.)
times_file=$(mktemp)
trap 'rm -f "$times_file"' EXIT
count_cpu() {
  times >"$times_file"
  cpu=$(awk 'NR == 2 { split($1, u, /[ms]/); split($2, s, /[ms]/)
    printf "%d", u[1] * 60 + u[2] + s[1] * 60 + s[2] }' "$times_file")
}
stage() {
  local name=$1 start=$SECONDS cpu_before
  shift
  count_cpu
  cpu_before=$cpu
  echo "== test.sh: $name"
  "$@"
  count_cpu
  echo "== test.sh: $name took $((SECONDS - start)) s ($((cpu - cpu_before)) s of CPU)"
}
stage setup bash scripts/setup.sh
# -g1: line tables (a crash's file:line), not the types and variables a debugger wants, which
# cost a third of the compile; the code is the same as a build with -g. The tests' own code at
# -O0, as in the sanitizer builds (tests/CMakeLists.txt): profd, profctl and the agent are built
# as shipped; the benchmarks are compiled, not run (their figures come from a default build).
stage build bash scripts/build.sh -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DPROFD_TEST_COMPILE_OPTIONS=-O0
BUILD_DIR=${BUILD_DIR:-build}
stage tests ctest --test-dir "$BUILD_DIR" --output-on-failure -j 2 --timeout 600
if [ "${TEST_SANITIZE:-1}" != 0 ]; then stage "ASan+UBSan suite" bash scripts/sanitize.sh; fi
if [ "${TEST_TSAN:-1}" != 0 ]; then stage "TSan (profd and the agent)" bash scripts/tsan.sh; fi
if [ "${TEST_FUZZ:-1}" != 0 ]; then stage fuzzing bash scripts/fuzz.sh; fi
count_cpu
echo "== test.sh: all passed in $SECONDS s ($cpu s of CPU)"
