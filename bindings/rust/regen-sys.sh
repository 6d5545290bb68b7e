#!/usr/bin/env bash
# bindings/rust/regen-sys.sh — the crate's raw declarations are Debian bindgen's output for
# capi/colibri.h (src/sys/colibri_h.rs, committed; build.rs turns its function declarations
# into the dlsym table). This script regenerates it, or with --check verifies that the
# committed file is what bindgen makes of the current header (ctest "rust binding: ...").
#
# Usage: regen-sys.sh [--check] [HEADER]        (HEADER default: ../../capi/colibri.h)
# Exit: 0 ok; 1 out of date (--check); 77 bindgen missing (ctest SKIP_RETURN_CODE).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
check=0
if [[ ${1:-} == --check ]]; then check=1; shift; fi
header=${1:-$here/../../capi/colibri.h}
committed=$here/src/sys/colibri_h.rs

if ! command -v bindgen >/dev/null; then
  echo "regen-sys: bindgen not found (Debian package bindgen; scripts/install-deps.sh installs it): skipped"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The flags are part of the contract with build.rs and src/sys.rs: keep them in sync.
bindgen "$header" \
  --allowlist-function 'colibri_.*' --allowlist-type 'colibri_.*' --allowlist-var 'COLIBRI_.*' \
  --no-doc-comments --use-core --ctypes-prefix '::std::os::raw' --size_t-is-usize \
  -o "$tmp/colibri_h.rs" 2>"$tmp/stderr" || { cat "$tmp/stderr"; exit 1; }

if ((check == 0)); then
  cp "$tmp/colibri_h.rs" "$committed"
  echo "regen-sys: wrote $committed from $header"
  exit 0
fi
# Compare tokens, not formatting: bindgen formats with whatever rustfmt is on PATH (or not at
# all), so whitespace and trailing commas are ignored.
normalize() { tr -d ' \t\n,' <"$1"; }
if [[ "$(normalize "$tmp/colibri_h.rs")" == "$(normalize "$committed")" ]]; then
  echo "regen-sys: src/sys/colibri_h.rs is bindgen's output for $header"
  exit 0
fi
echo "regen-sys: src/sys/colibri_h.rs is out of date with $header; run bindings/rust/regen-sys.sh and review the diff:"
diff -u "$committed" "$tmp/colibri_h.rs" | head -80 || true
exit 1
