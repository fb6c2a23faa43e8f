#!/usr/bin/env bash
# The README's main command from what a new user has: a copy of the repository's tracked files
# with nothing beside it (no ../shared), npm and network tools that fail if called, and :9477
# already taken (as on a GPU node where profd runs). `bash scripts/demo.sh` must succeed, and
# the commands it suggests afterwards (profctl list, profctl report ID, the metrics URL) must
# work from another shell, until `bash scripts/demo.sh --stop`.
#   demo_clean_copy_test.sh SOURCE_DIR BUILD_DIR
# The demo builds its targets in BUILD_DIR (PROFD_DEMO_BUILD_DIR), already built by CI: the test
# takes seconds, not a fresh build's minutes.
set -euo pipefail
SRC=$(cd "$1" && pwd)
BUILD=$(cd "$2" && pwd)
tmp=$(mktemp -d /tmp/profd-demo-test.XXXXXX)
other=""
fail() {
  echo "FAIL: $*" >&2
  for f in "$tmp"/demo.out "$tmp"/demo.err "$tmp"/clone/profd-demo/profd.log; do
    [ -f "$f" ] && { echo "--- $f" >&2; tail -n 40 "$f" >&2; }
  done
  exit 1
}
cleanup() {
  [ -d "$tmp/clone" ] && (cd "$tmp/clone" && bash scripts/demo.sh --stop >/dev/null 2>&1 || true)
  [ -n "$other" ] && kill "$other" 2>/dev/null && wait "$other" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

# A clean copy of the tracked files (as git clone gives), alone in its folder.
mkdir "$tmp/clone"
(cd "$SRC" && git ls-files -z | tar --null -T - -cf - 2>/dev/null) | tar -C "$tmp/clone" -xf -
[ -f "$tmp/clone/scripts/demo.sh" ] || fail "the copy has no scripts/demo.sh"
[ ! -e "$tmp/shared" ] || fail "a shared folder beside the copy"

# Tools the demo must not need: each fails loudly if called.
mkdir "$tmp/bin"
for tool in npm npx node curl wget pip pip3; do
  printf '#!/bin/sh\necho "demo called %s $*" >>"%s/forbidden"\nexit 97\n' "$tool" "$tmp" \
    >"$tmp/bin/$tool"
  chmod +x "$tmp/bin/$tool"
done

# :9477 taken by another profd, as on a node that already runs one.
"$BUILD/daemon/profd" --runtime_dir="$tmp/other" --grpc_address=none \
  --metrics_address=0.0.0.0:9477 --capture_dir="$tmp/other/captures" \
  --spool_dir="$tmp/other/spool" --store="file://$tmp/other/store" \
  </dev/null >"$tmp/other.log" 2>&1 &
other=$!
for _ in $(seq 100); do
  (exec 3<>/dev/tcp/127.0.0.1/9477) 2>/dev/null && break
  sleep 0.05
done
(exec 3<>/dev/tcp/127.0.0.1/9477) 2>/dev/null || fail "could not take :9477 for the test"

cd "$tmp/clone"
PATH="$tmp/bin:$PATH" PROFD_DEMO_BUILD_DIR="$BUILD" timeout 300 bash scripts/demo.sh \
  >"$tmp/demo.out" 2>"$tmp/demo.err" || fail "scripts/demo.sh exited with $?"
[ ! -f "$tmp/forbidden" ] || fail "the demo ran $(cat "$tmp/forbidden")"
out=$(cat "$tmp/demo.out")
grep -q '^Building profd profctl profagent replay_agent in ' <<<"$out" ||
  fail "the demo does not build just its own targets"
grep -q 'TOP KERNELS' <<<"$out" || fail "no report in the demo's output"

# The commands it suggests, from a fresh shell, as printed.
env_line=$(grep -m1 '^  export PATH=' <<<"$out") || fail "the demo says nothing about PATH"
id=$(sed -n 's/^  profctl report \([^ ]*\) .*/\1/p' <<<"$out" | head -1)
[ -n "$id" ] || fail "the demo suggests no profctl report ID"
env -i HOME="$HOME" PATH=/usr/bin:/bin bash -c "$env_line; profctl list" >"$tmp/list.out" 2>&1 ||
  fail "the suggested profctl list failed: $(cat "$tmp/list.out")"
grep -q "$id" "$tmp/list.out" || fail "profctl list does not show $id: $(cat "$tmp/list.out")"
env -i HOME="$HOME" PATH=/usr/bin:/bin bash -c "$env_line; profctl report $id" \
  >"$tmp/report.out" 2>&1 || fail "the suggested profctl report failed: $(cat "$tmp/report.out")"
grep -q 'TOP KERNELS' "$tmp/report.out" || fail "profctl report $id printed no report"
url=$(sed -n "s/^  curl -s \([^ ]*\) .*/\1/p" <<<"$out")
case "$url" in
  http://127.0.0.1:9477/*) fail "the demo's metrics are on :9477" ;;
  http://127.0.0.1:*/metrics) ;;
  *) fail "the demo names no metrics URL" ;;
esac
hostport=${url#http://}
hostport=${hostport%/metrics}
exec 3<>"/dev/tcp/${hostport%:*}/${hostport#*:}" || fail "nothing listens on $url"
printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3
grep -q '^profd_agents' <&3 || fail "$url serves no profd metrics"
exec 3>&-

# --stop ends the demo's profd (and only it: the other one still holds :9477).
pid=$(cat profd-demo/profd.pid)
bash scripts/demo.sh --stop >/dev/null
kill -0 "$pid" 2>/dev/null && fail "profd $pid still runs after --stop"
kill -0 "$other" 2>/dev/null || fail "--stop ended another profd"
echo "PASS"
