#!/usr/bin/env bash
# capi/abi/check_abi.sh — the ABI checks of libcolibri.so.1 (run by ctest, see
# tests/capi/CMakeLists.txt; what each check guards is in capi/abi/README.md).
#
#   check_abi.sh symbols    LIB SYMBOLS_TXT        exported symbols == the committed list
#   check_abi.sh no-cxx     LIB                    only colibri_* exported, no C++ (_Z) symbols
#   check_abi.sh dynamic    LIB                    SONAME libcolibri.so.1, NODELETE, no STATIC_TLS,
#                                                  no TEXTREL, no libstdc++/libgcc_s or libnuma needed
#   check_abi.sh no-glibcxx LIB                    no GLIBCXX_/CXXABI_/GCC_ symbol versions imported
#   check_abi.sh constants  HEADER CONSTANTS_TXT   every #define COLIBRI_* value == the committed list
#   check_abi.sh layout     HEADER LAYOUT_TXT      every public struct field's offset, size and type
#                                                  == the committed list; only appended fields are
#                                                  compatible (colibri_chat_message and
#                                                  colibri_token_logprob are frozen)
#   check_abi.sh header     HEADER                 the header alone compiles as C99/C11/C++11/C++20
#                                                  with -Wall -Wextra -Wpedantic -Werror, and
#                                                  includes only <stddef.h> and <stdint.h>
#   check_abi.sh abidiff    LIB BASELINE_ABI HEADERS_DIR
#                                                  abidiff vs the committed abidw baseline; only
#                                                  added functions and fields appended to options /
#                                                  output structs are allowed (abidiff.suppr)
#   check_abi.sh dump       LIB HEADERS_DIR        print the abidw description (baseline format)
#
# Exit status 0 = as committed; 1 = an incompatible change (explained on stderr); 2 = usage;
# 3 = a compatible addition (new symbol, constant, appended field) not yet in the baselines;
# 4 = the check could not run (a tool missing or failing, an input it cannot evaluate): never a
# verdict about the ABI. capi/abi/selftest.sh expects these codes exactly.
# To accept an intended, compatible change (a new function, a new constant, an appended
# field), run capi/abi/update_baselines.sh BUILD_DIR and commit the diff with the change.
set -Eeuo pipefail
# Any command failing unexpectedly (set -e) is "could not run", not "incompatible".
trap 'echo "check_abi: internal failure at line $LINENO (status $?)" >&2; exit 4' ERR

here=$(cd "$(dirname "$0")" && pwd)
CC=${CC:-cc}
CXX=${CXX:-c++}

die() {
  echo "check_abi: $*" >&2
  exit 1
}

# The check itself could not run: status 4 (see the header).
cannot_run() {
  echo "check_abi: cannot run the check: $*" >&2
  exit 4
}

exported_symbols() {
  # Defined dynamic symbols, without version suffixes.
  nm -D --defined-only "$1" | awk 'NF >= 3 {print $3}' | sed 's/@.*//' | LC_ALL=C sort -u
}

committed_list() {
  grep -v '^[[:space:]]*#' "$1" | grep -v '^[[:space:]]*$' | LC_ALL=C sort -u
}

check_symbols() {
  local lib=$1 list=$2
  local actual expected removed added
  actual=$(exported_symbols "$lib")
  expected=$(committed_list "$list")
  removed=$(LC_ALL=C comm -13 <(echo "$actual") <(echo "$expected"))
  added=$(LC_ALL=C comm -23 <(echo "$actual") <(echo "$expected"))
  if [[ -n $removed ]]; then
    echo "INCOMPATIBLE: symbols in $list are no longer exported (removing a function breaks every caller):" >&2
    echo "$removed" | sed 's/^/  - /' >&2
  fi
  if [[ -n $added ]]; then
    echo "new exported symbols not in $list (if intended, add them: capi/abi/update_baselines.sh):" >&2
    echo "$added" | sed 's/^/  + /' >&2
  fi
  [[ -z $removed ]] || exit 1
  [[ -z $added ]] || exit 3
  echo "symbols: $(echo "$actual" | wc -l) exported symbols match $(basename "$list")"
}

check_no_cxx() {
  local lib=$1 bad
  bad=$(exported_symbols "$lib" | grep -v '^colibri_' || true)
  if [[ -n $bad ]]; then
    echo "exported symbols outside the C API (C++ or runtime symbols leak through the version script):" >&2
    echo "$bad" | head -20 | sed 's/^/  /' >&2
    exit 1
  fi
  echo "no-cxx: every exported symbol is colibri_*"
}

check_dynamic() {
  local lib=$1 dyn
  dyn=$(readelf -d "$lib")
  grep -q 'Library soname: \[libcolibri\.so\.1\]' <<<"$dyn" || die "SONAME is not libcolibri.so.1: $(grep SONAME <<<"$dyn")"
  grep -E '\(FLAGS_1\)' <<<"$dyn" | grep -q NODELETE || die "DF_1_NODELETE missing (link with -z nodelete)"
  if grep -E '\(FLAGS\)' <<<"$dyn" | grep -q STATIC_TLS; then
    die "the library has the STATIC_TLS flag: a late dlopen can fail ('cannot allocate memory in static TLS block'); build with -ftls-model=global-dynamic and find the initial-exec TLS access (readelf -r | grep TPOFF)"
  fi
  if grep -qE '\(TEXTREL\)' <<<"$dyn" || grep -E '\(FLAGS\)' <<<"$dyn" | grep -q TEXTREL; then
    die "the library has text relocations (a non-PIC object was linked in)"
  fi
  if grep -E '\(NEEDED\)' <<<"$dyn" | grep -qE 'libstdc\+\+|libgcc_s'; then
    [[ ${COLIBRI_ABI_ALLOW_SHARED_LIBSTDCXX:-0} == 1 ]] || die "the library needs the shared libstdc++/libgcc_s (link with -static-libstdc++ -static-libgcc)"
  fi
  if grep -E '\(NEEDED\)' <<<"$dyn" | grep -q 'libnuma'; then
    die "the library links libnuma: it must load it at run time (core/util/numa.cpp), so that it loads on machines without libnuma"
  fi
  echo "dynamic: SONAME libcolibri.so.1, NODELETE, no STATIC_TLS, no TEXTREL, no libnuma"
}

check_no_glibcxx() {
  local lib=$1 bad
  bad=$(objdump -T "$lib" | grep -oE '(GLIBCXX|CXXABI|GCC)_[0-9.]+' | LC_ALL=C sort -u || true)
  if [[ -n $bad ]]; then
    echo "the library imports C++ runtime symbol versions, so it needs a libstdc++ at least that new:" >&2
    echo "$bad" | sed 's/^/  /' >&2
    exit 1
  fi
  echo "no-glibcxx: no GLIBCXX_/CXXABI_/GCC_ versions required"
}

# The names of the enumerated constants: object-like #define COLIBRI_* macros, except the
# include guard, the export macro and the release version (which changes every release).
constant_names() {
  sed -n 's/^[[:space:]]*#[[:space:]]*define[[:space:]]\{1,\}\(COLIBRI_[A-Z0-9_]\{1,\}\)[[:space:]].*/\1/p' "$1" |
    grep -vE '^(COLIBRI_H|COLIBRI_API|COLIBRI_VERSION_[A-Z_]+)$' | LC_ALL=C sort -u
}

# "NAME VALUE" for every constant, evaluated by the C++ compiler from the header itself.
constant_values() {
  local header dir
  header=$(realpath "$1")
  dir=$(mktemp -d)
  {
    echo '#include <cinttypes>'
    echo '#include <cstdio>'
    echo '#include <type_traits>'
    echo "#include \"$header\""
    echo 'template <class T> void print(const char *name, T value) {'
    echo '  if constexpr (std::is_signed_v<T>) std::printf("%s %lld\n", name, static_cast<long long>(value));'
    echo '  else std::printf("%s %llu\n", name, static_cast<unsigned long long>(value));'
    echo '}'
    echo 'int main() {'
    for name in $(constant_names "$header"); do echo "  print(\"$name\", $name);"; done
    echo '}'
  } >"$dir/constants.cpp"
  "$CXX" -std=c++17 -o "$dir/constants" "$dir/constants.cpp" || {
    rm -rf "$dir"
    cannot_run "cannot evaluate the constants of $header"
  }
  "$dir/constants" | LC_ALL=C sort
  rm -rf "$dir"
}

check_constants() {
  local header=$1 list=$2 actual expected changed=0
  actual=$(constant_values "$header")
  expected=$(committed_list "$list")
  declare -A want have
  while read -r name value; do want[$name]=$value; done <<<"$expected"
  while read -r name value; do have[$name]=$value; done <<<"$actual"
  local additions=0
  for name in "${!want[@]}"; do
    if [[ -z ${have[$name]+x} ]]; then
      echo "INCOMPATIBLE: $name (= ${want[$name]}) was removed from the header" >&2
      changed=1
    elif [[ ${have[$name]} != "${want[$name]}" ]]; then
      echo "INCOMPATIBLE: $name changed value: ${want[$name]} -> ${have[$name]} (values never change meaning)" >&2
      changed=1
    fi
  done
  for name in "${!have[@]}"; do
    if [[ -z ${want[$name]+x} ]]; then
      echo "new constant $name = ${have[$name]} is not in $list (if intended, add it: capi/abi/update_baselines.sh)" >&2
      additions=1
    fi
  done
  [[ $changed == 0 ]] || exit 1
  [[ $additions == 0 ]] || exit 3
  echo "constants: $(echo "$actual" | wc -l) constants match $(basename "$list")"
}

check_header() {
  local header dir includes
  header=$(realpath "$1")
  includes=$(grep -E '^[[:space:]]*#[[:space:]]*include' "$header" | grep -vE '<(stddef|stdint)\.h>' || true)
  [[ -z $includes ]] || die "the header includes more than <stddef.h> and <stdint.h>: $includes"
  dir=$(mktemp -d)
  printf '#include "%s"\n#include "%s"\nint main(void) { return (int)colibri_abi_version() - COLIBRI_ABI_VERSION; }\n' \
    "$header" "$header" >"$dir/alone.c"
  cp "$dir/alone.c" "$dir/alone.cpp"
  local flags=(-Wall -Wextra -Wpedantic -Werror -fsyntax-only)
  local std
  for std in c99 c11; do
    "$CC" -std=$std "${flags[@]}" "$dir/alone.c" || die "the header does not compile as $std"
  done
  for std in c++11 c++20; do
    "$CXX" -std=$std "${flags[@]}" "$dir/alone.cpp" || die "the header does not compile as $std"
  done
  if command -v clang >/dev/null; then
    clang -std=c99 "${flags[@]}" "$dir/alone.c" || die "the header does not compile with clang as C99"
  fi
  rm -rf "$dir"
  echo "header: compiles alone as C99, C11, C++11, C++20 (-Wall -Wextra -Wpedantic -Werror)"
}

# "STRUCT FIELD OFFSET SIZE TYPE" for every field of every public struct, plus
# "STRUCT sizeof SIZE", evaluated by the C compiler from the preprocessed header (so comments
# and macros are gone). Fields are one per line in colibri.h, which this relies on.
layout_values() {
  local header dir
  header=$(realpath "$1")
  dir=$(mktemp -d)
  "$CC" -std=c99 -E -P "$header" |
    awk '/^typedef struct colibri_[a-z_0-9]+ \{/ { name = $3; next }
         name != "" && /^\} colibri_[a-z_0-9]+;/ { print name, "sizeof"; name = ""; next }
         name != "" && /;/ {
           line = $0; sub(/;.*/, "", line); gsub(/^[ \t]+|[ \t]+$/, "", line); gsub(/[ \t]+/, " ", line)
           dims = ""; if (match(line, /\[.*\]$/)) { dims = substr(line, RSTART); line = substr(line, 1, RSTART - 1) }
           n = split(line, part, " "); field = part[n]; sub(/^\*+/, "", field)
           type = substr(line, 1, length(line) - length(field)); gsub(/ +$/, "", type); gsub(/ /, "_", type)
           print name, field, type dims
         }' >"$dir/fields"
  {
    echo '#include <stddef.h>'
    echo '#include <stdio.h>'
    echo "#include \"$header\""
    echo 'int main(void) {'
    while read -r struct field type; do
      if [[ $field == sizeof ]]; then
        echo "  printf(\"%s sizeof %zu\\n\", \"$struct\", sizeof($struct));"
      else
        echo "  printf(\"%s %s %zu %zu %s\\n\", \"$struct\", \"$field\", offsetof($struct, $field), sizeof((($struct *)0)->$field), \"$type\");"
      fi
    done <"$dir/fields"
    echo '  return 0;'
    echo '}'
  } >"$dir/layout.c"
  "$CC" -std=c99 -o "$dir/layout" "$dir/layout.c" || {
    rm -rf "$dir"
    cannot_run "cannot evaluate the struct layouts of $header"
  }
  "$dir/layout" | LC_ALL=C sort
  rm -rf "$dir"
}

# Structs whose size is a stride in arrays: they can never grow.
frozen_structs=" colibri_chat_message colibri_token_logprob "

check_layout() {
  local header=$1 list=$2 incompatible=0 additions=0
  local actual expected
  actual=$(layout_values "$header")
  expected=$(committed_list "$list")
  declare -A want have
  local struct field rest
  while read -r struct field rest; do want["$struct $field"]=$rest; done <<<"$expected"
  while read -r struct field rest; do have["$struct $field"]=$rest; done <<<"$actual"
  local key old_size
  for key in "${!want[@]}"; do
    read -r struct field <<<"$key"
    if [[ -z ${have[$key]+x} ]]; then
      echo "INCOMPATIBLE: $struct.$field was removed or renamed (was: ${want[$key]})" >&2
      incompatible=1
    elif [[ ${have[$key]} != "${want[$key]}" ]]; then
      if [[ $field == sizeof ]] && ((${have[$key]} > ${want[$key]})) && [[ $frozen_structs != *" $struct "* ]]; then
        additions=1  # grew: checked field by field below
      else
        echo "INCOMPATIBLE: $struct.$field changed: '${want[$key]}' -> '${have[$key]}' (offset size type)" >&2
        incompatible=1
      fi
    fi
  done
  for key in "${!have[@]}"; do
    [[ -z ${want[$key]+x} ]] || continue
    read -r struct field <<<"$key"
    old_size=${want["$struct sizeof"]:-}
    if [[ -z $old_size ]]; then
      [[ $field == sizeof ]] || echo "new struct member $struct.$field (a new struct: add it with capi/abi/update_baselines.sh)" >&2
      additions=1
    elif [[ $frozen_structs == *" $struct "* ]]; then
      echo "INCOMPATIBLE: $struct is frozen (used in arrays) but has a new field $field" >&2
      incompatible=1
    elif (($(awk '{print $1}' <<<"${have[$key]}") < old_size)); then
      echo "INCOMPATIBLE: new field $struct.$field at offset $(awk '{print $1}' <<<"${have[$key]}") is not appended (the struct had $old_size bytes)" >&2
      incompatible=1
    else
      echo "compatible: $struct.$field appended (record it with capi/abi/update_baselines.sh)" >&2
      additions=1
    fi
  done
  ((incompatible == 0)) || exit 1
  ((additions == 0)) || exit 3
  echo "layout: $(echo "$actual" | wc -l) struct fields match $(basename "$list")"
}

# The abidw description: only the exported C interface, no source locations, hashed type ids,
# so it does not depend on where or by which build it was made.
abi_dump() {
  local lib=$1 headers=$2
  abidw --headers-dir "$headers" --drop-private-types --exported-interfaces-only --drop-undefined-syms \
    --no-corpus-path --no-comp-dir-path --no-show-locs --no-elf-needed --type-id-style hash "$lib"
}

check_abidiff() {
  local lib=$1 baseline=$2 headers=$3 dir status=0
  command -v abidiff >/dev/null || cannot_run "abidiff not found (Debian package abigail-tools)"
  dir=$(mktemp -d)
  abi_dump "$lib" "$headers" >"$dir/current.abi"
  abidiff --no-added-syms --suppressions "$here/abidiff.suppr" "$baseline" "$dir/current.abi" >"$dir/report" || status=$?
  # Bits of abidiff's status: 1 error, 2 usage, 4 ABI change, 8 incompatible change.
  if ((status != 0)); then
    cat "$dir/report" >&2
    if ((status & 3)); then
      rm -rf "$dir"
      cannot_run "abidiff failed to run (status $status)"
    else
      echo "ABI CHANGE against $(basename "$baseline") (abidiff status $status): only new functions and fields" \
        "appended to the end of options/output structs are compatible. If this is one of those, the suppressions" \
        "in capi/abi/abidiff.suppr should have hidden it; otherwise it breaks existing callers." >&2
    fi
    rm -rf "$dir"
    exit 1
  fi
  rm -rf "$dir"
  echo "abidiff: compatible with $(basename "$baseline")"
}

cmd=${1:-}
shift || true
case $cmd in
  symbols) check_symbols "$@" ;;
  no-cxx) check_no_cxx "$@" ;;
  dynamic) check_dynamic "$@" ;;
  no-glibcxx) check_no_glibcxx "$@" ;;
  constants) check_constants "$@" ;;
  constant-values) constant_values "$@" ;;
  layout) check_layout "$@" ;;
  layout-values) layout_values "$@" ;;
  header) check_header "$@" ;;
  abidiff) check_abidiff "$@" ;;
  dump) abi_dump "$@" ;;
  list-symbols) exported_symbols "$@" ;;
  *)
    awk 'NR > 1 && /^#/ {print; next} NR > 1 {exit}' "$0" >&2
    exit 2
    ;;
esac
