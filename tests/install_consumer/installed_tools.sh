#!/usr/bin/env bash
# tests/install_consumer/installed_tools.sh BUILD_DIR WORK_DIR — the full `cmake --install`:
# bin/colibri, bin/colibri-model and the bundled model land in the prefix, the installed
# executables run from there, and they read only the prefix and given paths: with the
# installed model removed, `colibri run` fails naming the prefix's path, not the build tree's
# (no build-tree path is compiled in; docs/cli.md "The default model").
set -euo pipefail
build=$(realpath "$1")
work=$2
rm -rf "$work"
mkdir -p "$work"
prefix=$(realpath "$work")/prefix
cmake --install "$build" --prefix "$prefix" >"$work/install.log"

model=$prefix/share/colibri/models/colibri-tiny-moe.colibri
for f in bin/colibri bin/colibri-model share/colibri/models/colibri-tiny-moe.colibri; do
  [[ -e $prefix/$f ]] || { echo "missing from the install: $f" >&2; exit 1; }
done
if grep -qF "$build" "$prefix/bin/colibri" "$prefix/bin/colibri-model"; then
  echo "an installed executable contains the build directory's path $build:" >&2
  grep -aoF "$build" "$prefix/bin/colibri" "$prefix/bin/colibri-model" | sort -u >&2
  exit 1
fi

env -u LD_LIBRARY_PATH "$prefix/bin/colibri-model" verify "$model" >"$work/verify.log" 2>&1 ||
  { echo "installed colibri-model verify failed:" >&2; cat "$work/verify.log" >&2; exit 1; }
env -u LD_LIBRARY_PATH "$prefix/bin/colibri-model" inspect "$model" --json >"$work/inspect.json"
grep -q '"expert_count"' "$work/inspect.json" || { echo "inspect --json printed no header" >&2; exit 1; }

# The installed colibri finds the installed model (no -m).
env -u LD_LIBRARY_PATH "$prefix/bin/colibri" run -p "In the beginning" -n 4 --seed 1 >"$work/run.txt" 2>"$work/run.log" ||
  { echo "installed colibri run failed:" >&2; cat "$work/run.log" >&2; exit 1; }
[[ -s $work/run.txt ]] || { echo "installed colibri run printed no text" >&2; exit 1; }

# Without the installed model it does not fall back to the build tree's image.
mv "$model" "$model.away"
status=0
env -u LD_LIBRARY_PATH "$prefix/bin/colibri" run -p "x" -n 1 >"$work/missing.txt" 2>"$work/missing.log" || status=$?
mv "$model.away" "$model"
if ((status != 4)); then
  echo "with the installed model removed, colibri run exited $status (expected 4, the I/O code):" >&2
  cat "$work/missing.log" >&2
  exit 1
fi
grep -qF "share/colibri/models/colibri-tiny-moe.colibri" "$work/missing.log" ||
  { echo "the error does not name the install path:" >&2; cat "$work/missing.log" >&2; exit 1; }
if grep -qF -e "$build/models/" -e "$build/share/" -e "$build/cli/" "$work/missing.log"; then
  echo "the installed colibri looked in the build tree:" >&2
  cat "$work/missing.log" >&2
  exit 1
fi
echo "installed tools: colibri-model verify/inspect and colibri run work from the prefix, and read nothing of the build tree"
