#!/usr/bin/env python3
"""Generate the committed `transformers` oracle fixtures for Colibri.

Developer-run only: CI never runs Python, it reads the files this script writes.

What it writes (paths relative to the repository root):

  tests/fixtures/tokenizer/train_corpus.txt      (input: read, never written)
  tests/fixtures/oracle/<case>/                  one tiny seeded HF checkpoint per case:
      config.json, generation_config.json, model.safetensors (float32),
      tokenizer.json, tokenizer_config.json,
      logits.bin          float32 little-endian [n_prompt, vocab], one forward pass
      greedy_logits.bin   float32 little-endian [n_greedy, vocab], the raw logits
                          generate() produced at each greedy step (decode path, KV cache)
      oracle.json         ids, greedy tokens, margins, versions, description
  tests/fixtures/tokenizer/corpus.jsonl          tokenizer parity inputs
  tests/fixtures/tokenizer/<tok>.expected.jsonl  `tokenizers` ids / decodes per input
  tests/fixtures/tokenizer/chat_<case>.json      chat template renderings per case

Run:  nice -n 10 tools/.venv/bin/python tools/oracle/make_fixtures.py
(see tools/oracle/README.md).  Deterministic: a re-run with the same library versions
rewrites byte-identical files.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

# Keep every library quiet and offline; nothing here needs the network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np  # noqa: E402
import reference_forward  # noqa: E402  (tools/oracle/reference_forward.py, NumPy only)
import safetensors  # noqa: E402
import tokenizers  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers  # noqa: E402
from transformers import (  # noqa: E402
    AutoModelForCausalLM,
    AutoTokenizer,
    DeepseekV3Config,
    DeepseekV3ForCausalLM,
    GenerationConfig,
    Glm4MoeConfig,
    GptOssConfig,
    GptOssForCausalLM,
    Glm4MoeForCausalLM,
    MiniMaxM2Config,
    MiniMaxM2ForCausalLM,
    Mxfp4Config,
    MixtralConfig,
    MixtralForCausalLM,
    OlmoeConfig,
    OlmoeForCausalLM,
    Qwen2MoeConfig,
    Qwen2MoeForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
)

transformers.utils.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

ROOT = Path(__file__).resolve().parents[2]
ORACLE_DIR = ROOT / "tests" / "fixtures" / "oracle"
TOK_DIR = ROOT / "tests" / "fixtures" / "tokenizer"
TRAIN_CORPUS = TOK_DIR / "train_corpus.txt"

VOCAB = 512            # model vocab == tokenizer vocab for every case
N_GREEDY = 16          # greedy tokens recorded per case
MIN_ROUTER_MARGIN = 1e-3   # required gap between k-th and (k+1)-th routing probability
MIN_TOP2_GAP = 1e-2        # required gap between the two best logits at every greedy step
MIN_DISTINCT_GREEDY = 8    # greedy continuation must not collapse into a repeated token
MAX_ATTEMPTS = 1000

VERSIONS = {
    "torch": torch.__version__,
    "transformers": transformers.__version__,
    "tokenizers": tokenizers.__version__,
    "safetensors": safetensors.__version__,
    "numpy": np.__version__,
}

# --------------------------------------------------------------------------------------
# Tokenizers
# --------------------------------------------------------------------------------------

# Qwen2 pre-tokenization regex (also used by Qwen3).  OLMoE's real tokenizer is GPT-NeoX
# style; the fixtures share this one byte-level tokenizer for all three byte-level cases.
QWEN2_SPLIT_RE = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
BYTELEVEL_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
LLAMA_SPECIALS = ["<unk>", "<s>", "</s>"]


def _read_corpus() -> str:
    return TRAIN_CORPUS.read_text(encoding="utf-8")


def build_bytelevel_tokenizer(corpus: str) -> Tokenizer:
    """Qwen2/GPT-2 style byte-level BPE.  The 256 byte symbols and the merges live in the
    BPE model (ids 0..508); the three special tokens are added tokens after it (509..511),
    the way Qwen2's <|endoftext|>/<|im_start|>/<|im_end|> sit after its BPE vocabulary."""
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = None
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT_RE), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB - len(BYTELEVEL_SPECIALS),
        min_frequency=1,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    tok.train_from_iterator([corpus], trainer=trainer)
    assert tok.get_vocab_size() == VOCAB - len(BYTELEVEL_SPECIALS), tok.get_vocab_size()
    tok.add_special_tokens(BYTELEVEL_SPECIALS)
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.decoder = decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
    assert tok.get_vocab_size() == VOCAB
    return tok


def build_llama_tokenizer(corpus: str) -> Tokenizer:
    """Llama/Mixtral SentencePiece-style BPE in the form Mixtral's tokenizer.json uses:
    normalizer Prepend("▁") + Replace(" ", "▁"), no pre-tokenizer, BPE with byte_fallback
    (<0x00>..<0xFF> at ids 3..258), decoder Replace/ByteFallback/Fuse/Strip, and a
    TemplateProcessing post-processor that puts <s> first."""
    # 1. learn merges on ▁-prefixed words, line by line (newlines are never merged; they
    #    go through byte fallback, as in Llama).
    trainer_tok = Tokenizer(models.BPE(unk_token="<unk>"))
    trainer_tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True)
    n_learn = VOCAB - 256  # the specials + alphabet + merges; the 256 byte tokens come on top
    trainer = trainers.BpeTrainer(
        vocab_size=n_learn, min_frequency=1, show_progress=False, special_tokens=LLAMA_SPECIALS
    )
    lines = [ln for ln in corpus.split("\n") if ln.strip()]
    trainer_tok.train_from_iterator(lines, trainer=trainer)
    learned = json.loads(trainer_tok.to_str())["model"]
    learned_vocab = sorted(learned["vocab"].items(), key=lambda kv: kv[1])
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in learned["merges"]]
    assert len(learned_vocab) == n_learn, len(learned_vocab)

    # 2. Llama layout: <unk>=0 <s>=1 </s>=2, <0x00>..<0xFF>=3..258, then the learned pieces.
    vocab: dict[str, int] = {}
    for s in LLAMA_SPECIALS:
        vocab[s] = len(vocab)
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for piece, _ in learned_vocab:
        if piece in LLAMA_SPECIALS:
            continue
        assert piece not in vocab, piece
        vocab[piece] = len(vocab)
    assert len(vocab) == VOCAB, len(vocab)

    tok = Tokenizer(
        models.BPE(
            vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True, ignore_merges=False
        )
    )
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.pre_tokenizer = None
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    tok.add_special_tokens([tokenizers.AddedToken(s, special=True, normalized=False) for s in LLAMA_SPECIALS])
    tok.post_processor = processors.TemplateProcessing(
        single="<s>:0 $A:0", pair="<s>:0 $A:0 <s>:1 $B:1", special_tokens=[("<s>", 1)]
    )
    assert tok.get_vocab_size() == VOCAB
    return tok


def finish_tokenizer(tok: Tokenizer, style: str) -> Tokenizer:
    """Serialise once and reload, so every fixture is computed with exactly the committed
    tokenizer.json.  The Llama-style file keeps its merges in the older "left right" string
    form that hub Llama/Mixtral tokenizer.json files use; the byte-level one keeps the
    [left, right] pair form that current `tokenizers` writes.  A loader must accept both."""
    obj = json.loads(tok.to_str(pretty=True))
    if style == "llama":
        merges = obj["model"]["merges"]
        assert all(" " not in a and " " not in b for a, b in merges)
        obj["model"]["merges"] = [f"{a} {b}" for a, b in merges]
    text = json.dumps(obj, indent=2, ensure_ascii=False) + "\n"
    out = Tokenizer.from_str(text)
    out.colibri_json = text
    return out


# Chat templates, written in the style of each family (loop over messages, optional
# system message, add_generation_prompt).  transformers renders them with jinja2
# (trim_blocks=True, lstrip_blocks=True); all tags here use explicit `-` trimming.
CHAT_QWEN2 = (
    "{%- for message in messages %}\n"
    "{%- if loop.first and message['role'] != 'system' %}\n"
    "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}\n"
    "{%- endif %}\n"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "{{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n"
)

CHAT_QWEN3 = (
    "{%- for message in messages %}\n"
    "{%- if message.role not in ['system', 'user', 'assistant'] %}\n"
    "{{- raise_exception('Unknown role: ' + message.role) }}\n"
    "{%- endif %}\n"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content | trim + '<|im_end|>\\n' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "{{- '<|im_start|>assistant\\n' }}\n"
    "{%- if enable_thinking is defined and enable_thinking is false %}\n"
    "{{- '<think>\\n\\n</think>\\n\\n' }}\n"
    "{%- endif %}\n"
    "{%- endif %}\n"
)

CHAT_MIXTRAL = (
    "{%- if messages[0]['role'] == 'system' %}\n"
    "{%- set system_message = messages[0]['content'] %}\n"
    "{%- set loop_messages = messages[1:] %}\n"
    "{%- else %}\n"
    "{%- set loop_messages = messages %}\n"
    "{%- endif %}\n"
    "{{- bos_token }}\n"
    "{%- for message in loop_messages %}\n"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}\n"
    "{{- raise_exception('After the optional system message, conversation roles must alternate "
    "user/assistant/user/assistant/...') }}\n"
    "{%- endif %}\n"
    "{%- if message['role'] == 'user' %}\n"
    "{%- if loop.first and system_message is defined %}\n"
    "{{- '[INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}\n"
    "{%- else %}\n"
    "{{- '[INST] ' + message['content'] + ' [/INST]' }}\n"
    "{%- endif %}\n"
    "{%- elif message['role'] == 'assistant' %}\n"
    "{{- ' ' + message['content'] + eos_token }}\n"
    "{%- else %}\n"
    "{{- raise_exception('Only user and assistant roles are supported, after an optional system message') }}\n"
    "{%- endif %}\n"
    "{%- endfor %}\n"
)

# GLM-4.5 style: [gMASK]<sop> prefix, <|role|> headers, no end-of-turn marker.
CHAT_GLM4 = (
    "{{- '[gMASK]<sop>' }}\n"
    "{%- for message in messages %}\n"
    "{{- '<|' + message['role'] + '|>\\n' + message['content'] | trim }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "{{- '<|assistant|>\\n' }}\n"
    "{%- endif %}\n"
)

# DeepSeek-V3 style: role markers without newlines, the assistant turn closed by the end token
# (the real template's <｜User｜>/<｜Assistant｜> markers, spelled with this tokenizer's specials).
CHAT_DEEPSEEK_V3 = (
    "{{- bos_token if bos_token else '' }}\n"
    "{%- for message in messages %}\n"
    "{%- if message['role'] == 'system' %}{{- message['content'] }}\n"
    "{%- elif message['role'] == 'user' %}{{- '<|im_start|>' + message['content'] }}\n"
    "{%- else %}{{- '<|im_end|>' + message['content'] + '<|endoftext|>' }}{%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}{{- '<|im_end|>' }}{%- endif %}\n"
)

# MiniMax-M2 style: ]~!b[ / ]~b]role headers, [e~[ end of turn.
CHAT_MINIMAX_M2 = (
    "{{- ']~!b[' }}\n"
    "{%- for message in messages %}\n"
    "{{- ']~b]' + message['role'] + '\\n' + message['content'] + '[e~[\\n' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "{{- ']~b]ai\\n' }}\n"
    "{%- endif %}\n"
)

# gpt-oss style (harmony): <|start|>role<|message|>content<|end|>, generation opens the assistant.
CHAT_GPT_OSS = (
    "{%- for message in messages %}\n"
    "{{- '<|start|>' + message['role'] + '<|message|>' + message['content'] + '<|end|>' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "{{- '<|start|>assistant' }}\n"
    "{%- endif %}\n"
)

CHAT_TULU = (
    "{%- for message in messages %}\n"
    "{%- if message['role'] == 'system' %}\n"
    "{{- '<|system|>\\n' + message['content'] + '\\n' }}\n"
    "{%- elif message['role'] == 'user' %}\n"
    "{{- '<|user|>\\n' + message['content'] + '\\n' }}\n"
    "{%- elif message['role'] == 'assistant' %}\n"
    "{%- if not loop.last %}\n"
    "{{- '<|assistant|>\\n' + message['content'] + eos_token + '\\n' }}\n"
    "{%- else %}\n"
    "{{- '<|assistant|>\\n' + message['content'] + eos_token }}\n"
    "{%- endif %}\n"
    "{%- endif %}\n"
    "{%- if loop.last and add_generation_prompt %}\n"
    "{{- '<|assistant|>\\n' }}\n"
    "{%- endif %}\n"
    "{%- endfor %}\n"
)


def _added_tokens_decoder(tok: Tokenizer) -> dict:
    out = {}
    for tid, at in sorted(tok.get_added_tokens_decoder().items()):
        out[str(tid)] = {
            "content": at.content,
            "lstrip": at.lstrip,
            "normalized": at.normalized,
            "rstrip": at.rstrip,
            "single_word": at.single_word,
            "special": at.special,
        }
    return out


def tokenizer_config(tok: Tokenizer, style: str, chat_template: str, bos, eos, pad) -> dict:
    cfg = {
        "added_tokens_decoder": _added_tokens_decoder(tok),
        "bos_token": bos,
        "chat_template": chat_template,
        "clean_up_tokenization_spaces": False,
        "eos_token": eos,
        "model_max_length": 4096,
        "pad_token": pad,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    if style == "llama":
        cfg.update({"add_bos_token": True, "add_eos_token": False, "unk_token": "<unk>", "legacy": False})
    else:
        cfg.update({"unk_token": None, "errors": "replace", "split_special_tokens": False})
    return dict(sorted(cfg.items()))


# --------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------

MIXTRAL_PROMPT = "The test is small and the test is fast."
BYTE_PROMPT = "The model reads the file and the token."

CASES = [
    {
        "name": "mixtral_gqa",
        "model_cls": MixtralForCausalLM,
        "config_cls": MixtralConfig,
        "config": dict(
            vocab_size=VOCAB, hidden_size=64, intermediate_size=32, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, num_local_experts=8, num_experts_per_tok=2,
            tie_word_embeddings=False, rope_theta=10000.0, rms_norm_eps=1e-5, sliding_window=None,
            max_position_embeddings=4096, bos_token_id=1, eos_token_id=2, pad_token_id=None,
        ),
        "tokenizer": "llama",
        "chat_template": CHAT_MIXTRAL,
        "tok_special": dict(bos="<s>", eos="</s>", pad=None),
        "gen": dict(bos_token_id=1, eos_token_id=2),
        "prompt": MIXTRAL_PROMPT,
        "base_seed": 1000,
        "description": (
            "Mixtral: untied embeddings, GQA (4 query heads, 2 KV heads, head_dim 16), "
            "8 experts top-2 with softmax + renormalised top-k weights, SwiGLU experts, rope_theta 1e4."
        ),
    },
    {
        "name": "mixtral_tied_top3",
        "model_cls": MixtralForCausalLM,
        "config_cls": MixtralConfig,
        "config": dict(
            vocab_size=VOCAB, hidden_size=64, intermediate_size=32, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=4, num_local_experts=5, num_experts_per_tok=3,
            tie_word_embeddings=True, rope_theta=1e6, rms_norm_eps=1e-6, sliding_window=None,
            max_position_embeddings=4096, bos_token_id=1, eos_token_id=2, pad_token_id=None,
        ),
        "legacy_config_json": True,
        # tied: a smaller embedding keeps the current token from dominating its own logit
        "init": {"embed": 0.1, "router": 0.15},
        "tokenizer": "llama",
        "chat_template": CHAT_MIXTRAL,
        "tok_special": dict(bos="<s>", eos="</s>", pad=None),
        "gen": dict(bos_token_id=1, eos_token_id=2),
        "prompt": MIXTRAL_PROMPT,
        "base_seed": 2000,
        "description": (
            "Mixtral: tied embeddings (no lm_head.weight in the file), MHA (4/4 heads), 5 experts "
            "(odd count) top-3, 3 layers, rope_theta 1e6, rms_norm_eps 1e-6. config.json is written "
            "in the transformers-4 layout (top-level rope_theta, torch_dtype, no rope_parameters) like "
            "hub Mixtral checkpoints; transformers 5 loads it to the same model."
        ),
    },
    {
        "name": "qwen2_moe_shared",
        "model_cls": Qwen2MoeForCausalLM,
        "config_cls": Qwen2MoeConfig,
        "config": dict(
            vocab_size=VOCAB, hidden_size=64, intermediate_size=48, moe_intermediate_size=32,
            shared_expert_intermediate_size=32, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, num_experts=6, num_experts_per_tok=2, norm_topk_prob=False,
            decoder_sparse_step=1, mlp_only_layers=[1], qkv_bias=True, use_sliding_window=False,
            sliding_window=None, max_window_layers=3, tie_word_embeddings=False, rope_theta=1e6,
            rms_norm_eps=1e-6, max_position_embeddings=4096, bos_token_id=None, eos_token_id=511,
            pad_token_id=509,
        ),
        "tokenizer": "bytelevel",
        "chat_template": CHAT_QWEN2,
        "tok_special": dict(bos=None, eos="<|im_end|>", pad="<|endoftext|>"),
        "gen": dict(bos_token_id=None, eos_token_id=511, pad_token_id=509),
        "prompt": BYTE_PROMPT,
        "base_seed": 3000,
        "description": (
            "Qwen2-MoE: q/k/v projections with biases (random, non-zero), 6 experts top-2, softmax "
            "weights NOT renormalised (norm_topk_prob false), shared SwiGLU expert (intermediate 32) "
            "scaled by sigmoid(shared_expert_gate . x), layer 1 dense (mlp_only_layers [1], "
            "intermediate_size 48), GQA 4/2, rope_theta 1e6."
        ),
    },
    {
        "name": "qwen3_moe_qknorm",
        "model_cls": Qwen3MoeForCausalLM,
        "config_cls": Qwen3MoeConfig,
        "config": dict(
            vocab_size=VOCAB, hidden_size=64, head_dim=32, intermediate_size=64, moe_intermediate_size=24,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, num_experts=8,
            num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
            attention_bias=False, use_sliding_window=False, sliding_window=None, tie_word_embeddings=False,
            rope_theta=1e6, rms_norm_eps=1e-6, max_position_embeddings=4096, bos_token_id=None,
            eos_token_id=[511, 509], pad_token_id=509,
        ),
        "tokenizer": "bytelevel",
        "chat_template": CHAT_QWEN3,
        "tok_special": dict(bos=None, eos="<|im_end|>", pad="<|endoftext|>"),
        "gen": dict(bos_token_id=None, eos_token_id=[511, 509], pad_token_id=509),
        "prompt": BYTE_PROMPT,
        "base_seed": 4000,
        "description": (
            "Qwen3-MoE: explicit head_dim 32 with 4 heads at hidden 64 (q_proj out 128 != hidden), "
            "per-head q/k RMSNorm (weight [head_dim] shared by heads, before RoPE), 8 experts top-2 "
            "(moe_intermediate_size 24, not a power of two) "
            "renormalised (norm_topk_prob true), every layer sparse (decoder_sparse_step 1), GQA 4/2, "
            "no attention bias, eos_token_id is a list [511, 509]."
        ),
    },
    {
        "name": "olmoe_clip",
        "model_cls": OlmoeForCausalLM,
        "config_cls": OlmoeConfig,
        "config": dict(
            vocab_size=VOCAB, hidden_size=64, intermediate_size=32, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, num_experts=8, num_experts_per_tok=2,
            norm_topk_prob=False, clip_qkv=2.0, attention_bias=False, tie_word_embeddings=False,
            rope_theta=10000.0, rms_norm_eps=1e-5, max_position_embeddings=4096, bos_token_id=None,
            eos_token_id=509, pad_token_id=509,
        ),
        "tokenizer": "bytelevel",
        "chat_template": CHAT_TULU,
        "tok_special": dict(bos=None, eos="<|endoftext|>", pad="<|endoftext|>"),
        "gen": dict(bos_token_id=None, eos_token_id=509, pad_token_id=509),
        "prompt": BYTE_PROMPT,
        "base_seed": 5000,
        "description": (
            "OLMoE: q/k RMSNorm over the whole projection (q_norm [hidden], k_norm [kv_heads*head_dim]) "
            "applied before clip_qkv; clip_qkv 2.0 clamps q and k after their norms and v raw, and does "
            "clip values in every layer (see clip_counts); 8 experts top-2 not renormalised; GQA 4/2."
        ),
    },
    {
        "name": "qwen3_moe_yarn",
        "model_cls": Qwen3MoeForCausalLM,
        "config_cls": Qwen3MoeConfig,
        "config": dict(
            vocab_size=VOCAB, hidden_size=64, head_dim=32, intermediate_size=64, moe_intermediate_size=24,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, num_experts=8,
            num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
            attention_bias=False, use_sliding_window=False, sliding_window=None, tie_word_embeddings=False,
            rope_parameters={"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0,
                             "original_max_position_embeddings": 1024},
            rms_norm_eps=1e-6, max_position_embeddings=4096, bos_token_id=None,
            eos_token_id=[511, 509], pad_token_id=509,
        ),
        "tokenizer": "bytelevel",
        "chat_template": CHAT_QWEN3,
        "tok_special": dict(bos=None, eos="<|im_end|>", pad="<|endoftext|>"),
        "gen": dict(bos_token_id=None, eos_token_id=[511, 509], pad_token_id=509),
        "prompt": BYTE_PROMPT,
        "base_seed": 8000,
        "description": (
            "Qwen3-MoE with YaRN RoPE (rope_type yarn, factor 4, original_max_position_embeddings 1024, "
            "beta_fast 32 / beta_slow 1 by default, truncate): inverse frequencies blended over the "
            "correction range (dims 1..6 of 16 at head_dim 32, rope_theta 1e6), cos/sin scaled by the "
            "attention factor 0.1 ln 4 + 1; otherwise as qwen3_moe_qknorm."
        ),
    },
    {
        "name": "glm4_moe_groups",
        "model_cls": Glm4MoeForCausalLM,
        "config_cls": Glm4MoeConfig,
        "config": dict(
            vocab_size=VOCAB, hidden_size=64, head_dim=32, intermediate_size=48, moe_intermediate_size=24,
            num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, n_routed_experts=8,
            num_experts_per_tok=3, n_group=4, topk_group=2, n_shared_experts=1, first_k_dense_replace=1,
            routed_scaling_factor=2.5, norm_topk_prob=True, use_qk_norm=True, attention_bias=True,
            tie_word_embeddings=False, rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                        "partial_rotary_factor": 0.5},
            rms_norm_eps=1e-5, max_position_embeddings=4096, bos_token_id=None, eos_token_id=[511, 509],
            pad_token_id=509,
        ),
        "init": {"router": 0.5, "score_bias": 0.3},
        "tokenizer": "bytelevel",
        "chat_template": CHAT_GLM4,
        "tok_special": dict(bos=None, eos="<|im_end|>", pad="<|endoftext|>"),
        "gen": dict(bos_token_id=None, eos_token_id=[511, 509], pad_token_id=509),
        "prompt": BYTE_PROMPT,
        "base_seed": 6000,
        "description": (
            "GLM-4.5 (Glm4MoeForCausalLM): sigmoid router with a random non-zero e_score_correction_bias "
            "(selection only), 8 experts in 4 groups of which the best 2 are eligible (a group ranks by the "
            "sum of its two best biased scores), top-3, weights renormalised (+1e-20) and scaled by "
            "routed_scaling_factor 2.5, one shared expert without a gate, layer 0 dense "
            "(first_k_dense_replace 1, intermediate 48), partial RoPE (factor 0.5: 16 of head_dim 32), "
            "per-head q/k RMSNorm, q/k/v biases, GQA 4/2. num_nextn_predict_layers 1 with no MTP tensors "
            "(transformers neither builds nor saves them)."
        ),
    },
    {
        "name": "minimax_m2_sigmoid",
        "model_cls": MiniMaxM2ForCausalLM,
        "config_cls": MiniMaxM2Config,
        "config": dict(
            vocab_size=VOCAB, hidden_size=64, head_dim=32, intermediate_size=24, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, num_local_experts=8, num_experts_per_tok=2,
            rotary_dim=16, tie_word_embeddings=False, rope_parameters={"rope_type": "default", "rope_theta": 5e6},
            rms_norm_eps=1e-6, max_position_embeddings=4096, bos_token_id=None, eos_token_id=509,
            pad_token_id=509,
        ),
        "init": {"router": 0.5, "score_bias": 0.3},
        "tokenizer": "bytelevel",
        "chat_template": CHAT_MINIMAX_M2,
        "tok_special": dict(bos=None, eos="<|endoftext|>", pad="<|endoftext|>"),
        "gen": dict(bos_token_id=None, eos_token_id=509, pad_token_id=509),
        "prompt": BYTE_PROMPT,
        "base_seed": 7000,
        "description": (
            "MiniMax-M2 (MiniMaxM2ForCausalLM): sigmoid router with a random non-zero e_score_correction_bias "
            "(selection only), 8 experts top-2 always renormalised, q/k RMSNorm over the whole projection "
            "(q_norm [heads*head_dim], k_norm [kv_heads*head_dim]), partial RoPE through the legacy "
            "rotary_dim 16 of head_dim 32, rope_theta 5e6, no biases, GQA 4/2."
        ),
    },
    {
        "name": "deepseek_v3_mla",
        "model_cls": DeepseekV3ForCausalLM,
        "config_cls": DeepseekV3Config,
        "config": dict(
            vocab_size=VOCAB, hidden_size=64, intermediate_size=48, moe_intermediate_size=24,
            num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4, n_routed_experts=8,
            num_experts_per_tok=3, n_group=4, topk_group=2, n_shared_experts=1, first_k_dense_replace=1,
            routed_scaling_factor=2.5, norm_topk_prob=True, q_lora_rank=64, kv_lora_rank=64,
            qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32, rope_interleave=True,
            attention_bias=False, tie_word_embeddings=False,
            rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                             "original_max_position_embeddings": 1024, "beta_fast": 32.0, "beta_slow": 1.0,
                             "mscale": 0.707, "mscale_all_dim": 1.0},
            rms_norm_eps=1e-6, max_position_embeddings=4096, bos_token_id=None, eos_token_id=509,
            pad_token_id=509,
        ),
        "init": {"router": 0.5, "score_bias": 0.3},
        "tokenizer": "bytelevel",
        "chat_template": CHAT_DEEPSEEK_V3,
        "tok_special": dict(bos=None, eos="<|endoftext|>", pad="<|endoftext|>"),
        "gen": dict(bos_token_id=None, eos_token_id=509, pad_token_id=509),
        "prompt": BYTE_PROMPT,
        "base_seed": 9700,
        "description": (
            "DeepSeek-V3 (DeepseekV3ForCausalLM) with multi-head latent attention: q through q_a_proj (rank "
            "64) -> q_a_layernorm -> q_b_proj, kv_a_proj_with_mqa -> a latent of kv_lora_rank 64 (kv_a_layernorm) "
            "plus one shared rope key of 16, kv_b_proj expanding the latent to 4 heads of k_nope 32 and v 32; "
            "interleaved rotary pairs (rope_interleave), YaRN (factor 4, original 1024, mscale 0.707 and "
            "mscale_all_dim 1.0: cos/sin scaled by their ratio, the softmax scale by mscale_all_dim's square); "
            "sigmoid router with a random non-zero e_score_correction_bias, 8 experts in 4 groups of which "
            "the best 2 are eligible, top-3, renormalised (+1e-20), routed_scaling_factor 2.5, one shared "
            "expert, layer 0 dense (first_k_dense_replace 1, intermediate 48)."
        ),
    },
    {
        "name": "deepseek_v3_direct_q",
        "model_cls": DeepseekV3ForCausalLM,
        "config_cls": DeepseekV3Config,
        "config": dict(
            vocab_size=VOCAB, hidden_size=64, intermediate_size=48, moe_intermediate_size=32,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, n_routed_experts=8,
            num_experts_per_tok=2, n_group=1, topk_group=1, n_shared_experts=2, first_k_dense_replace=0,
            routed_scaling_factor=1.0, norm_topk_prob=False, q_lora_rank=None, kv_lora_rank=32,
            qk_nope_head_dim=32, qk_rope_head_dim=32, v_head_dim=64, rope_interleave=False,
            attention_bias=False, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            rms_norm_eps=1e-6, max_position_embeddings=4096, bos_token_id=None, eos_token_id=509,
            pad_token_id=509,
        ),
        "init": {"router": 0.5, "score_bias": 0.3},
        "tokenizer": "bytelevel",
        "chat_template": CHAT_DEEPSEEK_V3,
        "tok_special": dict(bos=None, eos="<|endoftext|>", pad="<|endoftext|>"),
        "gen": dict(bos_token_id=None, eos_token_id=509, pad_token_id=509),
        "prompt": BYTE_PROMPT,
        "base_seed": 9800,
        "description": (
            "DeepSeek-V3 with q_lora_rank null (a direct q_proj, as DeepSeek-V2-Lite), kv_lora_rank 32, "
            "k_nope 32 + rope 32 per head, v 64 (v_head_dim != qk_nope_head_dim), rotate_half RoPE "
            "(rope_interleave false) without scaling; one expert group, top-2 of 8 without renormalisation, "
            "two shared experts (shared ffn 2 x 32), every layer MoE (first_k_dense_replace 0)."
        ),
    },
    {
        "name": "gpt_oss_sinks",
        "model_cls": GptOssForCausalLM,
        "config_cls": GptOssConfig,
        "config": dict(
            vocab_size=VOCAB, hidden_size=64, head_dim=16, intermediate_size=32, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, num_local_experts=8, num_experts_per_tok=2,
            sliding_window=4, layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            attention_bias=True, swiglu_limit=1.5, swiglu_alpha=1.702, tie_word_embeddings=False,
            rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0,
                             "beta_slow": 1.0, "truncate": False, "original_max_position_embeddings": 4096},
            rms_norm_eps=1e-5, max_position_embeddings=131072, bos_token_id=None, eos_token_id=509,
            pad_token_id=509,
        ),
        "init": {"sinks": 1.0},
        "tokenizer": "bytelevel",
        "chat_template": CHAT_GPT_OSS,
        "tok_special": dict(bos=None, eos="<|endoftext|>", pad="<|endoftext|>"),
        "gen": dict(bos_token_id=None, eos_token_id=509, pad_token_id=509),
        "prompt": BYTE_PROMPT,
        "base_seed": 9000,
        "description": (
            "gpt-oss (GptOssForCausalLM): per-head attention sinks (init 1.0 z so they take real mass), "
            "layers 0 and 2 sliding-window (window 4 over a 30-token sequence) and layer 1 full, q/k/v/o "
            "biases, YaRN RoPE as the real checkpoints (factor 32, original 4096, truncate false, theta "
            "1.5e5); router linear with a bias, top-2 of 8 on the logits, softmax over the two; fused "
            "experts gate_up_proj [E, hidden, 2*ffn] (gate/up interleaved) and down_proj [E, ffn, hidden] "
            "with biases; clamped SwiGLU with swiglu_limit 1.5 (small, so that the clamps bite at these "
            "magnitudes; see clamp_counts) and alpha 1.702. GQA 4/2, head_dim 16."
        ),
    },
    {
        "name": "gpt_oss_mxfp4",
        "model_cls": GptOssForCausalLM,
        "config_cls": GptOssConfig,
        "config": dict(
            vocab_size=VOCAB, hidden_size=64, head_dim=16, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, num_local_experts=8, num_experts_per_tok=2,
            sliding_window=4, layer_types=["sliding_attention", "full_attention"],
            attention_bias=True, swiglu_limit=7.0, swiglu_alpha=1.702, tie_word_embeddings=False,
            rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0,
                             "beta_slow": 1.0, "truncate": False, "original_max_position_embeddings": 4096},
            rms_norm_eps=1e-5, max_position_embeddings=131072, bos_token_id=None, eos_token_id=509,
            pad_token_id=509,
        ),
        "init": {"sinks": 1.0},
        "mxfp4_experts": True,
        "tokenizer": "bytelevel",
        "chat_template": CHAT_GPT_OSS,
        "tok_special": dict(bos=None, eos="<|endoftext|>", pad="<|endoftext|>"),
        "gen": dict(bos_token_id=None, eos_token_id=509, pad_token_id=509),
        "prompt": BYTE_PROMPT,
        "base_seed": 9500,
        "description": (
            "gpt-oss as OpenAI ships it: the experts in MXFP4 (quantization_config quant_method mxfp4), "
            "gate_up_proj_blocks [E, 2*ffn, hidden/32, 16] and down_proj_blocks [E, hidden, ffn/32, 16] uint8 "
            "(byte j of a 32-value group: value 2j in the low nibble, 2j+1 in the high one, e2m1 codes) with "
            "gate_up_proj_scales / down_proj_scales [E, rows, groups] uint8 (e8m0, 2^(s-127)); rows are the "
            "output features, gate/up interleaved (even rows gate, odd rows up). Everything else f32. The "
            "expert weights were rounded to MXFP4 before the oracle ran, and transformers reloading the "
            "written checkpoint (Mxfp4Config(dequantize=True)) gives bit-identical logits. Real swiglu_limit "
            "7.0, window 4, q/k/v/o biases, sinks, YaRN as in gpt_oss_sinks; 2 layers, ffn 64."
        ),
    },
]


# --------------------------------------------------------------------------------------
# Model init, oracle computation
# --------------------------------------------------------------------------------------

SIGMOID_CASES = ("glm4_moe_groups", "minimax_m2_sigmoid", "deepseek_v3_mla", "deepseek_v3_direct_q")
INIT_STD = {"matrix": 0.15, "router": 0.3, "embed": 0.3, "lm_head": 0.3, "norm": 0.2, "bias": 0.2, "score_bias": 0.2,
            "sinks": 0.15}


def init_weights(model: torch.nn.Module, seed: int, overrides: dict | None = None) -> None:
    """Explicit, library-independent init from one seed (HF's default std 0.02 gives
    near-flat logits).  Every parameter, in sorted name order, gets z ~ N(0, 1) from one
    torch.Generator: matrices 0.15 z, router 0.3 z, embeddings / LM head 0.3 z, RMSNorm
    weights 1 + 0.2 z, biases 0.2 z, then (sigmoid routers) each e_score_correction_bias buffer
    0.2 z (per-case overrides in CASES[...]["init"])."""
    std = dict(INIT_STD, **(overrides or {}))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            z = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if "norm" in name:
                p.copy_(1.0 + std["norm"] * z)
            elif name.endswith(".bias"):
                p.copy_(std["bias"] * z)
            elif name.endswith("self_attn.sinks"):
                p.copy_(std["sinks"] * z)
            elif name.endswith("mlp.gate.weight") or name.endswith("mlp.router.weight"):
                p.copy_(std["router"] * z)
            elif "embed_tokens" in name:
                p.copy_(std["embed"] * z)
            elif name.startswith("lm_head"):
                p.copy_(std["lm_head"] * z)
            else:
                p.copy_(std["matrix"] * z)
        # sigmoid routers' e_score_correction_bias is a buffer (not a parameter): z after them
        for name, b in sorted(model.named_buffers(), key=lambda kv: kv[0]):
            if name.endswith("e_score_correction_bias"):
                b.copy_(std["score_bias"] * torch.randn(b.shape, generator=gen, dtype=torch.float32))


def moe_gates(model):
    out = []
    for i, layer in enumerate(model.model.layers):
        gate = getattr(layer.mlp, "gate", None) or getattr(layer.mlp, "router", None)  # gpt-oss: mlp.router
        # dense Qwen2-MoE layers have an MLP whose `gate_proj` is not a router
        if gate is not None and hasattr(layer.mlp, "experts"):
            out.append((i, gate))
    return out


def router_margins(model, ids: torch.Tensor, top_k: int):
    """Forward the whole sequence once and return per MoE layer the smallest gap between the
    k-th and (k+1)-th softmax probability over all tokens."""
    captured = {}
    hooks = []
    for i, gate in moe_gates(model):
        def hook(mod, inp, out, i=i):
            logits = out[0] if isinstance(out, tuple) else out
            captured[i] = logits.detach().float()
        hooks.append(gate.register_forward_hook(hook))
    try:
        with torch.no_grad():
            model(input_ids=ids)
    finally:
        for h in hooks:
            h.remove()
    margins = {}
    for i, logits in sorted(captured.items()):
        gate = dict(moe_gates(model))[i]
        if getattr(model.config, "model_type", "") in ("glm4_moe", "minimax_m2", "deepseek_v3"):
            margins[i] = sigmoid_margin(model, i, gate, logits.float(), top_k)
            continue
        probs = torch.softmax(logits.float(), dim=-1)
        top = torch.topk(probs, top_k + 1, dim=-1).values
        margins[i] = float((top[:, top_k - 1] - top[:, top_k]).min())
    return margins


def sigmoid_margin(model, i, gate, logits, top_k):
    """Sigmoid routers: the smallest gap that decides the choice, over all tokens: between the
    topk_group-th and next group score (groups > 1), and between the k-th and (k+1)-th eligible
    biased score."""
    mlp = model.model.layers[i].mlp
    bias = getattr(gate, "e_score_correction_bias", None)
    if bias is None:
        bias = mlp.e_score_correction_bias
    choice = logits.sigmoid() + bias.float()
    cfg = model.config
    groups = getattr(cfg, "n_group", 1) or 1
    margin = float("inf")
    if groups > 1:
        per = choice.shape[-1] // groups
        gs = choice.view(-1, groups, per).topk(2, dim=-1)[0].sum(-1)
        top = torch.topk(gs, cfg.topk_group + 1, dim=-1).values
        margin = float((top[:, cfg.topk_group - 1] - top[:, cfg.topk_group]).min())
        keep = torch.zeros_like(gs).scatter_(1, torch.topk(gs, cfg.topk_group, dim=-1)[1], 1)
        mask = keep.unsqueeze(-1).expand(-1, groups, per).reshape(choice.shape)
        choice = choice.masked_fill(~mask.bool(), float("-inf"))
    top = torch.topk(choice, top_k + 1, dim=-1).values
    gap = top[:, top_k - 1] - top[:, top_k]
    gap = torch.where(torch.isfinite(gap), gap, torch.full_like(gap, float("inf")))  # k+1-th masked: no contest
    return min(margin, float(gap.min()))


def clip_counts(model, ids: torch.Tensor, clip: float):
    """Count values |x| > clip in q (after q_norm), k (after k_norm) and v per layer."""
    counts = {}
    hooks = []
    for i, layer in enumerate(model.model.layers):
        att = layer.self_attn
        for key, mod in (("q", att.q_norm), ("k", att.k_norm), ("v", att.v_proj)):
            def hook(m, inp, out, i=i, key=key):
                x = out.detach()
                counts.setdefault(i, {})[key] = [int((x.abs() > clip).sum()), int(x.numel())]
            hooks.append(mod.register_forward_hook(hook))
    try:
        with torch.no_grad():
            model(input_ids=ids)
    finally:
        for h in hooks:
            h.remove()
    return counts


def swiglu_clamp_counts(model, ids: torch.Tensor, limit: float):
    """gpt-oss: per layer, how many gate values exceed the limit and up values leave [-limit, limit]."""
    counts = {}
    originals = {}
    for i, layer in enumerate(model.model.layers):
        experts = layer.mlp.experts
        originals[i] = experts._apply_gate

        def counted(gate_up, i=i, f=experts._apply_gate):
            g, u = gate_up[..., ::2], gate_up[..., 1::2]
            c = counts.setdefault(str(i), [0, 0, 0])
            c[0] += int((g > limit).sum())
            c[1] += int((u.abs() > limit).sum())
            c[2] += int(g.numel())
            return f(gate_up)
        experts._apply_gate = counted
    try:
        with torch.no_grad():
            model(input_ids=ids)
    finally:
        for i, layer in enumerate(model.model.layers):
            layer.mlp.experts._apply_gate = originals[i]
    return counts


# OCP MX e2m1 values by code (8..15: the negated 0..7), as OpenAI's checkpoints and transformers'
# integrations/mxfp4.py FP4_VALUES order them.
E2M1_VALUES = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def mxfp4_quantize(rows: torch.Tensor):
    """[..., out, in] f32 -> (blocks [..., out, in/32, 16] uint8, scales [..., out, in/32] uint8, values
    [..., out, in] f32): per 32-value group the shared exponent floor(log2(amax)) - 2 (OCP MX: the
    largest e2m1 magnitude is 6 = 1.5 * 2^2), each value rounded to the nearest e2m1 code (ties to
    the smaller magnitude, beyond 6 clamped); byte j of a group packs value 2j (low nibble) and
    2j + 1 (high nibble), as OpenAI's checkpoints do."""
    *prefix, cols = rows.shape
    g = rows.reshape(*prefix, cols // 32, 32)
    amax = g.abs().amax(-1).clamp_min(2.0 ** -100)
    e = torch.floor(torch.log2(amax)) - 2
    x = g / torch.pow(2.0, e)[..., None]
    magnitude = (x.abs()[..., None] - E2M1_VALUES[:8]).abs().argmin(-1)
    code = magnitude + 8 * (x < 0).long()
    blocks = (code[..., 0::2] | (code[..., 1::2] << 4)).to(torch.uint8)
    scales = (e + 127).to(torch.uint8)
    values = (E2M1_VALUES[code] * torch.pow(2.0, e)[..., None]).reshape(*prefix, cols)
    return blocks, scales, values


def mxfp4_round_experts(model) -> None:
    """Rounds every gpt-oss expert matrix to the MXFP4 grid along its input features (the values an
    MXFP4 checkpoint of this model holds). GptOssExperts stores [E, in, out]; the checkpoint's rows
    are the output features."""
    with torch.no_grad():
        for layer in model.model.layers:
            for name in ("gate_up_proj", "down_proj"):
                p = getattr(layer.mlp.experts, name)
                _, _, values = mxfp4_quantize(p.transpose(1, 2).contiguous())
                p.copy_(values.transpose(1, 2))


MXFP4_QUANTIZATION_CONFIG = {
    "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
                               "lm_head"],
    "quant_method": "mxfp4",
}


def write_mxfp4_checkpoint(out: Path) -> None:
    """Rewrites the saved model.safetensors in OpenAI's MXFP4 layout: each experts.gate_up_proj /
    down_proj [E, in, out] becomes <name>_blocks + <name>_scales over its transposed rows; the
    values were rounded to the grid already, so this is lossless (asserted)."""
    from safetensors.torch import load_file, save_file
    path = out / "model.safetensors"
    tensors = load_file(str(path))
    written = {}
    for name, t in sorted(tensors.items()):
        if name.endswith(("experts.gate_up_proj", "experts.down_proj")):
            blocks, scales, values = mxfp4_quantize(t.transpose(1, 2).contiguous())
            assert torch.equal(values.transpose(1, 2), t), name
            written[name + "_blocks"] = blocks.contiguous()
            written[name + "_scales"] = scales.contiguous()
        else:
            written[name] = t
    save_file(written, str(path), metadata={"format": "pt"})
    os.chmod(path, 0o644)


def top_k_of(cfg) -> int:
    return int(cfg.num_experts_per_tok)


def run_case_once(case: dict, seed: int, input_ids: list[int]):
    cfg = case["config_cls"](**case["config"])
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = case["model_cls"](cfg)
    model.config._attn_implementation = "eager"
    init_weights(model, seed, case.get("init"))
    if case.get("mxfp4_experts"):
        mxfp4_round_experts(model)
    model.eval()
    model.to(torch.float32)
    # the oracle run never stops early: no eos while generating
    model.generation_config = GenerationConfig(bos_token_id=None, eos_token_id=None, pad_token_id=0)

    ids = torch.tensor([input_ids], dtype=torch.long)
    with torch.no_grad():
        prompt_logits = model(input_ids=ids).logits[0].float().contiguous()
        gen = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            generation_config=GenerationConfig(
                max_new_tokens=N_GREEDY, do_sample=False, num_beams=1, eos_token_id=None, pad_token_id=0,
                bos_token_id=None, use_cache=True,
            ),
            return_dict_in_generate=True,
            output_logits=True,
        )
    seq = gen.sequences[0]
    greedy = [int(t) for t in seq[len(input_ids):]]
    assert len(greedy) == N_GREEDY, greedy
    step_logits = torch.stack([lg[0].float() for lg in gen.logits]).contiguous()
    top2 = torch.topk(step_logits, 2, dim=-1).values
    gaps = [float(g) for g in (top2[:, 0] - top2[:, 1])]
    assert [int(t) for t in step_logits.argmax(-1)] == greedy

    # consistency: a full forward over prompt + greedy tokens picks the same tokens
    full = seq[None, :]
    with torch.no_grad():
        full_logits = model(input_ids=full).logits[0].float()
    n = len(input_ids)
    full_greedy = [int(t) for t in full_logits[n - 1 : n - 1 + N_GREEDY].argmax(-1)]
    margins = router_margins(model, full, top_k_of(cfg))
    return model, cfg, prompt_logits, step_logits, greedy, gaps, full_greedy, margins, full


def eos_ids(case) -> list[int]:
    e = case["gen"]["eos_token_id"]
    return list(e) if isinstance(e, list) else [e]


def find_seed(case: dict, input_ids: list[int]):
    for attempt in range(MAX_ATTEMPTS):
        seed = case["base_seed"] + attempt
        res = run_case_once(case, seed, input_ids)
        model, cfg, prompt_logits, step_logits, greedy, gaps, full_greedy, margins, full = res
        ok = (
            min(margins.values()) >= MIN_ROUTER_MARGIN
            and min(gaps) >= MIN_TOP2_GAP
            and full_greedy == greedy
            and len(set(greedy)) >= MIN_DISTINCT_GREEDY
            and not (set(greedy) & set(eos_ids(case)))
        )
        if case["name"] == "olmoe_clip" and ok:
            cc = clip_counts(model, full, cfg.clip_qkv)
            ok = all(c[0] > 0 for layer in cc.values() for c in layer.values())
        if ok:
            return seed, attempt + 1, res
    raise SystemExit(f"{case['name']}: no seed met the margins in {MAX_ATTEMPTS} attempts")


# --------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------

def _dumps(obj, level=0) -> str:
    """json.dumps with indent 2, except that lists of scalars stay on one line."""
    pad = "  " * (level + 1)
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = [f"{pad}{json.dumps(k, ensure_ascii=False)}: {_dumps(v, level + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + "  " * level + "}"
    if isinstance(obj, list) and any(isinstance(v, (dict, list)) for v in obj):
        items = [pad + _dumps(v, level + 1) for v in obj]
        return "[\n" + ",\n".join(items) + "\n" + "  " * level + "]"
    return json.dumps(obj, ensure_ascii=False)


def write_json(path: Path, obj) -> None:
    path.write_text(_dumps(obj) + "\n", encoding="utf-8")


def write_f32(path: Path, t: torch.Tensor) -> None:
    arr = t.detach().cpu().numpy().astype("<f4", copy=False)
    path.write_bytes(arr.tobytes(order="C"))


def legacy_config(cfg_json: dict) -> dict:
    """transformers-4 layout: rope_theta at top level, torch_dtype, no rope_parameters."""
    out = dict(cfg_json)
    rp = out.pop("rope_parameters", None)
    if rp is not None:
        assert rp.get("rope_type", "default") == "default", rp
        out["rope_theta"] = rp["rope_theta"]
    if "dtype" in out:
        out["torch_dtype"] = out.pop("dtype")
    return dict(sorted(out.items()))


def save_case(case, seed, attempts, res, input_ids, tok: Tokenizer, tok_name: str):
    model, cfg, prompt_logits, step_logits, greedy, gaps, full_greedy, margins, full = res
    out = ORACLE_DIR / case["name"]
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)

    model.generation_config = GenerationConfig(**case["gen"])
    model.save_pretrained(str(out), safe_serialization=True)
    os.chmod(out / "model.safetensors", 0o644)
    cfg_path = out / "config.json"
    cfg_json = json.loads(cfg_path.read_text())
    if case.get("legacy_config_json"):
        cfg_json = legacy_config(cfg_json)
    if case.get("mxfp4_experts"):
        write_mxfp4_checkpoint(out)
        cfg_json["quantization_config"] = MXFP4_QUANTIZATION_CONFIG
    write_json(cfg_path, dict(sorted(cfg_json.items())))

    (out / "tokenizer.json").write_text(tok.colibri_json, encoding="utf-8")
    st = case["tok_special"]
    write_json(out / "tokenizer_config.json",
               tokenizer_config(tok, tok_name, case["chat_template"], st["bos"], st["eos"], st["pad"]))

    write_f32(out / "logits.bin", prompt_logits)
    write_f32(out / "greedy_logits.bin", step_logits)

    extra = {}
    if case.get("mxfp4_experts"):
        extra["mxfp4_note"] = (
            "the experts are stored as <name>_blocks / <name>_scales (OpenAI's MXFP4 layout, see description); "
            "logits.bin is transformers' f32 forward over exactly those values (verify_case reloads the "
            "checkpoint with Mxfp4Config(dequantize=True) and requires bit-identical logits)")
    if case["name"] in SIGMOID_CASES:
        extra["bf16_greedy_tokens"] = bf16_greedy(model, input_ids)
        extra["bf16_greedy_note"] = (
            "greedy_tokens of the same model with every matrix except the routers rounded to bf16 (what "
            "colibri-model convert --dtype bf16 stores): the sigmoid routers' small margins make bf16 rounding "
            "change the continuation, so a bf16 image is held to this sequence")
    if case["model_cls"] in (GptOssForCausalLM, DeepseekV3ForCausalLM):
        rounded_logits, rounded_greedy = bf16_rounded_run(model, input_ids)
        write_f32(out / "bf16_logits.bin", rounded_logits)
        extra["bf16_logits_file"] = "bf16_logits.bin"
        extra["bf16_logits_note"] = (
            "transformers' prompt logits with every matrix the bf16 image rounds (rank >= 2, neither the "
            "router nor a bias) rounded to bf16: what a bf16 image must reproduce up to fp32 arithmetic")
        extra["bf16_rounding_max_abs_diff"] = float(f"{float((rounded_logits - prompt_logits).abs().max()):.3g}")
        extra["bf16_greedy_tokens"] = rounded_greedy
    if case["model_cls"] is GptOssForCausalLM:
        extra["clamp_counts"] = {
            "what": "per layer: [gate values above swiglu_limit, up values outside +-swiglu_limit, values], over "
                    "the experts' gate_up outputs of prompt + greedy tokens",
            "layers": swiglu_clamp_counts(model, full, cfg.swiglu_limit),
        }
    if case["name"] == "olmoe_clip":
        cc = clip_counts(model, full, cfg.clip_qkv)
        extra["clip_counts"] = {
            "what": "per layer: [values with |x| > clip_qkv, total values] for q (after q_norm), "
                    "k (after k_norm), v (raw v_proj), over prompt + greedy tokens",
            "layers": {str(i): cc[i] for i in sorted(cc)},
        }

    full64 = reference_forward.forward(out, input_ids + greedy)
    n = len(input_ids)
    ref_diff = [
        float(f"{float(np.abs(full64[:n] - prompt_logits.numpy()).max()):.2g}"),
        float(f"{float(np.abs(full64[n - 1 : n - 1 + N_GREEDY] - step_logits.numpy()).max()):.2g}"),
    ]
    assert max(ref_diff) < 1e-3, (case["name"], ref_diff)

    vocab = cfg.vocab_size
    rep = sorted({t for t in input_ids if input_ids.count(t) > 1})
    oracle = {
        "case": case["name"],
        "architecture": type(model).__name__,
        "description": case["description"],
        "seed": seed,
        "seed_attempts": attempts,
        "init": "tools/oracle/make_fixtures.py:init_weights (torch.Generator seeded with `seed`)",
        "prompt_text": case["prompt"],
        "input_ids": input_ids,
        "repeated_input_ids": rep,
        "logits_file": "logits.bin",
        "logits_shape": [len(input_ids), vocab],
        "logits_dtype": "float32 little-endian, row-major [position][vocab], one forward pass over input_ids",
        "greedy_tokens": greedy,
        "greedy_logits_file": "greedy_logits.bin",
        "greedy_logits_shape": [N_GREEDY, vocab],
        "greedy_logits_note": "row i = raw logits generate() used to choose greedy_tokens[i] (KV-cached decode)",
        "greedy_note": "model.generate(do_sample=False, max_new_tokens=16) with eos disabled; "
                       "no greedy token is an eos id",
        "greedy_top2_gaps": gaps,
        "min_greedy_top2_gap": min(gaps),
        "min_router_margin": min(margins.values()),
        "router_margin_per_layer": {str(k): v for k, v in sorted(margins.items())},
        "router_margin_note": ("min over prompt+greedy tokens of p[k-th] - p[(k+1)-th], softmax fp32, "
                               "from one forward pass over the 32 tokens") if case["name"] not in SIGMOID_CASES else
                              ("min over prompt+greedy tokens of the gap between the k-th and (k+1)-th biased "
                               "sigmoid score among the eligible experts, and between the topk_group-th and next "
                               "group score, fp32, from one forward pass over the 32 tokens"),
        "moe_layers": [i for i, _ in moe_gates(model)],
        "tokenizer": tok_name + "_bpe",
        "tokenizer_expected": f"tests/fixtures/tokenizer/{tok_name}_bpe.expected.jsonl",
        "chat_expected": f"tests/fixtures/tokenizer/chat_{case['name']}.json",
        "float64_reference": {
            "what": "max |transformers fp32 logits - tools/oracle/reference_forward.py float64 logits| "
                    "(2 significant digits): a floor for the tolerance an fp32 engine can meet",
            "prompt_logits_max_abs_diff": ref_diff[0],
            "greedy_logits_max_abs_diff": ref_diff[1],
            "max_abs_logit": float(f"{float(prompt_logits.abs().max()):.3g}"),
        },
        "attn_implementation": "eager",
        "dtype": "float32",
        "versions": VERSIONS,
        **extra,
    }
    write_json(out / "oracle.json", oracle)
    return out


def bf16_rounded_run(model, input_ids: list[int]):
    """Prompt logits and greedy tokens with the matrices a bf16 image rounds in bf16 (gpt-oss:
    the router and the rank-2 expert biases stay f32, as in the image)."""
    import copy
    rounded = copy.deepcopy(model)
    with torch.no_grad():
        for name, p in rounded.named_parameters():
            if p.dim() > 1 and not name.endswith(("router.weight", "mlp.gate.weight")) and not name.endswith("_bias"):
                p.copy_(p.to(torch.bfloat16).float())
    ids = torch.tensor([input_ids], dtype=torch.long)
    with torch.no_grad():
        logits = rounded(input_ids=ids).logits[0].float().contiguous()
        gen = rounded.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=GenerationConfig(
            max_new_tokens=N_GREEDY, do_sample=False, num_beams=1, eos_token_id=None, pad_token_id=0,
            bos_token_id=None, use_cache=True))
    return logits, [int(t) for t in gen[0][len(input_ids):]]


def bf16_greedy(model, input_ids: list[int]) -> list[int]:
    """Greedy tokens with the matrices a bf16 image rounds (rank >= 2, not the router) in bf16."""
    import copy
    rounded = copy.deepcopy(model)
    with torch.no_grad():
        for name, p in rounded.named_parameters():
            if p.dim() > 1 and not name.endswith("mlp.gate.weight"):
                p.copy_(p.to(torch.bfloat16).float())
    ids = torch.tensor([input_ids], dtype=torch.long)
    with torch.no_grad():
        gen = rounded.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=GenerationConfig(
            max_new_tokens=N_GREEDY, do_sample=False, num_beams=1, eos_token_id=None, pad_token_id=0,
            bos_token_id=None, use_cache=True))
    return [int(t) for t in gen[0][len(input_ids):]]


def verify_case(out: Path, case: dict, input_ids, greedy, tok: Tokenizer):
    # an MXFP4 checkpoint goes through transformers' own dequantisation (no GPU kernels on CPU)
    quant = {"quantization_config": Mxfp4Config(dequantize=True)} if case.get("mxfp4_experts") else {}
    model = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32, attn_implementation="eager", **quant)
    model.eval()
    assert type(model).__name__ == case["model_cls"].__name__
    ids = torch.tensor([input_ids], dtype=torch.long)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float().numpy()
    ref = np.fromfile(out / "logits.bin", dtype="<f4").reshape(len(input_ids), -1)
    if not np.array_equal(logits, ref):
        raise SystemExit(f"{out.name}: reloaded logits differ (max abs {np.abs(logits - ref).max()})")
    # generation through the saved generation_config: eos may stop it only if produced
    with torch.no_grad():
        gen = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                             max_new_tokens=N_GREEDY)
    got = [int(t) for t in gen[0][len(input_ids):]]
    assert got == greedy, (out.name, got, greedy)
    # an independent float64 NumPy forward over the saved files agrees
    ref_check = reference_forward.check(out)
    if not (ref_check["greedy_match"] and ref_check["max_abs_diff_prompt_logits"] < 1e-3):
        raise SystemExit(f"{out.name}: NumPy reference disagrees: {ref_check}")
    # the tokenizer loads through transformers and encodes like `tokenizers`
    hf = AutoTokenizer.from_pretrained(str(out))
    for text in [case["prompt"], "Hello <|im_end|> wörld\n\n  x", "<s> [INST] hi [/INST]"]:
        for add in (False, True):
            a = hf(text, add_special_tokens=add)["input_ids"]
            b = tok.encode(text, add_special_tokens=add).ids
            assert a == b, (out.name, text, add, a, b)
    return True


# --------------------------------------------------------------------------------------
# Tokenizer parity fixtures
# --------------------------------------------------------------------------------------

CORPUS = [
    "Hello world",
    "hello world",
    " leading space",
    "  two leading spaces",
    "trailing space ",
    "trailing spaces   ",
    "",
    " ",
    "   ",
    "\n",
    "line one\nline two\n\nline four",
    "windows\r\nline endings\r\n",
    "The quick brown fox jumps over the lazy dog.",
    "It's fine, we'll fix it; they're sure I'd've known. YOU'RE SHOUTING, IT'S LOUD",
    "Numbers: 0 7 42 123 2024 3.14159 -17 1,000,000 1e-5 0x1F",
    "12345678901234567890",
    "café naïve résumé Zürich São Paulo façade coöperate",
    "cafe\u0301 (decomposed e + combining acute)",
    "Ångström, Øresund, Łódź, İstanbul, straße",
    "Ελληνικά, русский текст, עברית, العربية",
    "你好，世界！这是一个测试。",
    "日本語のテキストとカタカナ、ひらがな。",
    "한국어 문장입니다.",
    "emoji: 🙂 😀 👍🏽 🇫🇷 👨‍👩‍👧 ❤️",
    "math: ∑ x² ≤ ∞, α+β=γ, ½ ¾ → ⇒",
    "def f(x):\n\treturn x * 2\n",
    "for (int i = 0; i < n; ++i) {\n    acc += w[i] * x[i];\n}",
    "a\tb\t\tc\t \td",
    "x     =     1  # runs of spaces",
    "if(a&&b||!c){return -1;}else{return a<<2>>1;}",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "text before<|im_end|>text after",
    "<|endoftext|><|endoftext|>",
    "<s> [INST] What is 2+2? [/INST] 4</s>",
    "not special: <|im_end |> <s > </ s>",
    "mixed: the café costs 3.50€ and 你好 🙂!",
    "URL https://example.com/path?q=1&r=two#frag and mail a.b@c.de",
    "\u00a0non-breaking\u2009thin\u200bzero-width\u3000ideographic space",
    "\u0000 nul and \u0007 bell and \u007f del",
    "ǅ ǈ ǋ titlecase, ﬁ ligature, Ⅻ roman",
]

# invalid UTF-8 inputs: expected ids are those of bytes.decode("utf-8", "replace")
INVALID_UTF8 = [
    b"bad \xff byte",
    b"truncated \xe4\xbd",
    b"\xc3\x28 invalid continuation",
    b"overlong \xc0\xaf slash",
    b"surrogate \xed\xa0\x80 half",
]


def corpus_entries():
    entries = []
    for text in CORPUS:
        entries.append({"id": len(entries), "text": text})
    for raw in INVALID_UTF8:
        entries.append({
            "id": len(entries),
            "bytes_hex": raw.hex(),
            "text": raw.decode("utf-8", "replace"),
            "note": "input is invalid UTF-8; `text` (and the expected ids) use U+FFFD replacement "
                    "as Python bytes.decode('utf-8', 'replace') does (one U+FFFD per maximal invalid subpart)",
        })
    return entries


def write_tokenizer_fixtures(toks: dict):
    entries = corpus_entries()
    with open(TOK_DIR / "corpus.jsonl", "w", encoding="utf-8") as f:
        for e in entries:
            f.write(json.dumps(e, ensure_ascii=False) + "\n")

    for name, (tok, ref_case) in toks.items():
        tok_json = ORACLE_DIR / ref_case / "tokenizer.json"
        assert Tokenizer.from_file(str(tok_json)).to_str() == tok.to_str()
        hf = AutoTokenizer.from_pretrained(str(ORACLE_DIR / ref_case))
        for e in entries:  # transformers' wrapper must agree with `tokenizers` on every input
            for add in (False, True):
                a = hf(e["text"], add_special_tokens=add)["input_ids"]
                b = tok.encode(e["text"], add_special_tokens=add).ids
                assert a == b, (name, e, add, a, b)
                for skip in (False, True):
                    x, y = hf.decode(b, skip_special_tokens=skip), tok.decode(b, skip_special_tokens=skip)
                    assert x == y, (name, e, skip, x, y)
        lines = [{
            "kind": "meta",
            "tokenizer": name,
            "tokenizer_json": f"tests/fixtures/oracle/{ref_case}/tokenizer.json",
            "tokenizer_json_sha256": hashlib.sha256(tok_json.read_bytes()).hexdigest(),
            "also_used_by": sorted(c["name"] for c in CASES if c["tokenizer"] + "_bpe" == name),
            "corpus": "tests/fixtures/tokenizer/corpus.jsonl",
            "fields": {
                "ids": "encode(text, add_special_tokens=False).ids",
                "tokens": "the matching token strings",
                "ids_special": "encode(text, add_special_tokens=True).ids",
                "decode": "decode(ids, skip_special_tokens=False)",
                "decode_special_skip": "decode(ids_special, skip_special_tokens=True)",
                "decode_special_keep": "decode(ids_special, skip_special_tokens=False)",
            },
            "versions": {"tokenizers": tokenizers.__version__},
        }]
        for e in entries:
            enc = tok.encode(e["text"], add_special_tokens=False)
            enc_s = tok.encode(e["text"], add_special_tokens=True)
            lines.append({
                "kind": "encode",
                "id": e["id"],
                "text": e["text"],
                "ids": enc.ids,
                "tokens": enc.tokens,
                "ids_special": enc_s.ids,
                "decode": tok.decode(enc.ids, skip_special_tokens=False),
                "decode_special_skip": tok.decode(enc_s.ids, skip_special_tokens=True),
                "decode_special_keep": tok.decode(enc_s.ids, skip_special_tokens=False),
            })
        # decode-only cases: id sequences that end inside a multi-byte character, single ids
        decode_cases = []
        for text in ["你好", "🙂!", "é", "€ 3"]:
            ids = tok.encode(text, add_special_tokens=False).ids
            for cut in range(1, len(ids)):
                decode_cases.append(ids[:cut])
                decode_cases.append(ids[cut:])
        decode_cases.append(list(range(0, 40)))
        decode_cases.append(list(range(VOCAB - 40, VOCAB)))
        seen = set()
        for ids in decode_cases:
            key = tuple(ids)
            if key in seen:
                continue
            seen.add(key)
            lines.append({
                "kind": "decode",
                "ids": ids,
                "decode": tok.decode(ids, skip_special_tokens=False),
                "decode_skip_special": tok.decode(ids, skip_special_tokens=True),
            })
        with open(TOK_DIR / f"{name}.expected.jsonl", "w", encoding="utf-8") as f:
            for ln in lines:
                f.write(json.dumps(ln, ensure_ascii=False) + "\n")


CONVERSATIONS = [
    [{"role": "user", "content": "Hello! Who are you?"}],
    [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "What is 2 + 2?"},
        {"role": "assistant", "content": "4."},
        {"role": "user", "content": "And 3 * 3?"},
    ],
    [
        {"role": "user", "content": "Write a haiku about caches."},
        {"role": "assistant", "content": "Lines stay warm in L1,\nmisses wander out to RAM,\nthe prefetcher waits."},
        {"role": "user", "content": "  Now in French, please: café, déjà vu? 你好 🙂  "},
    ],
]
BAD_CONVERSATION = [
    {"role": "user", "content": "first"},
    {"role": "user", "content": "second user turn in a row"},
]


def write_chat_fixtures(case: dict, tok: Tokenizer):
    hf = AutoTokenizer.from_pretrained(str(ORACLE_DIR / case["name"]))
    convs = []
    for msgs in CONVERSATIONS:
        entry = {"messages": msgs}
        for agp in (False, True):
            text = hf.apply_chat_template(msgs, tokenize=False, add_generation_prompt=agp)
            key = "add_generation_prompt_" + ("true" if agp else "false")
            entry[key] = text
            entry[key + "_ids"] = tok.encode(text, add_special_tokens=False).ids
        if case["chat_template"] is CHAT_QWEN3:
            text = hf.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, enable_thinking=False)
            entry["add_generation_prompt_true_enable_thinking_false"] = text
        convs.append(entry)
    result = {
        "case": case["name"],
        "tokenizer_config": f"tests/fixtures/oracle/{case['name']}/tokenizer_config.json",
        "renderer": "transformers apply_chat_template(tokenize=False): jinja2 sandbox, trim_blocks=True, "
                    "lstrip_blocks=True; bos_token/eos_token from tokenizer_config.json",
        "ids_note": "*_ids = tokenizers encode(rendered, add_special_tokens=False)",
        "bos_token": hf.bos_token,
        "eos_token": hf.eos_token,
        "conversations": convs,
    }
    if case["chat_template"] is CHAT_MIXTRAL:
        try:
            hf.apply_chat_template(BAD_CONVERSATION, tokenize=False, add_generation_prompt=True)
            raise SystemExit("expected raise_exception for bad role order")
        except SystemExit:
            raise
        except Exception as exc:  # jinja2 TemplateError
            result["error_conversations"] = [{"messages": BAD_CONVERSATION, "error": str(exc)}]
    write_json(TOK_DIR / f"chat_{case['name']}.json", result)


# --------------------------------------------------------------------------------------

def prompt_ids(case, tok: Tokenizer) -> list[int]:
    ids = tok.encode(case["prompt"], add_special_tokens=True).ids
    ids = ids + [VOCAB - 1]  # the last row of the embedding (a special token) as input
    assert 12 <= len(ids) <= 16, (case["name"], len(ids), ids)
    assert len(set(ids)) < len(ids), "prompt must contain a repeated id"
    return ids


def compare_trees(tmp: Path) -> int:
    committed = ROOT / "tests" / "fixtures"
    bad = 0
    for sub in ("oracle", "tokenizer"):
        for f in sorted((tmp / sub).rglob("*")):
            if not f.is_file():
                continue
            rel = f.relative_to(tmp)
            c = committed / rel
            if not c.exists():
                print(f"missing in tests/fixtures: {rel}")
                bad += 1
            elif c.read_bytes() != f.read_bytes():
                print(f"differs: {rel}")
                bad += 1
    print("fixtures reproduce byte for byte" if not bad else f"{bad} file(s) differ")
    return 1 if bad else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", nargs="*", help="only these cases (default: all)")
    ap.add_argument("--no-verify", action="store_true", help="skip the reload checks")
    ap.add_argument("--out", type=Path, help="write <out>/oracle and <out>/tokenizer instead of tests/fixtures")
    ap.add_argument("--check", action="store_true",
                    help="generate into a temporary directory and compare byte for byte with tests/fixtures")
    args = ap.parse_args(argv)

    global ORACLE_DIR, TOK_DIR
    if args.check:
        if args.cases or args.out:
            ap.error("--check regenerates everything; it takes no --cases/--out")
        with tempfile.TemporaryDirectory(prefix="colibri-oracle-") as tmp:
            rc = main(["--out", tmp])
            if rc:
                return rc
            return compare_trees(Path(tmp))
    if args.out:
        ORACLE_DIR, TOK_DIR = args.out / "oracle", args.out / "tokenizer"
        TOK_DIR.mkdir(parents=True, exist_ok=True)

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)

    corpus = _read_corpus()
    toks = {
        "bytelevel": finish_tokenizer(build_bytelevel_tokenizer(corpus), "bytelevel"),
        "llama": finish_tokenizer(build_llama_tokenizer(corpus), "llama"),
    }

    summary = []
    for case in CASES:
        if args.cases and case["name"] not in args.cases:
            continue
        tok = toks[case["tokenizer"]]
        ids = prompt_ids(case, tok)
        seed, attempts, res = find_seed(case, ids)
        out = save_case(case, seed, attempts, res, ids, tok, case["tokenizer"])
        greedy = res[4]
        if not args.no_verify:
            verify_case(out, case, ids, greedy, tok)
        write_chat_fixtures(case, tok)
        summary.append((case["name"], seed, attempts, min(res[7].values()), min(res[5])))

    ref = {"bytelevel_bpe": (toks["bytelevel"], "qwen2_moe_shared"), "llama_bpe": (toks["llama"], "mixtral_gqa")}
    if not args.cases:
        write_tokenizer_fixtures(ref)

    for name, seed, attempts, margin, gap in summary:
        print(f"{name:20s} seed={seed} attempts={attempts} min_router_margin={margin:.6g} "
              f"min_top2_gap={gap:.6g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
