#!/usr/bin/env bash
# The test command: installs dependencies, then builds everything with AddressSanitizer and
# UndefinedBehaviorSanitizer (clang; scripts/sanitize.sh) and runs every test that needs no GPU
# there; then profd's and the agent's threaded parts built with ThreadSanitizer (scripts/tsan.sh;
# tests/CMakeLists.txt names that suite) and each fuzz target, from the first build, for a bounded
# time (scripts/fuzz.sh). TEST_TSAN=0 or TEST_FUZZ=0 skip those (e.g. while iterating); CI runs
# everything. Each stage prints how long it took and the CPU it used. (A build as shipped:
# scripts/build.sh, then ctest --test-dir build.)
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
stage "build (ASan+UBSan)" bash scripts/sanitize.sh build
stage "tests (ASan+UBSan)" bash scripts/sanitize.sh test
if [ "${TEST_TSAN:-1}" != 0 ]; then stage "TSan (profd and the agent)" bash scripts/tsan.sh; fi
if [ "${TEST_FUZZ:-1}" != 0 ]; then stage fuzzing bash scripts/fuzz.sh; fi
count_cpu
echo "== test.sh: all passed in $SECONDS s ($cpu s of CPU)"
