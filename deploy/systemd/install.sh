#!/usr/bin/env bash
# Installs profd from the unpacked tarball as a systemd service: the tree goes to the prefix the
# unit names (/opt/profd), the unit to /etc/systemd/system, then systemd starts it.
#   sudo ./install.sh                 install into /opt/profd, enable and start profd.service
#   ./install.sh --root DIR --no-start   the same files under DIR (a package build, a test)
# Uninstall: systemctl disable --now profd; rm -rf /opt/profd /etc/systemd/system/profd.service
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=""
start=1
while [ $# -gt 0 ]; do
  case "$1" in
    --root) root=$2; shift 2 ;;
    --no-start) start=0; shift ;;
    *) echo "install.sh: unknown option $1 (--root DIR, --no-start)" >&2; exit 2 ;;
  esac
done
unit="$here/profd.service"
# The prefix is the unit's: ExecStart=/opt/profd/bin/profd ...
prefix=$(sed -n 's|^ExecStart=\(/[^ ]*\)/bin/profd.*|\1|p' "$unit")
[ -n "$prefix" ] || { echo "install.sh: $unit has no ExecStart=PREFIX/bin/profd" >&2; exit 1; }
[ -x "$here/bin/profd" ] || { echo "install.sh: run it from the unpacked tarball (bin/profd beside it)" >&2; exit 1; }
if [ -z "$root" ] && [ "$(id -u)" -ne 0 ]; then
  echo "install.sh: run as root (sudo ./install.sh)" >&2
  exit 1
fi
mkdir -p "$root$prefix" "$root/etc/systemd/system"
cp -a "$here/bin" "$here/lib" "$root$prefix/"
cp "$here/README.md" "$here/LICENSE" "$root$prefix/" 2>/dev/null || true
install -m 0644 "$unit" "$root/etc/systemd/system/profd.service"
echo "Installed $prefix/bin/profd, $prefix/bin/profctl, $prefix/lib/libprofagent.so and profd.service"
if [ "$start" = 1 ] && [ -z "$root" ]; then
  systemctl daemon-reload
  systemctl enable --now profd.service
  echo "profd is running: $prefix/bin/profctl status"
fi
echo "Inject the agent: CUDA_INJECTION64_PATH=$prefix/lib/libprofagent.so"
