#!/usr/bin/env bash
# The tarball a node is installed from: its binaries, README, LICENSE, changelog, the systemd unit,
# and an install step that puts profd where the unit runs it from.
#   package_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
SRC=$(cd "$1" && pwd)
BUILD=$(cd "$2" && pwd)
tmp=$(mktemp -d /tmp/profd-package-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
cd "$SRC"
# The tree the tarball is made of (compressing ~100 MB of libraries is the slow part, and tar's).
PROFD_PACKAGE_TREE_ONLY=1 BUILD_DIR="$BUILD" bash scripts/package.sh "$tmp/dist" \
  >"$tmp/package.log" 2>&1 || fail "scripts/package.sh: $(tail -20 "$tmp/package.log")"
dir=$(ls -d "$tmp"/dist/profd-*)
listing=$(cd "$tmp/dist" && find "profd-"* -type f)
for f in bin/profd bin/profctl lib/libprofagent.so README.md LICENSE CHANGELOG.md profd.service \
  install.sh; do
  grep -qE "^profd-[0-9.]+/$f\$" <<<"$listing" || fail "the tarball has no $f"
done
# kubectl's plugin: `kubectl profd ...` runs bin/kubectl-profd, which is profctl.
[ -L "$dir/bin/kubectl-profd" ] && [ "$(readlink "$dir/bin/kubectl-profd")" = profctl ] ||
  fail "the tarball has no bin/kubectl-profd -> profctl"
"$dir/bin/kubectl-profd" --help | grep -q '^Usage: kubectl profd' ||
  fail "kubectl-profd does not call itself kubectl profd"
mkdir "$tmp/root"
"$dir/install.sh" --root "$tmp/root" --no-start >"$tmp/install.log" 2>&1 ||
  fail "install.sh: $(cat "$tmp/install.log")"
unit="$tmp/root/etc/systemd/system/profd.service"
[ -f "$unit" ] || fail "install.sh installed no unit"
exec_start=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$unit")
[ -x "$tmp/root$exec_start" ] || fail "the unit runs $exec_start, which install.sh did not install"
"$tmp/root$exec_start" --version | grep -q '^profd ' || fail "$exec_start --version"
agent=$(sed -n 's/^Inject the agent: CUDA_INJECTION64_PATH=//p' "$tmp/install.log")
[ -f "$tmp/root$agent" ] || fail "install.sh names the agent $agent, which is not installed"
echo PASS
