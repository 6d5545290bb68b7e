#!/usr/bin/env python3
"""tests/tokenizer/make_extra_fixtures.py — extra tokenizer parity fixtures (developers run it;
CI only reads the files it writes and commits).

The shared oracle fixtures (tools/oracle/make_fixtures.py -> tests/fixtures/tokenizer/) cover the
two fixture tokenizers with the library defaults. This script adds what those leave out:

* "text mode": the same corpus with `encode_special_tokens = True`, which is what the C++
  `EncodeOptions::parse_special = false` (our default) must equal;
* variants of the two fixture tokenizers, edited here and saved next to their expectations, that
  exercise components real checkpoints use but the fixtures do not:
    bytelevel_nfc        NFC normalizer in front (hub Qwen2/Qwen3 files have it)
    bytelevel_gpt2       ByteLevel pre-tokenizer with its own GPT-2 regex (use_regex=true),
                         add_prefix_space=true, RobertaProcessing
    metaspace_llama      Metaspace pre-tokenizer (prepend_scheme "first", split false) instead of
                         the Prepend/Replace normalizer, Metaspace decoder (newer Llama/Mistral files)
    metaspace_split      Metaspace with split=true and prepend_scheme "always", plus a Split
                         pre-tokenizer (String pattern, MergedWithPrevious behaviour)
    added_flags          added tokens with lstrip / rstrip / single_word / normalized=true and a
                         non-special added token
    added_normalized     added tokens with normalized=true under the Llama Prepend/Replace
                         normalizer (they decode in normalized form), special and not
    deepseek_v3_split    DeepSeek-V3/R1's pre-tokenizer: three isolating Splits in sequence
                         (digit runs of 1-3, CJK/kana runs, then punctuation+letters, letters
                         with marks, punctuation, spaces) before ByteLevel(use_regex=false)
    glm4_split           GLM-4.5's: one cl100k-style Split (digit runs of 1-3, contractions)
    minimax_m2_split     MiniMax-M2's: NFC, then one o200k-style Split (case-aware words, "/")
    kimi_k2_split        Kimi-K2's split (its tiktoken pattern as tokenizer.json writes it): Han
                         runs, and word classes that use Oniguruma's class intersection
                         [..&&[^\p{Han}]], which core/tokenizer/regex.cpp rewrites for PCRE2
  The vocabulary of these four is the Qwen2-style fixture's: the real checkpoints' vocabularies
  are far too large to commit, and what the variants pin is the splitting, which decides the ids.
* core/tokenizer/normalizer_hf_unicode.inc: the code points whose normalization tokenizers' older
  Unicode tables (9.0) do not know, and unicode_normalization.jsonl, NFC/NFD/NFKC/NFKD of texts
  around each of them (write_unicode_table; it reads the system libutf8proc through ctypes)

Run:  nice tools/.venv/bin/python tests/tokenizer/make_extra_fixtures.py [--tokenizers-only]
It rewrites tests/tokenizer/fixtures/ (deterministic: same versions -> same bytes).
--tokenizers-only leaves chat_extra.json alone (it needs transformers and Jinja2; the rest needs
only tokenizers==0.23.3).
"""
from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import tokenizers
from tokenizers import Tokenizer

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "tokenizer" / "fixtures"
CORPUS = ROOT / "tests" / "fixtures" / "tokenizer" / "corpus.jsonl"
BYTELEVEL = ROOT / "tests" / "fixtures" / "oracle" / "qwen2_moe_shared" / "tokenizer.json"
LLAMA = ROOT / "tests" / "fixtures" / "oracle" / "mixtral_gqa" / "tokenizer.json"

# Inputs beyond the shared corpus: added-token flags, spaces around special tokens, long words.
EXTRA_TEXTS = [
    "a <mask> b",
    "a<mask>b and   <mask>   spaced",
    "sword word words word_ word. (word)",
    "x <tail>   y <tail>",
    "mid<|im_end|>dle <|im_start|> <|endoftext|>",
    "<s></s><s> </s>",
    "hello\u00a0world\u2003tab\there",
    "a" * 300 + " " + "ab" * 200,
    "e\u0301 A\u030a \u1e9b\u0323 \ufb01 \u2460 \uff21",
    "▁already ▁metaspace ▁▁ chars",
    # Issue 18: added tokens with normalized=true decode in their normalized form; Unicode marks
    # newer than tokenizers' tables (Lao U+0EBA, Arabic U+089B) are not reordered by NFC.
    "this is my token ok",
    "the <x y> small mall ▁the end<x y>",
    "\u0e81\u0ec8\u0eba \u0628\u089b\u064e \U00011935\U00011930",
    # The frontier families' splits (issue 20): digit runs, CJK and kana runs next to Latin,
    # punctuation glued to letters, case changes, contractions in capitals, paths, CR LF.
    "漢字かなカナ混じりtext 123456789 x1234567y 第3章",
    "!hello ?World's I'M 'LL don't (DeepSeek-V3) #tag @user",
    "mixedCASEWord CamelCase HTTPServer iPhone ÀB́ Ünïcödé",
    "a/b/c\n/usr/bin:path\r\nline\t\ttabs\n\n   trailing   ",
    "한국어 текст ελληνικά العربية हिन्दी 日本語のテキスト",
    "price: $1,234.56 (≈ €1.1k) — 50% off!!! ...\u3002\uff01",
]
# One long input (the first 2000 characters of the training text): long words are cut where no
# merge can cross (bpe.h, kCutMinWordBytes); this pins that the cut changes nothing.
LONG_TEXT = (ROOT / "tests" / "fixtures" / "tokenizer" / "train_corpus.txt").read_text(encoding="utf-8")[:2000]


def corpus_entries():
    out = []
    with open(CORPUS, encoding="utf-8") as f:
        for line in f:
            out.append(json.loads(line))
    next_id = max(e["id"] for e in out) + 1
    for text in EXTRA_TEXTS + [LONG_TEXT]:
        out.append({"id": next_id, "text": text})
        next_id += 1
    return out


def variant_bytelevel_nfc(base: dict) -> dict:
    d = copy.deepcopy(base)
    d["normalizer"] = {"type": "NFC"}
    return d


def variant_bytelevel_gpt2(base: dict) -> dict:
    d = copy.deepcopy(base)
    d["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    d["post_processor"] = {
        "type": "RobertaProcessing",
        "sep": ["<|im_end|>", 511],
        "cls": ["<|im_start|>", 510],
        "trim_offsets": True,
        "add_prefix_space": True,
    }
    return d


def variant_metaspace_llama(base: dict) -> dict:
    d = copy.deepcopy(base)
    d["normalizer"] = None
    d["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False}
    d["decoder"] = {
        "type": "Sequence",
        "decoders": [
            {"type": "ByteFallback"},
            {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False},
            {"type": "Fuse"},
        ],
    }
    return d


def variant_metaspace_split(base: dict) -> dict:
    d = copy.deepcopy(base)
    d["normalizer"] = None
    d["pre_tokenizer"] = {
        "type": "Sequence",
        "pretokenizers": [
            {"type": "Split", "pattern": {"String": "."}, "behavior": "MergedWithPrevious", "invert": False},
            {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True},
        ],
    }
    d["decoder"] = {
        "type": "Sequence",
        "decoders": [
            {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
        ],
    }
    return d


def variant_added_flags(base: dict) -> dict:
    d = copy.deepcopy(base)
    vocab = d["model"]["vocab"]
    next_id = max(max(vocab.values()), max(t["id"] for t in d["added_tokens"])) + 1

    def add(content, **flags):
        nonlocal next_id
        tok = {"id": next_id, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
               "normalized": False, "special": False}
        tok.update(flags)
        d["added_tokens"].append(tok)
        next_id += 1

    add("<mask>", lstrip=True, rstrip=True, special=True)
    add("<tail>", rstrip=True)
    add("word", single_word=True, normalized=True)
    add("é", normalized=True)  # NFC below composes "e\u0301" so this matches it too
    d["normalizer"] = {"type": "NFC"}
    return d


def variant_added_normalized(base: dict) -> dict:
    """Added tokens with normalized=true under a Prepend("▁") + Replace(" ", "▁") normalizer:
    tokenizers gives (and decodes) their normalized form, "my token" -> "▁my▁token"; one whose
    content the vocabulary has ("▁the", "mall") takes that id and its normalized string; a special
    one whose normalized form differs ("<x y>" -> "▁<x▁y>") is not skipped by skip_special_tokens."""
    d = copy.deepcopy(base)
    vocab = d["model"]["vocab"]
    assert "▁the" in vocab and "mall" in vocab
    next_id = max(max(vocab.values()), max(t["id"] for t in d["added_tokens"])) + 1

    def add(content, **flags):
        # A content the vocabulary has keeps its vocabulary id (as tokenizers writes the file);
        # the others take the next ids in order (tokenizers numbers them so when it loads).
        nonlocal next_id
        tok = {"id": vocab.get(content, next_id), "content": content, "single_word": False, "lstrip": False,
               "rstrip": False, "normalized": True, "special": False}
        tok.update(flags)
        d["added_tokens"].append(tok)
        if content not in vocab:
            next_id += 1

    add("my token")
    add("▁the")
    add("mall")
    add("<x y>", special=True)
    add("<keep>", special=True, normalized=False)
    return d


# The frontier families' pre-tokenizer patterns, as their tokenizer.json files hold them.
DEEPSEEK_V3_SPLITS = [
    r"\p{N}{1,3}",
    "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
    r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
]
CL100K_SPLIT = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
O200K_SPLIT = "|".join([
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])
KIMI_K2_SPLIT = "|".join([
    r"""[\p{Han}]+""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])


def _split_then_bytelevel(base: dict, patterns, normalizer=None) -> dict:
    d = copy.deepcopy(base)
    d["normalizer"] = normalizer
    d["pre_tokenizer"] = {
        "type": "Sequence",
        "pretokenizers": [{"type": "Split", "pattern": {"Regex": p}, "behavior": "Isolated", "invert": False}
                          for p in patterns]
        + [{"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}],
    }
    d["decoder"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    return d


def variant_deepseek_v3_split(base: dict) -> dict:
    return _split_then_bytelevel(base, DEEPSEEK_V3_SPLITS)


def variant_glm4_split(base: dict) -> dict:
    return _split_then_bytelevel(base, [CL100K_SPLIT])


def variant_minimax_m2_split(base: dict) -> dict:
    return _split_then_bytelevel(base, [O200K_SPLIT], normalizer={"type": "NFC"})


def variant_kimi_k2_split(base: dict) -> dict:
    return _split_then_bytelevel(base, [KIMI_K2_SPLIT])


VARIANTS = {
    "bytelevel_nfc": (BYTELEVEL, variant_bytelevel_nfc),
    "bytelevel_gpt2": (BYTELEVEL, variant_bytelevel_gpt2),
    "metaspace_llama": (LLAMA, variant_metaspace_llama),
    "metaspace_split": (LLAMA, variant_metaspace_split),
    "added_flags": (BYTELEVEL, variant_added_flags),
    "added_normalized": (LLAMA, variant_added_normalized),
    "deepseek_v3_split": (BYTELEVEL, variant_deepseek_v3_split),
    "glm4_split": (BYTELEVEL, variant_glm4_split),
    "minimax_m2_split": (BYTELEVEL, variant_minimax_m2_split),
    "kimi_k2_split": (BYTELEVEL, variant_kimi_k2_split),
}


def encode_records(tok: Tokenizer, entries):
    recs = []
    for e in entries:
        text = e["text"]
        tok.encode_special_tokens = False
        plain = tok.encode(text, add_special_tokens=False).ids
        special = tok.encode(text, add_special_tokens=True).ids
        tok.encode_special_tokens = True
        text_mode = tok.encode(text, add_special_tokens=False).ids
        text_mode_special = tok.encode(text, add_special_tokens=True).ids
        tok.encode_special_tokens = False
        rec = {"kind": "encode", "id": e["id"], "text": text}
        if "bytes_hex" in e:
            rec["bytes_hex"] = e["bytes_hex"]
        rec.update({
            "ids": plain,
            "ids_special": special,
            "ids_text_mode": text_mode,
            "ids_special_text_mode": text_mode_special,
            "decode": tok.decode(plain, skip_special_tokens=False),
            "decode_special_skip": tok.decode(special, skip_special_tokens=True),
            "decode_special_keep": tok.decode(special, skip_special_tokens=False),
        })
        recs.append(rec)
    return recs


def write_jsonl(path: Path, meta: dict, recs) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(meta, ensure_ascii=False, sort_keys=True) + "\n")
        for r in recs:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    entries = corpus_entries()
    meta_common = {"kind": "meta", "versions": {"tokenizers": tokenizers.__version__},
                   "generator": "tests/tokenizer/make_extra_fixtures.py",
                   "fields": {"ids_text_mode": "encode with encode_special_tokens=True (C++ parse_special=false)"}}
    for name, path in (("bytelevel_bpe", BYTELEVEL), ("llama_bpe", LLAMA)):
        tok = Tokenizer.from_file(str(path))
        meta = dict(meta_common, tokenizer=name, tokenizer_json=str(path.relative_to(ROOT)))
        write_jsonl(OUT / f"{name}.extra.jsonl", meta, encode_records(tok, entries))
    for name, (base_path, make) in VARIANTS.items():
        base = json.loads(base_path.read_text(encoding="utf-8"))
        variant = make(base)
        vdir = OUT / "variants" / name
        vdir.mkdir(parents=True, exist_ok=True)
        text = json.dumps(variant, ensure_ascii=False, indent=1, sort_keys=False)
        (vdir / "tokenizer.json").write_text(text + "\n", encoding="utf-8")
        tok = Tokenizer.from_str(text)
        meta = dict(meta_common, tokenizer=name, tokenizer_json=str((vdir / "tokenizer.json").relative_to(ROOT)))
        write_jsonl(OUT / f"{name}.extra.jsonl", meta, encode_records(tok, entries))
    print(f"wrote {OUT.relative_to(ROOT)} ({len(entries)} inputs x {2 + len(VARIANTS)} tokenizers)")
    return 0




# ---- Unicode normal forms: the code points tokenizers' tables lack -------------------------
# tokenizers normalizes with the unicode-normalization-alignments crate, whose tables are older
# (Unicode 9.0) than utf8proc's. A character assigned later is, to tokenizers, a starter with no
# decomposition that composes with nothing; utf8proc gives it its combining class, decomposition
# and compositions (NFC reorders U+0EBA LAO SIGN PALI VIRAMA, ccc 9, before a tone mark; HF does
# not). The C++ normalizer (core/tokenizer/normalizer.cpp) normalizes the text between such
# characters and copies them unchanged, which is what tokenizers does. This finds them: every
# code point to which utf8proc gives a normalization property that tokenizers does not apply.

UNICODE_TABLE = ROOT / "core" / "tokenizer" / "normalizer_hf_unicode.inc"
NORMALIZATION_FIXTURE = OUT / "unicode_normalization.jsonl"
# Markers that pin which Unicode version tokenizers' tables are: characters with a normalization
# property added in 9.0 (normalized by tokenizers) and in 10.0 (left alone).
UNICODE_9_MARKS = [0x08D4, 0x1E944, 0x1E94A]   # ARABIC SMALL HIGH WORD AR-RUB, ADLAM ALIF LENGTHENER, ADLAM NUKTA
UNICODE_10_MARKS = [0x1DF6, 0x0D3B, 0x11A34]   # COMBINING KAVYKA ABOVE RIGHT, MALAYALAM VERTICAL BAR VIRAMA, ZANABAZAR VIRAMA
HIGH_MARK = "\u0345"  # ccc 240, the largest: any known mark with a smaller class moves before it


class _Utf8proc:
    """The system libutf8proc (the library the C++ build links), through ctypes."""

    def __init__(self):
        import ctypes
        import ctypes.util

        self.ctypes = ctypes
        self.lib = ctypes.CDLL(ctypes.util.find_library("utf8proc") or "libutf8proc.so.2")
        self.libc = ctypes.CDLL(ctypes.util.find_library("c"))

        class Property(ctypes.Structure):  # the leading fields of utf8proc_property_t
            _fields_ = [("category", ctypes.c_int16), ("combining_class", ctypes.c_int16)]

        self.lib.utf8proc_get_property.restype = ctypes.POINTER(Property)
        self.lib.utf8proc_unicode_version.restype = ctypes.c_char_p
        for name in ("utf8proc_NFD", "utf8proc_NFKD", "utf8proc_NFC", "utf8proc_NFKC"):
            getattr(self.lib, name).restype = ctypes.c_void_p
            getattr(self.lib, name).argtypes = [ctypes.c_char_p]
        self.version = self.lib.utf8proc_unicode_version().decode()

    def ccc(self, cp: int) -> int:
        return self.lib.utf8proc_get_property(cp).contents.combining_class

    def map(self, form: str, text: str) -> str:
        ptr = getattr(self.lib, "utf8proc_" + form)(text.encode("utf-8"))
        out = self.ctypes.string_at(ptr).decode("utf-8")
        self.libc.free(self.ctypes.c_void_p(ptr))
        return out


def _hf_normalizers():
    from tokenizers import normalizers
    return {name: getattr(normalizers, name)() for name in ("NFC", "NFD", "NFKC", "NFKD")}


def _code_points():
    return (cp for cp in range(1, 0x110000) if not 0xD800 <= cp <= 0xDFFF)


def hf_unknown_code_points(u8: _Utf8proc, hf) -> list[int]:
    unknown = set()
    decomposing = {}  # cp -> utf8proc NFD, for the characters both sides decompose alike
    for cp in _code_points():
        c = chr(cp)
        ccc = u8.ccc(cp)
        nfd, nfkd = u8.map("NFD", c), u8.map("NFKD", c)
        if ccc == 0 and nfd == c and nfkd == c:
            continue
        probe = "a" + HIGH_MARK + c
        if (hf["NFD"].normalize_str(c) != nfd or hf["NFKD"].normalize_str(c) != nfkd
                or (ccc and hf["NFD"].normalize_str(probe) != u8.map("NFD", probe))):
            unknown.add(cp)
        elif nfd != c:
            decomposing[cp] = nfd
    # A new composite's parts (U+11938 = U+11935 U+11930, Unicode 13) are starters with no
    # properties of their own, but utf8proc composes them; tokenizers does not. Take the parts
    # that no decomposition tokenizers knows uses.
    known_parts = {ord(ch) for nfd in decomposing.values() for ch in nfd}
    for cp in sorted(unknown):
        nfd = u8.map("NFD", chr(cp))
        if nfd != chr(cp) and u8.map("NFC", nfd) == chr(cp):
            unknown.update(ord(ch) for ch in nfd if ord(ch) not in known_parts)
    # What "unknown" means: tokenizers leaves the character alone in every form and context.
    for cp in unknown:
        c = chr(cp)
        probe = "a" + HIGH_MARK + c + "\u0301"
        for name, n in hf.items():
            assert n.normalize_str(c) == c, (hex(cp), name)
        assert hf["NFD"].normalize_str(probe) == "a" + HIGH_MARK + c + "\u0301", hex(cp)
    for cp in UNICODE_9_MARKS:
        assert cp not in unknown, f"U+{cp:04X} (Unicode 9.0) should be known to tokenizers"
    for cp in UNICODE_10_MARKS:
        assert cp in unknown, f"U+{cp:04X} (Unicode 10.0) should be unknown to tokenizers"
    return sorted(unknown)


def _ranges(cps: list[int]) -> list[tuple[int, int]]:
    out = []
    for cp in cps:
        if out and out[-1][1] + 1 == cp:
            out[-1] = (out[-1][0], cp)
        else:
            out.append((cp, cp))
    return out


def normalization_texts(u8: _Utf8proc, unknown: list[int]) -> list[str]:
    """Inputs that tell the two tables apart: each unknown character between marks of lower and
    higher class, after a base it could compose with, and its compositions; plus controls."""
    texts = []
    for cp in unknown:
        c = chr(cp)
        # Would move before U+0345 if known; marks after it are reordered only up to it, and
        # the acute does not compose across it with the "e".
        texts.append("a" + HIGH_MARK + c + "\u0301 e" + c + "\u0301\u0316 x")
        nfd = u8.map("NFD", c)
        if nfd != c:
            texts.append(nfd)                                # the parts, which utf8proc composes
    texts += [
        "\u0e81\u0ec8\u0eba ok",               # issue 18: Lao tone mark then pali virama
        "\u0628\u089b\u064e ok",               # issue 18: Arabic low mark then fatha
        "\U00011935\U00011930 \U00011938",     # Dives Akuru O: composed by utf8proc, not by tokenizers
        "e\u0301 A\u030a \u1e9b\u0323 \ufb01 \u2460 \uff21 \u00c5\u0328",  # known to both
        "\u0915\u093c\u094d \u1100\u1161\u11a8 \uac00\u11a8",             # nukta, Hangul
        "a\u0345\U0001e944\u0301",             # ADLAM ALIF LENGTHENER (9.0): known, reordered
    ]
    return texts


def write_unicode_table() -> None:
    u8 = _Utf8proc()
    hf = _hf_normalizers()
    unknown = hf_unknown_code_points(u8, hf)
    ranges = _ranges(unknown)
    lines = [
        "// core/tokenizer/normalizer_hf_unicode.inc — GENERATED by tests/tokenizer/make_extra_fixtures.py",
        "// (write_unicode_table); do not edit. Included by normalizer.cpp.",
        "//",
        "// The code points to which utf8proc (Unicode %s here) gives a combining class, a" % u8.version,
        "// decomposition or a composition, and which Hugging Face tokenizers %s leaves alone in" % tokenizers.__version__,
        "// NFC, NFD, NFKC and NFKD: its tables (the unicode-normalization-alignments crate) are",
        "// Unicode 9.0, and these were assigned later. To tokenizers each is a starter that composes",
        "// with nothing, so normalization never crosses it. %d code points in %d ranges." % (len(unknown), len(ranges)),
        "",
        "// utf8proc_unicode_version() of the library this table was checked against. A newer",
        "// utf8proc may know characters this table lacks (tests/tokenizer/test_units.cpp checks).",
        'constexpr const char *kHfUnknownCheckedAgainst = "%s";' % u8.version,
        'constexpr const char *kHfNormalizerUnicode = "9.0.0";',
        "",
        "constexpr CodePointRange kHfUnknownCodePoints[] = {",
    ]
    row = []
    for first, last in ranges:
        row.append("{0x%04X, 0x%04X}," % (first, last))
        if len(row) == 5:
            lines.append("    " + " ".join(row))
            row = []
    if row:
        lines.append("    " + " ".join(row))
    lines.append("};")
    UNICODE_TABLE.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {UNICODE_TABLE.relative_to(ROOT)} ({len(unknown)} code points, {len(ranges)} ranges, "
          f"utf8proc Unicode {u8.version})")

    texts = normalization_texts(u8, unknown)
    meta = {"kind": "meta", "versions": {"tokenizers": tokenizers.__version__, "utf8proc_unicode": u8.version},
            "generator": "tests/tokenizer/make_extra_fixtures.py",
            "fields": {"expected": "tokenizers.normalizers.<form>().normalize_str(text)",
                       "utf8proc_differs": "utf8proc alone gives another result (what the table corrects)"}}
    recs = []
    for text in texts:
        for form, n in hf.items():
            expected = n.normalize_str(text)
            recs.append({"kind": "normalize", "form": form, "text": text, "expected": expected,
                         "utf8proc_differs": u8.map(form, text) != expected})
    write_jsonl(NORMALIZATION_FIXTURE, meta, recs)
    print(f"wrote {NORMALIZATION_FIXTURE.relative_to(ROOT)} ({len(recs)} records, "
          f"{sum(r['utf8proc_differs'] for r in recs)} where utf8proc alone differs)")


# ---- chat templates -------------------------------------------------------------------------
# Templates written to exercise the Jinja subset of core/tokenizer/chat_template.h, rendered by
# transformers' own renderer (render_jinja_template: ImmutableSandboxedEnvironment,
# trim_blocks=True, lstrip_blocks=True, its tojson and raise_exception).

CONV_FULL = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hello  there"},
    {"role": "assistant", "content": "<think>\nhmm, greet back\n</think>\n\nHi!"},
    {"role": "user", "content": "Bye, caf\u00e9 \U0001F642 \u4f60\u597d"},
]
CONV_ONE = [{"role": "user", "content": "  only one  "}]
CONV_TOOL = [{"role": "user", "content": "x"}, {"role": "tool", "content": "y"}]
CONV_AGENT = [
    {"role": "system", "content": "Use tools."},
    {"role": "user", "content": "weather?"},
    {"role": "assistant", "content": "<think>\nneed the tool\n</think>\n\ncalling"},
    {"role": "tool", "content": "r1"},
    {"role": "tool", "content": "r2"},
    {"role": "assistant", "content": "sunny /nothink"},
    {"role": "user", "content": "thanks /nothink"},
]

CHAT_TEMPLATES = {
    "loop_variables": (
        "{%- for m in messages -%}\n"
        "{{ loop.index }}/{{ loop.length }} {{ loop.index0 }} {{ loop.revindex }} {{ loop.revindex0 }} "
        "{{ loop.first }} {{ loop.last }} {{ loop.previtem.role if loop.previtem is defined else '-' }} "
        "{{ loop.nextitem['role'] if not loop.last else '-' }}\n"
        "{% endfor -%}\n"
    ),
    "qwen3_like": (
        "{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}\n"
        "{%- for message in messages[::-1] %}\n"
        "    {%- set index = (messages|length - 1) - loop.index0 %}\n"
        "    {%- if ns.multi_step_tool and message.role == \"user\" and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}\n"
        "        {%- set ns.multi_step_tool = false %}\n"
        "        {%- set ns.last_query_index = index %}\n"
        "    {%- endif %}\n"
        "{%- endfor %}\n"
        "{%- for message in messages %}\n"
        "    {%- if message.content is string %}\n"
        "        {%- set content = message.content %}\n"
        "    {%- else %}\n"
        "        {%- set content = '' %}\n"
        "    {%- endif %}\n"
        "    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) %}\n"
        "        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}\n"
        "    {%- elif message.role == \"system\" %}\n"
        "        {{- '<|im_start|>system\\n' + content + '<|im_end|>\\n' }}\n"
        "    {%- elif message.role == \"assistant\" %}\n"
        "        {%- set reasoning_content = '' %}\n"
        "        {%- if '</think>' in content %}\n"
        "            {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}\n"
        "            {%- set content = content.split('</think>')[-1].lstrip('\\n') %}\n"
        "        {%- endif %}\n"
        "        {%- if loop.index0 > ns.last_query_index %}\n"
        "            {%- if loop.last or (not loop.last and reasoning_content) %}\n"
        "                {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}\n"
        "            {%- else %}\n"
        "                {{- '<|im_start|>' + message.role + '\\n' + content }}\n"
        "            {%- endif %}\n"
        "        {%- else %}\n"
        "            {{- '<|im_start|>' + message.role + '\\n' + content }}\n"
        "        {%- endif %}\n"
        "        {{- '<|im_end|>\\n' }}\n"
        "    {%- else %}\n"
        "        {{- raise_exception('Unknown role: ' + message.role) }}\n"
        "    {%- endif %}\n"
        "{%- endfor %}\n"
        "{%- if add_generation_prompt %}\n"
        "    {{- '<|im_start|>assistant\\n' }}\n"
        "    {%- if enable_thinking is defined and enable_thinking is false %}\n"
        "        {{- '<think>\\n\\n</think>\\n\\n' }}\n"
        "    {%- endif %}\n"
        "{%- endif %}\n"
    ),
    "whitespace_control": (
        "<start>\n"
        "  {% for m in messages %}\n"
        "    {# a comment #}\n"
        "    [{{ m.role }}]\n"
        "    {%+ if m.role == 'user' %}U{% endif +%}\n"
        "  {{ m.content }}\n"
        "  {%- if not loop.last %}, {% endif %}\n"
        "\n"
        "  {% endfor %}\n"
        "\t{#- stripped comment -#}\n"
        "  <end> {{- '|' -}}   \n"
        "  tail {% if true -%}   \n"
        "   x\n"
        "  {%- endif %}\n"
        "last line\n"
        "\n"
    ),
    "filters": (
        "{{ messages | length }}|{{ messages[-1].content | upper }}|{{ messages[-1].content | lower }}|"
        "{{ 'hello wORLD' | title }}|{{ 'hello World' | capitalize }}|{{ '  pad  ' | trim }}|{{ 'xxhixx' | trim('x') }}|"
        "{{ missing | default('dflt') }}|{{ '' | default('empty', true) }}|{{ '' | default('kept') }}|{{ none | d('n') }}|"
        "{{ [1,2,3] | first }}{{ [1,2,3] | last }}|{{ ['a','b'] | join(', ') }}|{{ [1, 2] | join }}|{{ 'abc' | list }}|"
        "{{ 'abc' | reverse }}|{{ [3,1] | reverse | list }}|{{ 42 | string }}{{ '7' | int + 1 }}|{{ 'x' | int }}|"
        "{{ '2.5' | float }}|{{ -3 | abs }}|{{ 'a-b-a' | replace('a', 'o') }}|{{ messages | count }}|"
        "{{ messages[-1].content | length }}|{{ '<b>' | safe }}\n"
        "{% for k, v in {'k': 'v', 'n': 1} | items %}{{ k }}:{{ v }};{% endfor %}\n"
    ),
    "tojson": (
        "{{ messages | tojson }}\n"
        "{{ messages[0] | tojson(indent=2) }}\n"
        "{{ {'b': 1, 'a': [true, none, 1.5, \"q\\\"uote\\n\\u00e9\"], 'c': {}} | tojson }}\n"
        "{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}\n"
        "{{ tools | tojson }} {{ [] | tojson }} {{ 1e20 | tojson }} {{ 0.5 | tojson }}\n"
    ),
    "tests_and_operators": (
        "{% set x = 7 %}{{ x is odd }} {{ x is even }} {{ x is divisibleby 7 }} {{ x is divisibleby(2) }} "
        "{{ x is number }} {{ x is integer }} {{ 1.5 is float }} {{ 'a' is string }} {{ none is none }} "
        "{{ true is boolean }} {{ messages is sequence }} {{ messages[0] is mapping }} {{ undefined_thing is undefined }} "
        "{{ x is not defined }} {{ 'abc' is lower }} {{ 'ABC' is upper }} {{ x is eq 7 }} {{ x is ne 7 }} "
        "{{ 'odd' if x is odd else 'even' }}\n"
        "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1 + 2 * 3 - 4 }} "
        "{{ (1 + 2) * 3 }} {{ 1.5 + 1 }} {{ 0.1 + 0.2 }} {{ 1e3 }} {{ 10 / 4 }} {{ 7.5 // 2 }} {{ -x }} {{ 2 * -3 }}\n"
        "{{ 'a' ~ 1 ~ none ~ true }} {{ 'ab' * 3 }} {{ [1] + [2] }} {{ 3 > 2 and 'yes' or 'no' }} "
        "{{ 0 or '' or 'last' }} {{ 'x' if false }}|{{ 'y' if true else 'n' }} {{ 'ell' in 'hello' }} "
        "{{ 2 not in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'a' < 'b' }} {{ 2 >= 2.0 }} {{ 1 == 1.0 }} "
        "{{ none == none }} {{ [1, 2] == [1, 2] }} {{ not messages }} {{ not not 'a' }}\n"
        "{{ none }} {{ true }} {{ false }} {{ [1, 'a', none, true, 1.0, -0.5] }} "
        "{{ {'k': 'v', 'q': \"it's\", 'l': [{'z': none}]} }} {{ missing }}|{{ \"line\\nbreak\\ttab\" }}|"
        "{{ 'adjacent' ' strings' }}|{{ ['it\\'s', \"a\\\"b\", 'back\\\\slash'] }}\n"
    ),
    "string_methods": (
        "{%- set s = '  Hello, World  ' %}[{{ s.strip() }}][{{ s.lstrip() }}][{{ s.rstrip() }}]"
        "[{{ 'xxhixx'.strip('x') }}][{{ s.split() }}][{{ 'a,b,,c'.split(',') }}][{{ 'a b c'.split(' ', 1) }}]"
        "[{{ ' a  b '.split(none, 1) }}][{{ s.strip().startswith('Hello') }}][{{ s.strip().endswith(('x', 'd')) }}]"
        "[{{ s.upper() }}][{{ s.lower() }}][{{ 'hello wORLD'.title() }}][{{ 'hello World'.capitalize() }}]"
        "[{{ s.replace('l', 'L') }}][{{ s.replace('l', 'L', 2) }}]\n"
        "{%- set d = {'a': 1, 'b': 2} %}"
        "[{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}][{{ d.keys() | list }}][{{ d.values() | list }}]"
        "[{{ d.get('a') }}][{{ d.get('z') }}][{{ d.get('z', 'dflt') }}][{{ d['b'] }}][{{ d.b }}][{{ d.zz is defined }}]\n"
        "[{{ 'h\u00e9llo'[1] }}][{{ 'h\u00e9llo'[1:3] }}][{{ 'h\u00e9llo'[-2:] }}][{{ 'abcdef'[::2] }}]"
        "[{{ 'abcdef'[::-1] }}][{{ [1,2,3,4,5][1:-1] }}][{{ [1,2,3,4,5][-2:] }}][{{ [1,2,3][5] is defined }}]"
        "[{{ [1,2,3,4,5][4:1:-2] }}][{{ messages[-1]['content'][:4] }}]\n"
    ),
    "loops_and_scopes": (
        "{%- for m in messages if m.role != 'system' -%}\n"
        "{{ loop.index }}:{{ m.role }}{% if loop.last %}!{% endif %};\n"
        "{%- endfor %}\n"
        "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i > 4 %}{% break %}{% endif %}{{ i }}{% endfor %}\n"
        "{% for i in range(2, 8, 3) %}{{ i }},{% endfor %} {% for i in range(3, 0, -1) %}{{ i }}{% endfor %}\n"
        "{% for x in [] %}never{% else %}empty-else{% endfor %}\n"
        "{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}\n"
        "{% for c in 'h\u00e9' %}<{{ c }}>{% endfor %}\n"
        "{% set outer = 'o' %}{% for i in [1, 2] %}{% set outer = outer ~ i %}{{ outer }}{% endfor %}|{{ outer }}\n"
        "{% set captured %}cap-{{ messages | length }}{% endset %}{{ captured }}\n"
        "{% for a in [1, 2] %}{% for b in ['x', 'y'] %}{{ a }}{{ b }}{{ loop.index }}{% endfor %}{{ loop.index }};{% endfor %}\n"
        "{% set ns = namespace(count=0) %}{% for m in messages %}{% set ns.count = ns.count + 1 %}{% endfor %}{{ ns.count }}\n"
        "{% if messages | length > 3 %}long{% elif messages | length > 1 %}medium{% else %}short{% endif %}\n"
    ),
    "bos_eos_and_roles": (
        "{{ bos_token }}{% set roles = {'user': 'U', 'assistant': 'A', 'system': 'S'} %}"
        "{% for m in messages %}{{ roles[m.role] | default('?') }}: {{ m.content | trim }}{{ eos_token }}\n{% endfor %}"
        "{{ bos_token is defined }} {{ eos_token is defined }} {{ documents is none }} {{ tools is defined }}"
        "{% if add_generation_prompt %}\nA:{% endif %}"
    ),
    # Macros, in the style of GLM-4.5's template (a macro that flattens content, its result
    # kept in a variable and used with string methods, reasoning split off the last turns).
    "glm4_macro_like": (
        "[gMASK]<sop>\n"
        "{%- macro text_of(content) -%}\n"
        "    {%- if content is string -%}\n"
        "        {{- content }}\n"
        "    {%- elif content is iterable and content is not mapping -%}\n"
        "        {%- for part in content -%}\n"
        "            {%- if part is mapping and part.type == 'text' -%}{{- part.text }}\n"
        "            {%- elif part is string -%}{{- part }}{%- endif -%}\n"
        "        {%- endfor -%}\n"
        "    {%- else -%}\n"
        "        {{- content }}\n"
        "    {%- endif -%}\n"
        "{%- endmacro -%}\n"
        "{%- set ns = namespace(last_user=-1) %}\n"
        "{%- for m in messages %}\n"
        "    {%- if m.role == 'user' %}\n"
        "        {% set ns.last_user = loop.index0 -%}\n"
        "    {%- endif %}\n"
        "{%- endfor %}\n"
        "{% for m in messages %}\n"
        "{%- if m.role == 'user' -%}<|user|>\n"
        "{%- set text = text_of(m.content) -%}\n"
        "{{ text }}\n"
        "{{- '/nothink' if (enable_thinking is defined and not enable_thinking and not text.endswith('/nothink')) else '' -}}\n"
        "{%- elif m.role == 'assistant' -%}\n"
        "<|assistant|>\n"
        "{%- set content = text_of(m.content) %}\n"
        "{%- set reasoning = '' %}\n"
        "{%- if '</think>' in content %}\n"
        "    {%- set pieces = content.split('</think>') -%}\n"
        "    {%- set reasoning = (pieces | first).rstrip('\\n').split('<think>') | last -%}\n"
        "    {%- set content = (pieces | last).lstrip('\\n') -%}\n"
        "{%- endif %}\n"
        "{%- if loop.index0 > ns.last_user and reasoning.strip() -%}\n"
        "{{ '\\n<think>' + reasoning.strip() + '</think>' }}\n"
        "{%- else -%}\n"
        "{{ '\\n<think></think>' }}\n"
        "{%- endif -%}\n"
        "{%- if content.strip() -%}\n"
        "{{ '\\n' + content.strip() }}\n"
        "{%- endif -%}\n"
        "{%- elif m.role == 'tool' -%}\n"
        "{%- if loop.first or (messages[loop.index0 - 1].role != 'tool') %}\n"
        "    {{- '<|observation|>' }}\n"
        "{%- endif %}\n"
        "{{- '\\n<tool_response>\\n' + m.content + '\\n</tool_response>' }}\n"
        "{%- elif m.role == 'system' -%}\n"
        "<|system|>\n"
        "{{ text_of(m.content) }}\n"
        "{%- endif -%}\n"
        "{%- endfor -%}\n"
        "{%- if add_generation_prompt -%}\n"
        "    <|assistant|>{{- '\\n<think></think>' if (enable_thinking is defined and not enable_thinking) else '' -}}\n"
        "{%- endif -%}"
    ),
    # Macros in the style of MiniMax-M2's: one macro calling another, a parameter default, a
    # variable the macro sets when the caller did not give it, messages[1:], ~, a namespace
    # tracking the previous role, raise_exception for a tool turn with no assistant before it.
    "minimax_macro_like": (
        "{%- set end_turn = '[e~[' -%}\n"
        "{%- macro text_of(content) -%}\n"
        "    {%- if content is string -%}{{ content }}\n"
        "    {%- else -%}{%- for part in content -%}{{- part.text if part is mapping else part }}{%- endfor -%}\n"
        "    {%- endif -%}\n"
        "{%- endmacro -%}\n"
        "{%- macro system_block(message, fallback='You are a helpful assistant.') -%}\n"
        "    {%- if message and message.content -%}\n"
        "        {{- text_of(message.content) }}\n"
        "    {%- else -%}\n"
        "        {%- if identity is not defined -%}{%- set identity = fallback -%}{%- endif -%}\n"
        "        {{- identity }}\n"
        "    {%- endif -%}\n"
        "{%- endmacro -%}\n"
        "{%- set system = none -%}\n"
        "{%- set turns = messages -%}\n"
        "{%- if messages and messages[0].role == 'system' -%}\n"
        "    {%- set system = messages[0] -%}\n"
        "    {%- set turns = messages[1:] -%}\n"
        "{%- endif -%}\n"
        "{{- ']~!b[' ~ ']~b]system' ~ '\\n' }}\n"
        "{{- system_block(system) }}\n"
        "{{- end_turn ~ '\\n' }}\n"
        "{%- set last = namespace(role=none) -%}\n"
        "{%- for message in turns -%}\n"
        "    {%- if message.role == 'assistant' -%}\n"
        "        {{- ']~b]ai' ~ '\\n' }}\n"
        "        {%- set content = text_of(message.content) %}\n"
        "        {%- if '</think>' in content %}{%- set content = content.split('</think>', 1)[1].strip('\\n') %}{%- endif %}\n"
        "        {{- content }}{{- end_turn ~ '\\n' }}\n"
        "    {%- elif message.role == 'user' -%}\n"
        "        {{- ']~b]user' ~ '\\n' }}{{- text_of(message.content) }}{{- end_turn ~ '\\n' }}\n"
        "    {%- elif message.role == 'tool' -%}\n"
        "        {%- if last.role not in ['assistant', 'tool'] -%}\n"
        "            {{- raise_exception('a tool message must follow an assistant turn, not ' ~ last.role) }}\n"
        "        {%- endif -%}\n"
        "        {%- if loop.first or turns[loop.index0 - 1].role != 'tool' -%}{{- ']~b]tool' }}{%- endif -%}\n"
        "        {{- '\\n<response>' ~ message.content ~ '</response>' }}\n"
        "        {%- if loop.last or turns[loop.index0 + 1].role != 'tool' -%}{{- end_turn ~ '\\n' }}{%- endif -%}\n"
        "    {%- endif -%}\n"
        "    {%- set last.role = message.role -%}\n"
        "{%- endfor -%}\n"
        "{%- if add_generation_prompt -%}{{- ']~b]ai' ~ '\\n' ~ '<think>' ~ '\\n' }}{%- endif -%}\n"
    ),
    # What a macro sees and returns: top-level variables as they are at the call (set after
    # the definition), not the caller's loop variable; defaults that use earlier parameters;
    # keywords; a `set` inside that does not leak; a namespace it changes; a macro calling one
    # defined after it; macros defined in {% if %} branches; the result as a string.
    "macro_semantics": (
        "{%- set a = 1 -%}\n"
        "{%- macro show(x, y='d', z=x ~ '!') -%}[{{ x }}|{{ y }}|{{ z }}|{{ a }}|{{ item }}]{%- set leaked = 1 -%}{%- endmacro -%}\n"
        "{%- set a = 2 -%}\n"
        "{% for item in [7] %}{{ show(1) }}{{ show(1, 2) }}{{ show(y=3, x=4) }}{{ show() }}{{ item }}{% endfor %}\n"
        "{{ leaked is defined }}\n"
        "{%- macro outer(v) -%}<{{ inner(v) | trim }}>{%- endmacro -%}\n"
        "{%- macro inner(v) -%}  {{ v | upper }}  {%- endmacro %}\n"
        "{{ outer('q') }}|{{ outer('q') | length }}|{{ inner('w').strip() }}|{{ inner('w') is string }}|{{ inner(none) }}\n"
        "{%- set ns = namespace(count=0) -%}\n"
        "{%- macro bump(by=1) -%}{%- set ns.count = ns.count + by -%}{%- endmacro %}\n"
        "{{ bump() }}{{ bump(by=10) }}{{ ns.count }}\n"
        "{%- if messages | length > 1 -%}{%- macro pick() -%}many{%- endmacro -%}\n"
        "{%- else -%}{%- macro pick() -%}one{%- endmacro -%}{%- endif %}\n"
        "{{ pick() }}\n"
        "{% for m in messages %}{{ show(m.role, m.content | length) }}{% endfor %}\n"
        "{%- macro pick() -%}redefined{%- endmacro %}\n"
        "{{ pick() }}\n"
    ),
    "raise_on_unknown_role": (
        "{% for m in messages %}"
        "{% if m.role not in ['system', 'user', 'assistant'] %}"
        "{{ raise_exception('Unknown role: ' + m.role + ' at ' ~ loop.index0) }}"
        "{% endif %}{{ m.role }}\n"
        "{% endfor %}"
    ),
}

# (template name, bos_token, eos_token, extra variables, conversations)
CHAT_CASES = [
    ("loop_variables", "<s>", "</s>", {}, [CONV_FULL, CONV_ONE]),
    ("qwen3_like", None, "<|im_end|>", {}, [CONV_FULL, CONV_ONE, CONV_TOOL]),
    ("qwen3_like", None, "<|im_end|>", {"enable_thinking": False}, [CONV_FULL]),
    ("whitespace_control", "<s>", "</s>", {}, [CONV_FULL, CONV_ONE]),
    ("filters", "<s>", "</s>", {}, [CONV_FULL, CONV_ONE]),
    ("tojson", "<s>", "</s>", {}, [CONV_FULL]),
    ("tests_and_operators", "<s>", "</s>", {}, [CONV_FULL]),
    ("string_methods", "<s>", "</s>", {}, [CONV_FULL]),
    ("loops_and_scopes", "<s>", "</s>", {}, [CONV_FULL, CONV_ONE]),
    ("bos_eos_and_roles", "<s>", "</s>", {}, [CONV_FULL, CONV_TOOL]),
    ("bos_eos_and_roles", None, "<|endoftext|>", {}, [CONV_ONE]),
    ("raise_on_unknown_role", "<s>", "</s>", {}, [CONV_FULL, CONV_TOOL]),
    ("glm4_macro_like", None, "<|endoftext|>", {}, [CONV_FULL, CONV_ONE, CONV_AGENT]),
    ("glm4_macro_like", None, "<|endoftext|>", {"enable_thinking": False}, [CONV_FULL, CONV_AGENT]),
    ("minimax_macro_like", None, "[e~[", {}, [CONV_FULL, CONV_ONE, CONV_AGENT, CONV_TOOL]),
    ("minimax_macro_like", None, "[e~[", {"identity": "You are Colibri."}, [CONV_ONE]),
    ("macro_semantics", "<s>", "</s>", {}, [CONV_FULL, CONV_ONE]),
]


def write_chat_fixture() -> None:
    from transformers.utils.chat_template_utils import render_jinja_template
    import transformers
    import jinja2

    cases = []
    for name, bos, eos, variables, conversations in CHAT_CASES:
        template = CHAT_TEMPLATES[name]
        renders = []
        for messages in conversations:
            for agp in (False, True):
                kwargs = dict(variables)
                if bos is not None:
                    kwargs["bos_token"] = bos
                if eos is not None:
                    kwargs["eos_token"] = eos
                rec = {"messages": messages, "add_generation_prompt": agp}
                try:
                    out = render_jinja_template(conversations=[copy.deepcopy(messages)], chat_template=template,
                                                add_generation_prompt=agp, **kwargs)
                    if isinstance(out, tuple):
                        out = out[0]
                    rec["output"] = out[0]
                except jinja2.exceptions.TemplateError as e:
                    if type(e) is not jinja2.exceptions.TemplateError:
                        raise  # only raise_exception's plain TemplateError is an expected outcome
                    rec["error"] = str(e)
                renders.append(rec)
        cases.append({"name": name, "template": template, "bos_token": bos, "eos_token": eos,
                      "variables": variables, "renders": renders})
    doc = {"generator": "tests/tokenizer/make_extra_fixtures.py",
           "renderer": "transformers.utils.chat_template_utils.render_jinja_template",
           "versions": {"transformers": transformers.__version__, "jinja2": jinja2.__version__},
           "cases": cases}
    (OUT / "chat_extra.json").write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {(OUT / 'chat_extra.json').relative_to(ROOT)} ({len(cases)} cases)")


if __name__ == "__main__":
    main()
    write_unicode_table()
    if "--tokenizers-only" not in sys.argv[1:]:
        write_chat_fixture()
