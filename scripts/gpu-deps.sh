#!/usr/bin/env bash
# scripts/gpu-deps.sh DIR — downloads (apt-get download, no install) the .deb files of the
# build dependencies that a GPU machine without Debian's development packages lacks, for
# `scripts/gpu-check.sh OUT --deps DIR` there (a GPU machine that cannot reach a package
# registry: carry DIR with the working tree, about 3 MB; `.gpu-deps/` in the repository root is
# git-ignored for that). Run it on a Debian bookworm machine with apt. The .debs are unpacked
# into a private root on the GPU machine, never into /. Their binaries (pkgconf, the shared
# libraries) need that machine's glibc to be at least bookworm's 2.36: `gpu-check.sh --probe`
# prints it.
set -euo pipefail
dir=${1:?usage: scripts/gpu-deps.sh DIR}
mkdir -p "$dir"
cd "$dir"
packages=(
  libxxhash-dev libxxhash0 libzstd-dev libzstd1 libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0
  libpcre2-posix3 libutf8proc-dev libutf8proc2 nlohmann-json3-dev catch2 libcxxopts-dev
  pkgconf pkgconf-bin libpkgconf3
)
apt-get download "${packages[@]}"
debs=(./*.deb)
echo "gpu-deps: ${#debs[@]} .deb files in $dir"
