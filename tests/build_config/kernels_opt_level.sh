#!/usr/bin/env bash
# tests/build_config/kernels_opt_level.sh SOURCE_DIR WORK_DIR [CMAKE NINJA CXX CC] — configures
# SOURCE_DIR (no build; with the given tools, else those on PATH and the default compilers) as
# Release and as RelWithDebInfo and checks that the kernels' translation units
# compile at -O3 in both: the tiles need -O3's unrolling to keep their accumulators in
# registers (a RelWithDebInfo build at -O2 ran decode 10-28% slower; kernels/CMakeLists.txt).
# The last -O on a GCC command line is the one that counts.
set -euo pipefail
src=$1 work=$2 cmake=${3:-cmake} ninja=${4:-ninja}
compilers=()
[[ -n ${5:-} ]] && compilers+=("-DCMAKE_CXX_COMPILER=$5")
[[ -n ${6:-} ]] && compilers+=("-DCMAKE_C_COMPILER=$6")
rm -rf "$work"
mkdir -p "$work"
status=0
for config in Release RelWithDebInfo; do
  dir=$work/$config
  "$cmake" -S "$src" -B "$dir" -G Ninja -DCMAKE_MAKE_PROGRAM="$ninja" "${compilers[@]}" -DCMAKE_BUILD_TYPE="$config" \
    -DCOLIBRI_TESTS=OFF -DCOLIBRI_BENCH=OFF -DCOLIBRI_CUDA=OFF >"$work/$config.log" 2>&1 ||
    { cat "$work/$config.log" >&2; exit 1; }
  commands=$("$ninja" -C "$dir" -t commands colibri_kernels)
  checked=0
  for unit in scalar.cpp avx2.cpp avx512.cpp avx512_vnni.cpp dispatch.cpp; do
    line=$(grep -E -- "-c [^ ]*/kernels/cpu/$unit( |\$)" <<<"$commands" || true)
    [[ -n $line ]] || continue  # avx2/avx512 units exist on x86-64 only
    level=
    read -ra words <<<"$line"
    for word in "${words[@]}"; do
      if [[ $word =~ ^-O[0-9sgz]?$ ]]; then level=$word; fi
    done
    if [[ $level != -O3 ]]; then
      echo "$config: kernels/cpu/$unit compiles at ${level:-no -O flag}, want -O3:" >&2
      echo "  $line" >&2
      status=1
    fi
    checked=$((checked + 1))
  done
  if ((checked < 2)); then
    echo "$config: found $checked kernel compile commands in 'ninja -t commands colibri_kernels'" >&2
    status=1
  fi
  echo "$config: $checked kernel translation units checked"
done
exit $status
