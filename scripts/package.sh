#!/usr/bin/env bash
# Builds the relocatable tarball: bin/profd, bin/profctl, lib/libprofagent.so and every non-system
# shared library they need, with RUNPATH $ORIGIN/../lib, so it runs on a host without the Debian
# packages (the GPU hosts); with README.md, LICENSE, CHANGELOG.md, the systemd unit and its
# install.sh (the tree into the unit's /opt/profd, the unit into systemd).
# Usage: scripts/package.sh [OUT_DIR]   -> OUT_DIR/profd-<version>/ + .tar.gz
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
OUT=${1:-dist}
# Only what the tarball holds.
[ -f "$BUILD_DIR/build.ninja" ] ||
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)" --target profd profctl profagent >/dev/null
version=$(sed -n 's/^project(profd VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
root="$OUT/profd-$version"
rm -rf "$root"
cmake --install "$BUILD_DIR" --prefix "$root" >/dev/null
mkdir -p "$root/lib"
# Skip what every Linux host has (glibc, libstdc++, libgcc) and the driver's own libraries.
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|librt\.so|libpthread\.so|libstdc\+\+|libgcc_s|libcuda\.so|libnvidia)'
for bin in "$root"/bin/*; do
  ldd "$bin" | awk '/=> \//{print $1" "$3}' | while read -r name path; do
    [[ "$name" =~ $skip ]] && continue
    [ -e "$root/lib/$name" ] || cp -L "$path" "$root/lib/$name"
  done
done
for lib in "$root"/lib/*.so*; do patchelf --set-rpath '$ORIGIN' "$lib" 2>/dev/null || true; done
for bin in "$root"/bin/*; do patchelf --set-rpath '$ORIGIN/../lib' "$bin"; done
strip --strip-unneeded "$root"/lib/*.so* "$root"/bin/* 2>/dev/null || true
cp README.md LICENSE CHANGELOG.md "$root/"
cp deploy/systemd/profd.service deploy/systemd/install.sh "$root/"
# PROFD_PACKAGE_TREE_ONLY=1: the tree, not its tarball (a test of what it holds, in less time).
[ "${PROFD_PACKAGE_TREE_ONLY:-0}" = 1 ] && { du -sh "$root"; exit 0; }
tar -C "$OUT" -czf "$OUT/profd-$version-linux-x86_64.tar.gz" "profd-$version"
du -sh "$root" "$OUT/profd-$version-linux-x86_64.tar.gz"
