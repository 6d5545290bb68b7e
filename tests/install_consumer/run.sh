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

# 1. pkg-config
flags=$(PKG_CONFIG_PATH=$prefix/$libdir/pkgconfig pkg-config --cflags --libs colibri)
${CC:-cc} -std=c99 -Wall -Wextra -Wpedantic -Werror "$here/consumer.c" $flags -Wl,-rpath,"$prefix/$libdir" \
  -o "$work/consumer-pkgconfig"
"$work/consumer-pkgconfig" "$image"

# 2. find_package(colibri)
cmake -S "$here" -B "$work/cmake" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_RPATH="$prefix/$libdir" >/dev/null
cmake --build "$work/cmake" >/dev/null
"$work/cmake/consumer" "$image"
echo "install consumer: pkg-config and find_package builds both ran"
