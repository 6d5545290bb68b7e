#!/usr/bin/env bash
# Installs the Debian packages Colibri needs to build and test. Safe to re-run:
# it checks what is missing first, runs `apt-get update` once, and installs only that.
# Usage: scripts/install-deps.sh            (build + test dependencies)
set -euo pipefail

# libnuma1: not a build dependency (libcolibri loads libnuma.so.1 at run time, if present);
# installed so that the tests exercise the NUMA code with the library loaded.
packages=(
  build-essential cmake ninja-build pkg-config clang
  libcxxopts-dev libxxhash-dev libzstd-dev libnuma1 catch2 nlohmann-json3-dev
  libpcre2-dev libutf8proc-dev libcpp-httplib-dev
  zstd xxhash
  abigail-tools
  golang-go bindgen cargo
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
