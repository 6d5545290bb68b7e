#!/usr/bin/env python3
"""The benchmark checkpoint as GGUF, for side-by-side runs with llama.cpp (bench/README.md).

  python bench/make_gguf.py PEER_DIR /tmp/eb/bench-hf /tmp/eb/bench-f16.gguf

PEER_DIR holds llama.cpp's convert_hf_to_gguf.py, conversion/ and gguf-py/. The checkpoint's
tokenizer is a placeholder (7 tokens, no merges), which the converter refuses: a copy of the
checkpoint gets one merge ("a b", and "ab" in the vocabulary), the other files linked, and the
converter's pre-tokenizer check answers "default" (llama-bench feeds token ids and never
tokenizes text). Needs torch, numpy and safetensors (a tools venv); developer tool, never CI.
"""
import json, os, sys, tempfile

peer, checkpoint, out = sys.argv[1:4]
copy = tempfile.mkdtemp(prefix="gguf-src-")
for name in os.listdir(checkpoint):
    if name != "tokenizer.json":
        os.symlink(os.path.join(os.path.abspath(checkpoint), name), os.path.join(copy, name))
with open(os.path.join(checkpoint, "tokenizer.json")) as f:
    tokenizer = json.load(f)
tokenizer["model"]["merges"] = ["a b"]
tokenizer["model"]["vocab"].setdefault("ab", len(tokenizer["model"]["vocab"]))
with open(os.path.join(copy, "tokenizer.json"), "w") as f:
    json.dump(tokenizer, f)

sys.path[:0] = [os.path.join(peer, "gguf-py"), peer]
import convert_hf_to_gguf as converter
import conversion.base as base
for module in (converter, base):
    for value in vars(module).values():
        if isinstance(value, type) and hasattr(value, "get_vocab_base_pre"):
            value.get_vocab_base_pre = lambda self, tokenizer: "default"
sys.argv = ["convert_hf_to_gguf.py", copy, "--outfile", out, "--outtype", "f16"]
converter.main()
