#!/usr/bin/env bash
# capi/abi/selftest.sh HEADER LIB WORKDIR — proves that the ABI checks of check_abi.sh catch
# incompatible changes and accept compatible ones, by feeding them deliberately modified
# inputs: edited copies of colibri.h and of the committed lists, and small probe libraries
# built from the edited headers (abidiff) or with the defects the other checks look for.
# Each case expects check_abi.sh's own status exactly (0 pass, 1 incompatible, 3 addition):
# a checker that crashes or cannot run (status 4, 127, a signal...) is never the expected
# failure. Without abidiff (Debian: abigail-tools) the abidiff cases are skipped, said so,
# and every other case runs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
header=$(realpath "$1")
lib=$(realpath "$2")
work=$3
CC=${CC:-cc}
CXX=${CXX:-c++}
rm -rf "$work"
mkdir -p "$work"
check="$here/check_abi.sh"
failures=0

have_abidiff=0
if command -v abidiff >/dev/null && command -v abidw >/dev/null; then have_abidiff=1; fi
skipped=0

# The verdict a check_abi.sh status stands for: pass (0), fail (1: incompatible), add (3: a
# compatible addition the baselines do not record yet); anything else is the checker itself
# failing, named with its status.
verdict() {
  case $1 in 0) echo pass ;; 1) echo fail ;; 3) echo add ;; *) echo "checker-error(status $1)" ;; esac
}

# expect pass|fail|add DESCRIPTION -- COMMAND...
expect() {
  local want=$1 what=$2 status=0 got
  shift 3
  "$@" >"$work/last.log" 2>&1 || status=$?
  got=$(verdict "$status")
  if [[ $got == "$want" ]]; then
    echo "ok: $what ($got as expected)"
  else
    echo "SELFTEST FAILURE: $what: the check gave '$got', expected '$want'. Its output:"
    sed 's/^/    /' "$work/last.log"
    failures=$((failures + 1))
  fi
}

# A copy of the header with one edit (a sed script) in its own directory.
variant() {
  local name=$1 script=$2
  mkdir -p "$work/$name"
  sed -e "$script" "$header" >"$work/$name/colibri.h"
  if cmp -s "$header" "$work/$name/colibri.h"; then
    echo "SELFTEST BROKEN: the edit '$script' did not change the header"
    exit 1
  fi
}

# ---- the harness: a crashing or missing checker is not an expected failure ------------------------
for status in 2 4 127 139; do
  if [[ $(verdict $status) == fail ]]; then
    echo "SELFTEST BROKEN: status $status would count as the expected 'fail'"
    exit 1
  fi
done
expect_status() { # WANT_STATUS DESCRIPTION -- COMMAND...: the checker's exact status
  local want=$1 what=$2 status=0
  shift 3
  "$@" >"$work/last.log" 2>&1 || status=$?
  if ((status == want)); then
    echo "ok: $what (status $status as expected)"
  else
    echo "SELFTEST FAILURE: $what: status $status, expected $want. Its output:"
    sed 's/^/    /' "$work/last.log"
    failures=$((failures + 1))
  fi
}
expect_status 2 "usage: an unknown check name" -- bash "$check" no-such-check
expect_status 4 "cannot run: constants of a header that does not compile" -- \
  bash "$check" constants /dev/null/missing.h /dev/null
printf 'colibri_x\n' >"$work/one-symbol.txt"
expect_status 4 "cannot run: symbols of a file that is not a library" -- bash "$check" symbols "$work/one-symbol.txt" "$work/one-symbol.txt"

# ---- exported symbols ------------------------------------------------------------------------
bash "$check" list-symbols "$lib" >"$work/symbols.txt"
expect pass "symbols: the library's own list" -- bash "$check" symbols "$lib" "$work/symbols.txt"
{ cat "$work/symbols.txt"; echo colibri_function_that_was_removed; } >"$work/symbols-removed.txt"
expect fail "symbols: a committed function is no longer exported" -- bash "$check" symbols "$lib" "$work/symbols-removed.txt"
grep -v '^colibri_generate$' "$work/symbols.txt" >"$work/symbols-added.txt"
expect add "symbols: an exported function is not in the list" -- bash "$check" symbols "$lib" "$work/symbols-added.txt"

# ---- constants -------------------------------------------------------------------------------
bash "$check" constant-values "$header" >"$work/constants.txt"
expect pass "constants: unchanged header" -- bash "$check" constants "$header" "$work/constants.txt"
variant changed-value 's/^#define COLIBRI_ERROR_IO (-2)/#define COLIBRI_ERROR_IO (-20)/'
expect fail "constants: COLIBRI_ERROR_IO changed value" -- bash "$check" constants "$work/changed-value/colibri.h" "$work/constants.txt"
variant removed-constant '/^#define COLIBRI_FINISH_STOP /d'
expect fail "constants: COLIBRI_FINISH_STOP removed" -- bash "$check" constants "$work/removed-constant/colibri.h" "$work/constants.txt"
variant flag-changed 's/^#define COLIBRI_TOKENIZE_PARSE_SPECIAL 2u/#define COLIBRI_TOKENIZE_PARSE_SPECIAL 4u/'
expect fail "constants: a flag bit moved" -- bash "$check" constants "$work/flag-changed/colibri.h" "$work/constants.txt"

variant added-constant 's/^#define COLIBRI_LOG_OFF 4/#define COLIBRI_LOG_OFF 4\n#define COLIBRI_LOG_TRACE 5/'
expect add "constants: a new constant" -- bash "$check" constants "$work/added-constant/colibri.h" "$work/constants.txt"

# ---- struct layouts --------------------------------------------------------------------------
bash "$check" layout-values "$header" >"$work/layout.txt"
expect pass "layout: unchanged header" -- bash "$check" layout "$header" "$work/layout.txt"
variant l-appended 's/^} colibri_session_options;/  uint64_t appended_later;\n} colibri_session_options;/'
expect add "layout: a field appended to colibri_session_options" -- bash "$check" layout "$work/l-appended/colibri.h" "$work/layout.txt"
variant l-swapped '/^typedef struct colibri_session_options/,/^} colibri_session_options/{/^  uint32_t threads; /{h;d};/^  uint32_t pin_threads; /G}'
expect fail "layout: two same-typed fields of colibri_session_options swapped" -- bash "$check" layout "$work/l-swapped/colibri.h" "$work/layout.txt"
variant l-inserted 's/^  uint32_t context_length; /  uint32_t inserted_in_the_middle;\n  uint32_t context_length; /'
expect fail "layout: a field inserted in the middle" -- bash "$check" layout "$work/l-inserted/colibri.h" "$work/layout.txt"
variant l-narrowed 's/^  uint64_t tokens;            \/\* batch entries processed \*\//  uint32_t tokens;/'
expect fail "layout: colibri_stats.tokens narrowed to 32 bits (same offsets thanks to padding)" -- bash "$check" layout "$work/l-narrowed/colibri.h" "$work/layout.txt"
variant l-signed 's/^  uint32_t max_tokens; /  int32_t max_tokens; /'
expect fail "layout: a field's type changed at the same size (uint32_t -> int32_t)" -- bash "$check" layout "$work/l-signed/colibri.h" "$work/layout.txt"
variant l-chat 's/^} colibri_chat_message;/  const char *name;\n} colibri_chat_message;/'
expect fail "layout: a field appended to the frozen colibri_chat_message" -- bash "$check" layout "$work/l-chat/colibri.h" "$work/layout.txt"
variant l-logprob 's/^} colibri_token_logprob;/  uint32_t rank;\n} colibri_token_logprob;/'
expect fail "layout: a field appended to the frozen colibri_token_logprob" -- bash "$check" layout "$work/l-logprob/colibri.h" "$work/layout.txt"
variant l-removed '/^  uint64_t expert_activations; /d'
expect fail "layout: the last field of colibri_stats removed" -- bash "$check" layout "$work/l-removed/colibri.h" "$work/layout.txt"

# ---- abidiff policy on probe libraries --------------------------------------------------------
abidiff_cases() {
# The probe exports functions that take the structs by pointer, as the real library does.
cat >"$work/probe.c" <<'EOF'
#include "colibri.h"
COLIBRI_API int32_t colibri_session_options_init(colibri_session_options *o, size_t n) { (void)o; return (int32_t)n; }
COLIBRI_API int32_t colibri_session_create(colibri_model *m, const colibri_session_options *o, colibri_session **s) {
  (void)m; (void)o; (void)s; return 0;
}
COLIBRI_API int32_t colibri_session_get_stats(const colibri_session *s, colibri_stats *st) { (void)s; (void)st; return 0; }
COLIBRI_API int32_t colibri_chat_render(const colibri_model *m, const colibri_chat_message *msg, size_t n,
                                        const colibri_chat_options *o, char *t, size_t c, size_t *ts) {
  (void)m; (void)msg; (void)n; (void)o; (void)t; (void)c; (void)ts; return 0;
}
#ifndef PROBE_WITHOUT_STREAM_TOKENS
COLIBRI_API int32_t colibri_stream_tokens(const colibri_stream *s, int32_t *t, size_t c, size_t *n) {
  (void)s; (void)t; (void)c; (void)n; return 0;
}
#endif
EOF
probe() { # DIR [CFLAGS...] → DIR/libprobe.so built against DIR/colibri.h
  local dir=$1
  shift
  "$CC" -std=c99 -g -O0 -shared -fPIC -fvisibility=hidden -I"$dir" "$@" "$work/probe.c" -o "$dir/libprobe.so"
}
mkdir -p "$work/base"
cp "$header" "$work/base/colibri.h"
probe "$work/base"
bash "$check" dump "$work/base/libprobe.so" "$work/base" >"$work/base.abi"
expect pass "abidiff: the baseline against itself" -- bash "$check" abidiff "$work/base/libprobe.so" "$work/base.abi" "$work/base"

variant appended 's/^} colibri_session_options;/  uint64_t appended_later;\n} colibri_session_options;/'
probe "$work/appended"
expect pass "abidiff: a field appended to colibri_session_options (compatible)" -- \
  bash "$check" abidiff "$work/appended/libprobe.so" "$work/base.abi" "$work/appended"

variant stats-appended 's/^} colibri_stats;/  uint64_t appended_counter;\n} colibri_stats;/'
probe "$work/stats-appended"
expect pass "abidiff: a field appended to the colibri_stats output struct (compatible)" -- \
  bash "$check" abidiff "$work/stats-appended/libprobe.so" "$work/base.abi" "$work/stats-appended"

mkdir -p "$work/added-function"
cp "$header" "$work/added-function/colibri.h"
printf '#include "colibri.h"\nCOLIBRI_API int32_t colibri_probe_new_function(void) { return 0; }\n' >"$work/added-probe.c"
"$CC" -std=c99 -g -O0 -shared -fPIC -fvisibility=hidden -I"$work/added-function" "$work/probe.c" "$work/added-probe.c" \
  -o "$work/added-function/libprobe.so"
expect pass "abidiff: a new function (compatible)" -- \
  bash "$check" abidiff "$work/added-function/libprobe.so" "$work/base.abi" "$work/added-function"

variant inserted 's/^  uint32_t context_length; /  uint32_t inserted_in_the_middle;\n  uint32_t context_length; /'
probe "$work/inserted"
expect fail "abidiff: a field inserted in the middle of colibri_session_options" -- \
  bash "$check" abidiff "$work/inserted/libprobe.so" "$work/base.abi" "$work/inserted"

# abidiff does not report two same-typed fields swapped, nor a field narrowed where padding
# keeps every offset (it files both as harmless): the layout check above catches those.
# A changed parameter type is abidiff's to catch:
sed -e 's/size_t n) { (void)o; return (int32_t)n; }/uint32_t n) { (void)o; return (int32_t)n; }/' \
  -e 's/^COLIBRI_API int32_t colibri_session_options_init/COLIBRI_API int32_t colibri_probe_init/' "$work/probe.c" >"$work/param-probe.c"
sed -e 's/^COLIBRI_API int32_t colibri_session_options_init/COLIBRI_API int32_t colibri_probe_init/' "$work/probe.c" >"$work/param-base.c"
mkdir -p "$work/param-base" "$work/param-changed"
cp "$header" "$work/param-base/colibri.h"
cp "$header" "$work/param-changed/colibri.h"
"$CC" -std=c99 -g -O0 -shared -fPIC -fvisibility=hidden -I"$work/param-base" "$work/param-base.c" -o "$work/param-base/libprobe.so"
"$CC" -std=c99 -g -O0 -shared -fPIC -fvisibility=hidden -I"$work/param-changed" "$work/param-probe.c" -o "$work/param-changed/libprobe.so"
bash "$check" dump "$work/param-base/libprobe.so" "$work/param-base" >"$work/param-base.abi"
expect fail "abidiff: a parameter's type changed (size_t -> uint32_t)" -- \
  bash "$check" abidiff "$work/param-changed/libprobe.so" "$work/param-base.abi" "$work/param-changed"

variant chat-grown 's/^} colibri_chat_message;/  const char *name;\n} colibri_chat_message;/'
probe "$work/chat-grown"
expect fail "abidiff: a field appended to the frozen array element colibri_chat_message" -- \
  bash "$check" abidiff "$work/chat-grown/libprobe.so" "$work/base.abi" "$work/chat-grown"

mkdir -p "$work/removed-function"
cp "$header" "$work/removed-function/colibri.h"
probe "$work/removed-function" -DPROBE_WITHOUT_STREAM_TOKENS
expect fail "abidiff: a function removed" -- \
  bash "$check" abidiff "$work/removed-function/libprobe.so" "$work/base.abi" "$work/removed-function"

}
if ((have_abidiff)); then
  abidiff_cases
else
  echo "skip: the abidiff cases (abidiff/abidw not found; Debian package abigail-tools)"
  skipped=1
fi

# ---- the binary checks on probes with the defects they look for --------------------------------
printf '#include <string>\n__attribute__((visibility("default"))) std::string colibri_cxx_probe() { return std::string(64, (char)120); }\n' \
  >"$work/cxx.cpp"
"$CXX" -shared -fPIC "$work/cxx.cpp" -o "$work/libcxx.so"
expect fail "no-cxx: a library exporting a C++ function" -- bash "$check" no-cxx "$work/libcxx.so"
expect fail "no-glibcxx: a library using the shared libstdc++" -- bash "$check" no-glibcxx "$work/libcxx.so"

printf '__thread int counter;\n__attribute__((visibility("default"))) int colibri_probe_tls(void) { return ++counter; }\n' >"$work/tls.c"
"$CC" -shared -fPIC -ftls-model=initial-exec -Wl,-soname,libcolibri.so.1 -Wl,-z,nodelete "$work/tls.c" -o "$work/libtls.so"
expect fail "dynamic: a library with initial-exec TLS (STATIC_TLS)" -- bash "$check" dynamic "$work/libtls.so"
"$CC" -shared -fPIC -ftls-model=global-dynamic -Wl,-soname,libcolibri.so.1 -Wl,-z,nodelete "$work/tls.c" -o "$work/libtls-ok.so"
expect pass "dynamic: the same with global-dynamic TLS" -- bash "$check" dynamic "$work/libtls-ok.so"
"$CC" -shared -fPIC -Wl,-soname,libcolibri.so.2 -Wl,-z,nodelete "$work/tls.c" -o "$work/libsoname.so"
expect fail "dynamic: a wrong SONAME" -- bash "$check" dynamic "$work/libsoname.so"

variant bad-header 's/^#include <stdint.h>/#include <stdint.h>\n#include <stdbool.h>/'
expect fail "header: an extra include" -- bash "$check" header "$work/bad-header/colibri.h"
variant not-c99 's/^typedef struct colibri_model colibri_model;/typedef struct colibri_model colibri_model;\nstatic inline bool colibri_probe(void) { return true; }/'
expect fail "header: C that is not C99" -- bash "$check" header "$work/not-c99/colibri.h"

if ((failures)); then
  echo "selftest: $failures expectation(s) failed"
  exit 1
fi
if ((skipped)); then
  echo "selftest: every incompatible change was caught, every compatible one accepted (abidiff cases skipped)"
else
  echo "selftest: every incompatible change was caught, every compatible one accepted"
fi
