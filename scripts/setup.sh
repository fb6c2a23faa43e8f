#!/usr/bin/env bash
# Installs what profd needs to build and test on Debian bookworm. Idempotent: packages already
# present are left alone, and apt-get update runs only when something is missing.
#   scripts/setup.sh          everything: build, tests, sanitizers, fuzzing (npm packages too)
#   scripts/setup.sh --build  only what building profd, profctl, the agent and the demo needs:
#                             Debian packages, no npm, nothing outside this checkout
set -euo pipefail
mode=all
case "${1:-}" in
  --build) mode=build ;;
  "") ;;
  *) echo "setup: unknown option $1 (use --build, or nothing for everything)" >&2; exit 2 ;;
esac

packages=(
  build-essential cmake ninja-build pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler  # wire + control plane
  libabsl-dev            # Status, time, flags, strings
  prometheus-cpp-dev     # /metrics
  libcurl4-openssl-dev   # S3 uploads (built-in AWS SigV4)
  libssl-dev             # libcrypto: SHA-256/MD5 integrity checks of stored traces
  libisal-dev            # gzip traces and scrapes (ISA-L igzip, ~4x zlib)
  zlib1g-dev             # reading gzip (traces, imports), the tests' reference inflate
  rapidjson-dev          # reading traces (profctl report/import)
  libcli11-dev           # profctl's command line
  libyaml-dev            # profctl reads kubeconfigs (YAML) for captures across nodes
  libgtest-dev libgmock-dev  # CMake configures the tests folder (the demo's replay agent is there)
)
test_packages=(
  openssl                # tests: the openssl CLI makes throwaway CA/server/client certificates (tls_test)
  prometheus             # tests: a real Prometheus scrapes profd; promtool checks /metrics
  prometheus-alertmanager # tests: a real Alertmanager sends alerts to profd's webhook
  curl                   # tests: a real client refused by the alert listener's mutual TLS
  chromium               # tests: headless Chromium renders the HTML report (profctl report --html)
  patchelf               # relocatable tarball
  python3-kubernetes     # tests: the Kubernetes manifests checked against the API schema (its models)
  clang-format
  clang-14 libclang-rt-14-dev  # scripts/fuzz.sh: libFuzzer with ASan+UBSan (clang's runtimes)
  llvm-14                # llvm-symbolizer: sanitizer reports with file:line
)
[ "$mode" = build ] || packages+=("${test_packages[@]}")

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
if [ ! -d /usr/local/cuda/include ] || [ ! -e /usr/local/cuda/lib64/libcupti.so ]; then
  echo "setup: the CUDA 13 toolkit with CUPTI is expected at /usr/local/cuda" >&2
  exit 1
fi
if [ "$mode" = build ]; then
  echo "setup: ok (build)"
  exit 0
fi

# Node.js for the tests' S3 server (s3rver from npm): the machine's own node if there is one,
# else Debian's (the two conflict, so never both).
if ! command -v npm >/dev/null 2>&1; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends nodejs npm
fi

# s3rver, the S3-protocol server the store tests start; versions pinned by its package-lock.json.
s3rver_dir="$(cd "$(dirname "$0")/.." && pwd)/tests/store/s3rver"
if [ ! -x "$s3rver_dir/node_modules/.bin/s3rver" ]; then
  npm ci --prefix "$s3rver_dir" --no-audit --no-fund --loglevel=error
fi
# The SigV4-verifying proxy the store tests put in front of s3rver (../shared/tools/s3-sigv4-proxy,
# read-only): its npm packages, pinned by its package-lock.json, go into this checkout.
proxy_src="$(cd "$(dirname "$0")/.." && pwd)/../shared/tools/s3-sigv4-proxy"
proxy_dir="$(cd "$(dirname "$0")/.." && pwd)/tests/store/s3-sigv4-proxy"
if [ ! -f "$proxy_src/verify-proxy.js" ]; then
  echo "setup: ../shared/tools/s3-sigv4-proxy is missing (the store tests need it beside the checkout)" >&2
  exit 1
fi
if ! cmp -s "$proxy_src/package-lock.json" "$proxy_dir/package-lock.json" ||
  [ ! -d "$proxy_dir/node_modules/@smithy/signature-v4" ]; then
  mkdir -p "$proxy_dir"
  cp "$proxy_src/package.json" "$proxy_src/package-lock.json" "$proxy_dir/"
  npm ci --prefix "$proxy_dir" --no-audit --no-fund --loglevel=error
fi
echo "setup: ok"
