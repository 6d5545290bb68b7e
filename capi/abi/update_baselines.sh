#!/usr/bin/env bash
# capi/abi/update_baselines.sh BUILD_DIR — rewrites the committed ABI baselines from a build:
# symbols.txt, constants.txt, layout.txt and libcolibri.abi. Run it only for an intended, compatible
# change (a new function, a new constant, a field appended to an options/output struct), after
# check_abi.sh told you what changed; commit the baselines with the change, so the review
# shows the ABI diff. Never for a removal or a changed value: that needs a new ABI generation
# (COLIBRI_ABI_VERSION 2, libcolibri.so.2).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:?usage: update_baselines.sh BUILD_DIR}
lib=$build/capi/libcolibri.so.1
[[ -e $lib ]] || { echo "no $lib: build the colibri target first" >&2; exit 1; }
{
  echo "# capi/abi/symbols.txt — the dynamic symbols libcolibri.so.1 exports (check_abi.sh symbols)."
  echo "# Only additions are allowed within ABI generation 1."
  bash "$here/check_abi.sh" list-symbols "$lib"
} >"$here/symbols.txt"
{
  echo "# capi/abi/constants.txt — every enumerated COLIBRI_* constant of colibri.h and its value"
  echo "# (check_abi.sh constants). Values never change meaning; only additions are allowed."
  bash "$here/check_abi.sh" constant-values "$here/../colibri.h"
} >"$here/constants.txt"
{
  echo "# capi/abi/layout.txt — offset, size and type of every field of every public struct, and each"
  echo "# struct's size (check_abi.sh layout). Fields may only be appended; colibri_chat_message is frozen."
  bash "$here/check_abi.sh" layout-values "$here/../colibri.h"
} >"$here/layout.txt"
bash "$here/check_abi.sh" dump "$lib" "$here/.." >"$here/libcolibri.abi"
echo "updated symbols.txt, constants.txt, layout.txt, libcolibri.abi from $lib"
