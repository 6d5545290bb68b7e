#!/usr/bin/env bash
# scripts/gpu-check.sh OUT_DIR [--bench-shape medium|small] [--no-device] [--deps DEB_DIR] [--probe]
#
# Every check of the CUDA backend that needs a GPU, in one run (issue 22; docs/performance.md,
# "CUDA"): configures and builds with CUDA (-DCOLIBRI_CUDA=ON, warnings as errors), runs every
# CUDA test (ctest -L cuda plus the C API device tests) and the GPU benchmark (bench/cuda_bench:
# decode batch 1 and 8, pp512, % of the HBM roofline), and writes the figures to
# OUT_DIR/gpu-check.md (plus the logs beside it). Meant to finish in under 8 minutes on an H200.
#
#   --bench-shape medium   (default) Mixtral-8x7B layer shape, 2 layers, bf16 (~5.7 GB)
#   --bench-shape small    a 1024-hidden model: seconds, for a smoke run
#   --no-device            a machine without a GPU: build, check that the device tests skip
#                          ("no CUDA device: skipped") and that the no-device test passes; no
#                          benchmark. Without this flag a missing GPU is an error (exit 3).
#   --deps DEB_DIR         the build dependencies as .deb files (scripts/gpu-deps.sh downloads
#                          them where apt works): unpacked into a private root under the scratch
#                          directory, and the build pointed at it (CMAKE_PREFIX_PATH, pkg-config
#                          with that root as its sysroot, the loader path for the tests). For a
#                          GPU machine that has the CUDA toolkit, a compiler, CMake and ninja but
#                          not Debian's development packages, and cannot reach a registry.
#   --probe                only report what the machine has (tools, dependencies, GPU; every run
#                          reports it first) and exit: a cheap first call on an unknown machine.
#
# Exit: 0 all passed; 1 a build, test or benchmark failed; 2 usage; 3 no GPU (without --no-device).
# Scratch (the build tree build-gpu/, the benchmark images) stays out of OUT_DIR; only the
# figures and logs go there (a few small files).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
root=$(pwd)

out=""
shape=medium
no_device=0
probe=0
deps=""
cmake_extra=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --bench-shape)
      [[ $# -ge 2 && ( $2 == medium || $2 == small ) ]] || { echo "gpu-check: --bench-shape medium|small" >&2; exit 2; }
      shape=$2
      shift 2
      ;;
    --no-device) no_device=1; shift ;;
    --probe) probe=1; shift ;;
    --deps)
      [[ $# -ge 2 && -d $2 ]] || { echo "gpu-check: --deps needs a directory of .deb files" >&2; exit 2; }
      deps=$(cd "$2" && pwd)
      shift 2
      ;;
    -*) echo "gpu-check: unknown option $1" >&2; exit 2 ;;
    *)
      [[ -z $out ]] || { echo "gpu-check: one OUT_DIR" >&2; exit 2; }
      out=$1
      shift
      ;;
  esac
done
[[ -n $out ]] || { echo "usage: scripts/gpu-check.sh OUT_DIR [--bench-shape medium|small] [--no-device] [--deps DEB_DIR] [--probe]" >&2; exit 2; }
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)
build=$root/build-gpu
scratch=${TMPDIR:-/tmp}/colibri-gpu-check
mkdir -p "$scratch"
report=$out/gpu-check.md
jobs=$(nproc)
status=0
start=$(date +%s)

say() { echo "$*" | tee -a "$report"; }
: >"$report"
say "# gpu-check $(date -u +%Y-%m-%dT%H:%M:%SZ)"
say ""
say "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  say "- device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1)"
  have_gpu=1
else
  say "- device: none (nvidia-smi missing or finds no GPU)"
  have_gpu=0
fi
# The dependencies from .deb files: a private root, never /.
if [[ -n $deps ]]; then
  root_dir=$scratch/deps-root
  rm -rf "$root_dir"
  mkdir -p "$root_dir"
  for f in "$deps"/*.deb; do
    dpkg -x "$f" "$root_dir" || { say "- deps: cannot unpack $f"; exit 1; }
  done
  multiarch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
  export CMAKE_PREFIX_PATH=$root_dir/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
  export PKG_CONFIG_LIBDIR=$root_dir/usr/lib/$multiarch/pkgconfig:$root_dir/usr/share/pkgconfig
  export PKG_CONFIG_SYSROOT_DIR=$root_dir
  export LD_LIBRARY_PATH=$root_dir/usr/lib/$multiarch${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  debs=("$deps"/*.deb)
  say "- deps: ${#debs[@]} .deb files unpacked into $root_dir"
  # No pkg-config on the machine: the carried pkgconf (gpu-deps.sh downloads it).
  if ! command -v pkg-config >/dev/null && [[ -x $root_dir/usr/bin/pkgconf ]]; then
    cmake_extra+=("-DPKG_CONFIG_EXECUTABLE=$root_dir/usr/bin/pkgconf")
    export PATH=$root_dir/usr/bin:$PATH
  fi
fi

# What the machine has (always reported: a failed run then says why; --probe stops here).
{
  for tool in cmake ninja g++ gcc nvcc pkg-config pkgconf dpkg git nvidia-smi; do
    where=$(command -v "$tool" || { [[ $tool == nvcc && -x /usr/local/cuda/bin/nvcc ]] && echo /usr/local/cuda/bin/nvcc; } || echo missing)
    version=""
    if [[ $where != missing ]]; then
      version=$("$where" --version 2>/dev/null | grep -m1 -E 'release|[0-9]+\.[0-9]+' || true)
    fi
    say "- $tool: $where ${version:-}"
  done
  say "- glibc: $(ldd --version 2>/dev/null | head -1)"
  for module in libxxhash libzstd libpcre2-8 libutf8proc; do
    say "- pkg-config $module: $(pkg-config --modversion "$module" 2>/dev/null || echo missing)"
  done
  for header in nlohmann/json.hpp cxxopts.hpp catch2/catch.hpp; do
    found=missing
    prefixes=${CMAKE_PREFIX_PATH:-}
    for prefix in ${prefixes//:/ } /usr /usr/local; do
      [[ -e $prefix/include/$header ]] && { found=$prefix/include/$header; break; }
    done
    say "- $header: $found"
  done
}
((probe)) && exit 0

if ((have_gpu == 0 && no_device == 0)); then
  say ""
  say "no GPU on this machine: run with --no-device for the build and skip checks only"
  exit 3
fi

# 1. Configure and build with CUDA (only what the checks need).
t0=$(date +%s)
if ! cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOLIBRI_WERROR=ON -DCOLIBRI_CUDA=ON \
    "${cmake_extra[@]}" >"$out/configure.log" 2>&1; then
  say "- configure: FAILED (configure.log)"
  exit 1
fi
targets=(colibri colibri_cuda colibri-model test_device_capi test_cuda_device cuda_bench)
if ! cmake --build "$build" -j"$jobs" --target "${targets[@]}" >"$out/build.log" 2>&1; then
  say "- build: FAILED (build.log)"
  tail -30 "$out/build.log"
  exit 1
fi
say "- build (configure + ${targets[*]}, -j$jobs): $(( $(date +%s) - t0 )) s"

# 2. The tests: the C API device tests and every test labelled cuda.
t0=$(date +%s)
ctest --test-dir "$build" -R '^(cuda: |capi: convert the oracle fixture)' --output-on-failure -j"$jobs" \
  >"$out/ctest.log" 2>&1
ctest_rc=$?
passed=$(grep -c ' Passed ' "$out/ctest.log")
skipped=$(grep -c '\*\*\*Skipped' "$out/ctest.log")
failed=$(grep -Ec '\*\*\*Failed|\*\*\*Exception|\*\*\*Timeout|Not Run' "$out/ctest.log")
say "- tests: $passed passed, $failed failed, $skipped skipped ($(( $(date +%s) - t0 )) s; ctest.log)"
if ((ctest_rc != 0 || failed != 0)); then
  status=1
  grep -E '\*\*\*Failed|\*\*\*Exception|\*\*\*Timeout' "$out/ctest.log" | tee -a "$report"
fi
if ((have_gpu)); then
  # On a GPU only the no-device test may skip; a device test that skips did not find the GPU.
  unexpected=$(grep '\*\*\*Skipped' "$out/ctest.log" | grep -v 'without a device is UNSUPPORTED' || true)
  if [[ -n $unexpected ]]; then
    say "- FAILED: device tests skipped on a GPU machine:"
    say "$unexpected"
    status=1
  fi
else
  # Without a GPU every device test must skip (ctest counts them above) with the message, and
  # the no-device test pass. ctest shows no skipped test's output: ask one case directly.
  skip_line=$("$build/tests/cuda/test_cuda_device" graph-replay 2>&1)
  skip_rc=$?
  if ((skip_rc != 77)) || [[ $skip_line != "no CUDA device: skipped"* ]]; then
    say "- FAILED: a device test without a device: exit $skip_rc, '$skip_line' (expected 77, 'no CUDA device: skipped ...')"
    status=1
  else
    say "- device tests without a device: $skip_line"
  fi
  if ! grep -E 'without a device is UNSUPPORTED.* Passed' "$out/ctest.log" >/dev/null; then
    say "- FAILED: the no-device test did not pass"
    status=1
  fi
fi

# 3. The benchmark (GPU only).
if ((have_gpu)); then
  t0=$(date +%s)
  say ""
  say "## cuda_bench (--shape $shape, bf16)"
  say ""
  if timeout 300 "$build/bench/cuda_bench" --make "$scratch" --shape "$shape" --dtype bf16 --reps 3 \
      --out "$out/bench.md" >"$out/bench.log" 2>&1; then
    cat "$out/bench.md" >>"$report"
    cat "$out/bench.md"
    say ""
    say "- benchmark: $(( $(date +%s) - t0 )) s (bench.log)"
  else
    say "- benchmark: FAILED or timed out after $(( $(date +%s) - t0 )) s (bench.log)"
    tail -20 "$out/bench.log"
    status=1
  fi
fi

say ""
say "- total: $(( $(date +%s) - start )) s; status $status"
exit $status
