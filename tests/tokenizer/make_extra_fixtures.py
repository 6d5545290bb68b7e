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

Run:  nice tools/.venv/bin/python tests/tokenizer/make_extra_fixtures.py
It rewrites tests/tokenizer/fixtures/ (deterministic: same versions -> same bytes).
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


VARIANTS = {
    "bytelevel_nfc": (BYTELEVEL, variant_bytelevel_nfc),
    "bytelevel_gpt2": (BYTELEVEL, variant_bytelevel_gpt2),
    "metaspace_llama": (LLAMA, variant_metaspace_llama),
    "metaspace_split": (LLAMA, variant_metaspace_split),
    "added_flags": (BYTELEVEL, variant_added_flags),
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
    write_chat_fixture()
