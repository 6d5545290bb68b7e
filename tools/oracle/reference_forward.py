#!/usr/bin/env python3
"""Independent float64 NumPy forward pass for the oracle fixtures (no torch, no transformers).

It reads only config.json + model.safetensors + oracle.json of a fixture directory, so it
checks that the committed files mean what a converter will assume they mean (tensor names,
gate/up/down roles, routing rules, q/k norms, clip_qkv, shared expert, dense layers, tied
head, both config.json layouts) and measures how far transformers' float32 logits are from
a float64 evaluation of the same weights.  It is also a compact executable spec for the
C++ forward pass.

    tools/.venv/bin/python tools/oracle/reference_forward.py [fixture_dir ...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file

ROOT = Path(__file__).resolve().parents[2]
ORACLE_DIR = ROOT / "tests" / "fixtures" / "oracle"


def load_hparams(cfg: dict) -> dict:
    mt = cfg["model_type"]
    heads = cfg["num_attention_heads"]
    hp = {
        "family": mt,
        "hidden": cfg["hidden_size"],
        "layers": cfg["num_hidden_layers"],
        "heads": heads,
        "kv_heads": cfg.get("num_key_value_heads") or heads,
        "head_dim": cfg.get("head_dim") or cfg["hidden_size"] // heads,
        "eps": cfg["rms_norm_eps"],
        # transformers 5 writes rope_parameters.rope_theta, transformers 4 a top-level rope_theta
        "rope_theta": (cfg.get("rope_parameters") or {}).get("rope_theta", cfg.get("rope_theta", 10000.0)),
        # num_experts / num_local_experts are aliases in every family's config class
        "experts": cfg.get("num_local_experts", cfg.get("num_experts")),
        "top_k": cfg["num_experts_per_tok"],
        "norm_topk": True if mt == "mixtral" else bool(cfg.get("norm_topk_prob", False)),
        "tied": bool(cfg.get("tie_word_embeddings", False)),
        "clip_qkv": cfg.get("clip_qkv"),
        "mlp_only_layers": cfg.get("mlp_only_layers") or [],
        "sparse_step": cfg.get("decoder_sparse_step", 1),
    }
    rp = cfg.get("rope_parameters") or {}
    assert rp.get("rope_type", "default") == "default" and not cfg.get("rope_scaling"), "only default RoPE"
    if mt in ("qwen2_moe", "qwen3_moe"):
        assert not cfg.get("use_sliding_window"), "sliding window not modelled"
    else:
        assert cfg.get("sliding_window") in (None, 0), "sliding window not modelled"
    return hp


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def silu(x):
    return x / (1.0 + np.exp(-x))


def rope(x, pos, theta):
    """x [T, n, d]; HF rotate_half convention (first half / second half)."""
    d = x.shape[-1]
    inv = 1.0 / (theta ** (np.arange(0, d, 2, dtype=np.float64) / d))
    ang = pos[:, None] * inv[None, :]
    cos = np.concatenate([np.cos(ang)] * 2, -1)[:, None, :]
    sin = np.concatenate([np.sin(ang)] * 2, -1)[:, None, :]
    rot = np.concatenate([-x[..., d // 2:], x[..., : d // 2]], -1)
    return x * cos + rot * sin


def is_moe_layer(hp, i):
    if hp["family"] == "mixtral" or hp["family"] == "olmoe":
        return True
    return i not in hp["mlp_only_layers"] and hp["experts"] > 0 and (i + 1) % hp["sparse_step"] == 0


def forward(d: Path, ids: list[int]) -> np.ndarray:
    cfg = json.loads((d / "config.json").read_text())
    hp = load_hparams(cfg)
    W = {k: v.astype(np.float64) for k, v in load_file(str(d / "model.safetensors")).items()}
    fam = hp["family"]
    T = len(ids)
    H, KV, hd = hp["heads"], hp["kv_heads"], hp["head_dim"]
    pos = np.arange(T, dtype=np.float64)
    x = W["model.embed_tokens.weight"][ids]
    mask = np.triu(np.full((T, T), -np.inf), 1)

    def lin(name, v):
        y = v @ W[name + ".weight"].T
        if name + ".bias" in W:
            y = y + W[name + ".bias"]
        return y

    for i in range(hp["layers"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, W[p + "input_layernorm.weight"], hp["eps"])
        q, k, v = lin(p + "self_attn.q_proj", h), lin(p + "self_attn.k_proj", h), lin(p + "self_attn.v_proj", h)
        if fam == "olmoe":  # norm over the whole projection, then clip q, k (normed) and v (raw)
            q = rms_norm(q, W[p + "self_attn.q_norm.weight"], hp["eps"])
            k = rms_norm(k, W[p + "self_attn.k_norm.weight"], hp["eps"])
            if hp["clip_qkv"] is not None:
                c = hp["clip_qkv"]
                q, k, v = np.clip(q, -c, c), np.clip(k, -c, c), np.clip(v, -c, c)
        q, k, v = q.reshape(T, H, hd), k.reshape(T, KV, hd), v.reshape(T, KV, hd)
        if fam == "qwen3_moe":  # per-head norm, weight [head_dim] shared by all heads
            q = rms_norm(q, W[p + "self_attn.q_norm.weight"], hp["eps"])
            k = rms_norm(k, W[p + "self_attn.k_norm.weight"], hp["eps"])
        q, k = rope(q, pos, hp["rope_theta"]), rope(k, pos, hp["rope_theta"])
        att = np.empty((T, H, hd))
        for hh in range(H):
            kvh = hh // (H // KV)
            s = q[:, hh, :] @ k[:, kvh, :].T / np.sqrt(hd) + mask
            s = np.exp(s - s.max(-1, keepdims=True))
            att[:, hh, :] = (s / s.sum(-1, keepdims=True)) @ v[:, kvh, :]
        x = x + lin(p + "self_attn.o_proj", att.reshape(T, H * hd))

        h = rms_norm(x, W[p + "post_attention_layernorm.weight"], hp["eps"])
        if not is_moe_layer(hp, i):
            m = p + "mlp."
            x = x + lin(m + "down_proj", silu(lin(m + "gate_proj", h)) * lin(m + "up_proj", h))
            continue
        if fam == "mixtral":
            m = p + "block_sparse_moe."
            names = ("w1", "w3", "w2")  # gate, up, down
        else:
            m = p + "mlp."
            names = ("gate_proj", "up_proj", "down_proj")
        logits = h @ W[m + "gate.weight"].T
        probs = np.exp(logits - logits.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        out = np.zeros_like(h)
        for t in range(T):
            order = sorted(range(hp["experts"]), key=lambda e: (-probs[t, e], e))[: hp["top_k"]]
            w = probs[t, order]
            if hp["norm_topk"]:
                w = w / w.sum()
            for e, we in zip(order, w):
                ep = f"{m}experts.{e}."
                g = lin(ep + names[0], h[t])
                u = lin(ep + names[1], h[t])
                out[t] += we * lin(ep + names[2], silu(g) * u)
        if fam == "qwen2_moe":
            se = m + "shared_expert."
            shared = lin(se + "down_proj", silu(lin(se + "gate_proj", h)) * lin(se + "up_proj", h))
            gate = 1.0 / (1.0 + np.exp(-(h @ W[m + "shared_expert_gate.weight"].T)))
            out = out + gate * shared
        x = x + out

    x = rms_norm(x, W["model.norm.weight"], hp["eps"])
    head = W["model.embed_tokens.weight"] if hp["tied"] else W["lm_head.weight"]
    if hp["tied"]:
        assert "lm_head.weight" not in W
    return x @ head.T


def check(d: Path) -> dict:
    oracle = json.loads((d / "oracle.json").read_text())
    ids = oracle["input_ids"]
    n, vocab = oracle["logits_shape"]
    ref = np.fromfile(d / "logits.bin", dtype="<f4").reshape(n, vocab).astype(np.float64)
    full = forward(d, ids + oracle["greedy_tokens"])
    got = full[:n]
    greedy = [int(t) for t in full[n - 1 : n - 1 + len(oracle["greedy_tokens"])].argmax(-1)]
    gl = np.fromfile(d / "greedy_logits.bin", dtype="<f4").reshape(len(oracle["greedy_tokens"]), vocab)
    return {
        "case": oracle["case"],
        "max_abs_diff_prompt_logits": float(np.abs(got - ref).max()),
        "max_abs_logit": float(np.abs(ref).max()),
        "max_abs_diff_greedy_logits": float(np.abs(full[n - 1 : n - 1 + len(greedy)] - gl).max()),
        "greedy_match": greedy == oracle["greedy_tokens"],
    }


def main(argv):
    dirs = [Path(a) for a in argv] or sorted(p for p in ORACLE_DIR.iterdir() if (p / "oracle.json").exists())
    ok = True
    for d in dirs:
        r = check(d)
        good = r["greedy_match"] and r["max_abs_diff_prompt_logits"] < 1e-3
        ok &= good
        print(f"{r['case']:20s} max|d logits| prompt {r['max_abs_diff_prompt_logits']:.3g} "
              f"greedy-steps {r['max_abs_diff_greedy_logits']:.3g} (max |logit| {r['max_abs_logit']:.3g}) "
              f"greedy {'match' if r['greedy_match'] else 'MISMATCH'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
