#!/usr/bin/env bash
# Fuzzes what untrusted bytes reach in profd for FUZZ_SECONDS (default 60; the targets side by side), with
# Debian's clang (libFuzzer + ASan + UBSan), in the build of scripts/sanitize.sh
# (${ASAN_BUILD_DIR:-build-asan}):
#   trace_reader_fuzzer  a trace file (profctl report; profctl import, analysed inside profd)
#   event_batch_fuzzer   a capture's event batches -> string table, trace writer, summary, analysis
#   agent_frame_fuzzer   an agent connection's bytes -> frames, AgentMessage, registry, batches
# Seeds: tests/fuzz/make_seeds.cc (slices of the fixtures and every input that once crashed
# profd). Any crash, sanitizer report, leak, timeout or broken check fails the script; the input
# is kept under build-asan/fuzz/artifacts/ with the command that replays it.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${ASAN_BUILD_DIR:-build-asan}
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
targets=(trace_reader event_batch agent_frame)

# The fuzz targets are built in scripts/sanitize.sh's build (clang, ASan+UBSan, libFuzzer's
# coverage): after the test suite there they are already there.
bash scripts/sanitize.sh configure
cmake --build "$BUILD_DIR" -j "$(nproc)" --target make_fuzz_seeds "${targets[@]/%/_fuzzer}"

work="$(pwd)/$BUILD_DIR/fuzz"
rm -rf "$work/seeds"
supp="$(pwd)/tests/sanitizers"  # third-party code only, each entry says why
export ASAN_OPTIONS="detect_leaks=1:strict_string_checks=1"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$supp/ubsan.supp"
"$BUILD_DIR/tests/fuzz/make_fuzz_seeds" . "$work/seeds"

# Every target at once for FUZZ_SECONDS of wall time, sharing the cores: the stage takes
# FUZZ_SECONDS however many targets there are (three on two cores: ~40 s of CPU each).
fuzz_one() {
  local t=$1
  local bin="$(pwd)/$BUILD_DIR/tests/fuzz/${t}_fuzzer"
  local corpus="$work/corpus/$t"  # grows across local runs; a fresh clone starts from the seeds
  local artifacts="$work/artifacts/$t"
  mkdir -p "$corpus" "$artifacts"
  # Inputs up to 32 KiB: room for a few hundred events or batches of real shape, and small enough
  # for thousands of runs a second.
  local args=(-max_total_time="$FUZZ_SECONDS" -timeout=30 -rss_limit_mb=2048 -max_len=32768
    -print_final_stats=1 -artifact_prefix="$artifacts/")
  local dict="tests/fuzz/$t.dict"
  [ -f "$dict" ] && args+=(-dict="$dict")
  local rc=0
  "$bin" "${args[@]}" "$corpus" "$work/seeds/$t" >"$work/$t.log" 2>&1 || rc=$?
  echo "$rc" >"$work/$t.rc"
}
for t in "${targets[@]}"; do
  echo "fuzz: $t for ${FUZZ_SECONDS}s"
  rm -f "$work/$t.rc"
  fuzz_one "$t" &
done
wait
failed=()
for t in "${targets[@]}"; do
  log="$work/$t.log"
  if [ "$(cat "$work/$t.rc" 2>/dev/null)" = 0 ]; then
    echo "fuzz: $t done"
    grep -E "^stat::number_of_executed_units|^stat::new_units_added|^Done" "$log" | sed "s/^/  /" || true
  else
    echo "fuzz: $t FAILED; the end of its log ($log):" >&2
    tail -n 60 "$log" >&2
    for a in "$work/artifacts/$t"/*; do
      [ -e "$a" ] && echo "fuzz: replay with: $(pwd)/$BUILD_DIR/tests/fuzz/${t}_fuzzer $a" >&2
    done
    failed+=("$t")
  fi
done
if ((${#failed[@]})); then
  echo "fuzz: findings in: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: ok (${targets[*]}, ${FUZZ_SECONDS}s each, no finding)"
