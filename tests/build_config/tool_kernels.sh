#!/usr/bin/env bash
# The model tool builds and links the scalar reference kernels only (it quantises with them),
# none of the SIMD tables: kernels/CMakeLists.txt splits colibri_kernels_scalar out so that the
# tool, and the fuzz and sanitizer builds of it, skip the AVX-512 files (the slowest to build).
# Usage: tool_kernels.sh NINJA BUILD_DIR TARGET BINARY
set -euo pipefail
ninja=$1 build_dir=$2 target=$3 exe=$4
fail() { echo "FAIL: $*" >&2; exit 1; }

# What building the target compiles.
sources=$("$ninja" -C "$build_dir" -t commands "$target" | grep -oE '[^ ]*kernels/cpu/[a-z0-9_]+\.cpp' | sort -u)
grep -q '/scalar\.cpp$' <<<"$sources" || fail "building $target does not compile kernels/cpu/scalar.cpp:"$'\n'"$sources"
if grep -qE '/(avx2|avx512|avx512_vnni|dispatch)\.cpp$' <<<"$sources"; then
  fail "building $target compiles SIMD kernels (colibri_image must link colibri_kernels_scalar only):"$'\n'"$sources"
fi

# What the binary links.
symbols=$(nm -C "$exe")
grep -q 'colibri::kernels::scalar_kernel_table()' <<<"$symbols" ||
  fail "$exe does not define scalar_kernel_table(): built from other sources, or stripped?"
if grep -qE 'colibri::kernels::detail::(avx2|avx512|avx512_vnni)_table\(\)' <<<"$symbols"; then
  fail "$exe links a SIMD kernel table"
fi
echo "ok: $target compiles and links the scalar kernels only"
