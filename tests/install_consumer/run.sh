#!/usr/bin/env bash
# tests/install_consumer/run.sh BUILD_DIR WORK_DIR IMAGE — installs BUILD_DIR's libcolibri
# component into a fresh prefix with `cmake --install`, checks the installed files, then builds consumer.c twice
# against that prefix (pkg-config; find_package(colibri)) and runs both on IMAGE.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$1 work=$2 image=$3
rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix
# Only the library's component: the other executables need not be built for this test.
cmake --install "$build" --prefix "$prefix" --component libcolibri >"$work/install.log"

libdir=$(cd "$prefix" && dirname "$(find . -name 'libcolibri.so.1' | head -1)")
[[ $libdir != . ]] || { echo "libcolibri.so.1 was not installed" >&2; exit 1; }
for f in include/colibri.h "$libdir/libcolibri.so" "$libdir/libcolibri.so.1" "$libdir/pkgconfig/colibri.pc" \
  "$libdir/cmake/colibri/colibriConfig.cmake" "$libdir/cmake/colibri/colibriConfigVersion.cmake"; do
  [[ -e $prefix/$f ]] || { echo "missing from the install: $f" >&2; exit 1; }
done
ls "$prefix/$libdir"/libcolibri.so.1.* >/dev/null
# The CUDA backend module, when this build has one, is installed next to the library (where
# libcolibri looks for it).
if [[ -e $build/capi/libcolibri_cuda.so ]]; then
  [[ -e $prefix/$libdir/libcolibri_cuda.so ]] || { echo "missing from the install: $libdir/libcolibri_cuda.so" >&2; exit 1; }
fi

# 1. pkg-config, with the rpath line of docs/api.md ("Building and linking"): the program must
# start with no LD_LIBRARY_PATH, the prefix being off the loader's path.
export PKG_CONFIG_PATH=$prefix/$libdir/pkgconfig
pc_libdir=$(pkg-config --variable=libdir colibri)
[[ $(realpath "$pc_libdir") == $(realpath "$prefix/$libdir") ]] ||
  { echo "pkg-config --variable=libdir gave $pc_libdir, expected $prefix/$libdir" >&2; exit 1; }
# shellcheck disable=SC2046 # the flags are words
${CC:-cc} -std=c99 -Wall -Wextra -Wpedantic -Werror "$here/consumer.c" $(pkg-config --cflags --libs colibri) \
  -Wl,-rpath,"$(pkg-config --variable=libdir colibri)" -o "$work/consumer-pkgconfig"
env -u LD_LIBRARY_PATH "$work/consumer-pkgconfig" "$image"
# ... and without the rpath line it does not start: the line is needed, not decoration.
# shellcheck disable=SC2046
${CC:-cc} -std=c99 "$here/consumer.c" $(pkg-config --cflags --libs colibri) -o "$work/consumer-no-rpath"
if env -u LD_LIBRARY_PATH "$work/consumer-no-rpath" "$image" >"$work/no-rpath.log" 2>&1; then
  if ! ldconfig -p 2>/dev/null | grep -q 'libcolibri\.so\.1 '; then
    echo "a consumer built without the rpath line started although libcolibri.so.1 is not on the loader path" >&2
    exit 1
  fi
else
  grep -q 'libcolibri.so.1: cannot open shared object file' "$work/no-rpath.log" ||
    { echo "the consumer without rpath failed for another reason:" >&2; cat "$work/no-rpath.log" >&2; exit 1; }
fi
unset PKG_CONFIG_PATH

# 2. find_package(colibri)
cmake -S "$here" -B "$work/cmake" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_RPATH="$prefix/$libdir" >/dev/null
cmake --build "$work/cmake" >/dev/null
"$work/cmake/consumer" "$image"
echo "install consumer: pkg-config and find_package builds both ran"
