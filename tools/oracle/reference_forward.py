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
        "experts": cfg.get("num_local_experts", cfg.get("num_experts", cfg.get("n_routed_experts"))),
        "top_k": cfg["num_experts_per_tok"],
        "norm_topk": True if mt in ("mixtral", "minimax_m2") else bool(cfg.get("norm_topk_prob", mt in ("glm4_moe", "deepseek_v3"))),
        # GLM-4.5 / MiniMax-M2 / DeepSeek-V3: sigmoid router, e_score_correction_bias, groups, scaling
        "sigmoid": mt in ("glm4_moe", "minimax_m2", "deepseek_v3"),
        "n_group": cfg.get("n_group", 1),
        "topk_group": cfg.get("topk_group", 1),
        "scale": cfg.get("routed_scaling_factor", 1.0) if mt in ("glm4_moe", "deepseek_v3") else 1.0,
        "first_k_dense": cfg.get("first_k_dense_replace", 0) if mt in ("glm4_moe", "deepseek_v3") else 0,
        "n_shared": cfg.get("n_shared_experts", 0) if mt in ("glm4_moe", "deepseek_v3") else 0,
        "qk_norm_per_head": mt == "qwen3_moe" or (mt == "glm4_moe" and cfg.get("use_qk_norm", False)),
        "qk_norm_full": mt in ("olmoe", "minimax_m2"),
        "tied": bool(cfg.get("tie_word_embeddings", False)),
        "clip_qkv": cfg.get("clip_qkv"),
        "mlp_only_layers": cfg.get("mlp_only_layers") or [],
        "sparse_step": cfg.get("decoder_sparse_step", 1),
    }
    rp = cfg.get("rope_parameters") or {}
    factor = rp.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0))
    hp["mla"] = mt == "deepseek_v3"
    if hp["mla"]:  # multi-head latent attention: RoPE over the shared rope key's dimensions only
        hp["q_lora"], hp["kv_lora"] = cfg.get("q_lora_rank"), cfg["kv_lora_rank"]
        hp["nope"], hp["rope_dim"], hp["v_dim"] = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
        hp["interleave"] = bool(cfg.get("rope_interleave", True))
        hp["head_dim"] = hp["rope_dim"]
    hp["rotary_dim"] = int(hp["head_dim"] * factor)
    hp["yarn"] = rp if rp.get("rope_type") == "yarn" else None
    assert rp.get("rope_type", "default") in ("default", "yarn") and not cfg.get("rope_scaling"), "default or yarn RoPE"
    hp["gpt_oss"] = mt == "gpt_oss"
    if mt == "gpt_oss":  # sliding layers by layer_types; clamped SwiGLU
        hp["sliding"] = [t == "sliding_attention" for t in cfg["layer_types"]]
        hp["window"] = cfg["sliding_window"]
        hp["limit"], hp["alpha"] = cfg["swiglu_limit"], cfg["swiglu_alpha"]
    elif mt in ("qwen2_moe", "qwen3_moe"):
        assert not cfg.get("use_sliding_window"), "sliding window not modelled"
    else:
        assert cfg.get("sliding_window") in (None, 0), "sliding window not modelled"
    return hp


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def silu(x):
    return x / (1.0 + np.exp(-x))


def yarn_inv_freq(d, theta, yarn):
    """YaRN (arXiv 2309.00071; transformers _compute_yarn_parameters) in float64: the inverse
    frequencies and the cos/sin attention factor."""
    import math
    factor, original = yarn["factor"], yarn["original_max_position_embeddings"]
    fast, slow = yarn.get("beta_fast") or 32, yarn.get("beta_slow") or 1
    corr = lambda rot: (d * math.log(original / (rot * 2 * math.pi))) / (2 * math.log(theta))
    low, high = corr(fast), corr(slow)
    if yarn.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high += 0.001
    pos_freqs = theta ** (np.arange(0, d, 2, dtype=np.float64) / d)
    ramp = np.clip((np.arange(d // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    extra = 1 - ramp
    inv = (1.0 / (factor * pos_freqs)) * (1 - extra) + (1.0 / pos_freqs) * extra
    get_mscale = lambda m: 0.1 * m * math.log(factor) + 1.0 if factor > 1 else 1.0
    if yarn.get("mscale") and yarn.get("mscale_all_dim"):  # DeepSeek: the ratio of the two
        mscale = get_mscale(yarn["mscale"]) / get_mscale(yarn["mscale_all_dim"])
    else:
        mscale = get_mscale(1.0)
    return inv, yarn.get("attention_factor") or mscale


def rope(x, pos, theta, rotary_dim=None, yarn=None, interleave=False):
    """x [T, n, d]; HF rotate_half convention (first half / second half) over the first
    rotary_dim values of each head (all of them by default); the rest pass through.
    interleave (DeepSeek rope_interleave): the pairs are (x0, x1), (x2, x3), ...; the result is
    written in the rotate_half layout (the rotated evens, then the rotated odds), as transformers'
    apply_rotary_pos_emb_interleave returns it."""
    if rotary_dim is not None and rotary_dim < x.shape[-1]:
        return np.concatenate([rope(x[..., :rotary_dim], pos, theta, None, yarn, interleave), x[..., rotary_dim:]], -1)
    if interleave:
        x = np.concatenate([x[..., 0::2], x[..., 1::2]], -1)
    d = x.shape[-1]
    inv, scale = 1.0 / (theta ** (np.arange(0, d, 2, dtype=np.float64) / d)), 1.0
    if yarn is not None:
        inv, scale = yarn_inv_freq(d, theta, yarn)
    ang = pos[:, None] * inv[None, :]
    cos = scale * np.concatenate([np.cos(ang)] * 2, -1)[:, None, :]
    sin = scale * np.concatenate([np.sin(ang)] * 2, -1)[:, None, :]
    rot = np.concatenate([-x[..., d // 2:], x[..., : d // 2]], -1)
    return x * cos + rot * sin


def is_moe_layer(hp, i):
    if hp["family"] in ("mixtral", "olmoe", "minimax_m2", "gpt_oss"):
        return True
    if hp["family"] in ("glm4_moe", "deepseek_v3"):
        return i >= hp["first_k_dense"]
    return i not in hp["mlp_only_layers"] and hp["experts"] > 0 and (i + 1) % hp["sparse_step"] == 0


# OCP MX e2m1 code -> value (code 8..15: the negated values of 0..7)
E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def mxfp4_dequantize(blocks: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """OpenAI's MXFP4 checkpoint layout: blocks [..., rows, groups, 16] uint8, byte j holding value 2j
    (low nibble) and 2j+1 (high nibble) of a 32-value group; scales [..., rows, groups] uint8, e8m0
    (2^(s-127)). Returns [..., rows, groups*32] float64, the values the weights' rows hold."""
    codes = np.empty(blocks.shape[:-1] + (32,), dtype=np.uint8)
    codes[..., 0::2] = blocks & 0x0F
    codes[..., 1::2] = blocks >> 4
    values = E2M1[codes] * np.ldexp(1.0, scales.astype(np.int64) - 127)[..., None]
    return values.reshape(values.shape[:-2] + (-1,))


def load_weights(d: Path) -> dict:
    """The checkpoint's tensors in float64; MXFP4 experts (`<p>_blocks` + `<p>_scales`) become `<p>` in
    the layout transformers' GptOssExperts uses ([E, in, out], the rows transposed)."""
    raw = load_file(str(d / "model.safetensors"))
    W = {k: v.astype(np.float64) for k, v in raw.items() if not k.endswith(("_blocks", "_scales"))}
    for k in raw:
        if k.endswith("_blocks"):
            base = k[: -len("_blocks")]
            W[base] = np.swapaxes(mxfp4_dequantize(raw[k], raw[base + "_scales"]), -1, -2)
    return W


def gqa_attention(hp, W, lin, a, h, pos, mask, i):
    """Grouped-query attention of layer i (prefix a = "model.layers.i.self_attn."), the o_proj output."""
    T = h.shape[0]
    H, KV, hd = hp["heads"], hp["kv_heads"], hp["head_dim"]
    p = a[: -len("self_attn.")]
    q, k, v = lin(a + "q_proj", h), lin(a + "k_proj", h), lin(a + "v_proj", h)
    if hp["qk_norm_full"]:  # norm over the whole projection, then (OLMoE) clip q, k (normed) and v (raw)
        q = rms_norm(q, W[p + "self_attn.q_norm.weight"], hp["eps"])
        k = rms_norm(k, W[p + "self_attn.k_norm.weight"], hp["eps"])
        if hp["clip_qkv"] is not None:
            c = hp["clip_qkv"]
            q, k, v = np.clip(q, -c, c), np.clip(k, -c, c), np.clip(v, -c, c)
    q, k, v = q.reshape(T, H, hd), k.reshape(T, KV, hd), v.reshape(T, KV, hd)
    if hp["qk_norm_per_head"]:  # per-head norm, weight [head_dim] shared by all heads
        q = rms_norm(q, W[p + "self_attn.q_norm.weight"], hp["eps"])
        k = rms_norm(k, W[p + "self_attn.k_norm.weight"], hp["eps"])
    q = rope(q, pos, hp["rope_theta"], hp["rotary_dim"], hp["yarn"])
    k = rope(k, pos, hp["rope_theta"], hp["rotary_dim"], hp["yarn"])
    att = np.empty((T, H, hd))
    m_i = mask
    if hp["gpt_oss"] and hp["sliding"][i]:  # a query sees keys j with i - window < j <= i
        m_i = mask + np.tril(np.full((T, T), -np.inf), -hp["window"])
    for hh in range(H):
        kvh = hh // (H // KV)
        s = q[:, hh, :] @ k[:, kvh, :].T / np.sqrt(hd) + m_i
        if hp["gpt_oss"]:  # a learned sink logit per head joins the softmax and adds no value
            sink = np.full((T, 1), W[p + "self_attn.sinks"][hh])
            full = np.concatenate([s, sink], -1)
            e = np.exp(full - full.max(-1, keepdims=True))
            att[:, hh, :] = (e[:, :-1] / e.sum(-1, keepdims=True)) @ v[:, kvh, :]
            continue
        s = np.exp(s - s.max(-1, keepdims=True))
        att[:, hh, :] = (s / s.sum(-1, keepdims=True)) @ v[:, kvh, :]
    return lin(a + "o_proj", att.reshape(T, H * hd))


def mla_attention(hp, W, lin, a, h, pos, mask):
    """Multi-head latent attention (DeepSeek-V2/V3, transformers DeepseekV3Attention): q through the
    low-rank q_a/q_b pair (or q_proj), one latent of kv_lora_rank plus a shared rope key per token,
    kv_b_proj expanding the latent into per-head k_nope and v; the o_proj output."""
    T, H = h.shape[0], hp["heads"]
    nope, rd, vd, r = hp["nope"], hp["rope_dim"], hp["v_dim"], hp["kv_lora"]
    if hp["q_lora"] is None:
        q = lin(a + "q_proj", h)
    else:
        q = lin(a + "q_b_proj", rms_norm(lin(a + "q_a_proj", h), W[a + "q_a_layernorm.weight"], hp["eps"]))
    q = q.reshape(T, H, nope + rd)
    kva = lin(a + "kv_a_proj_with_mqa", h)
    latent = rms_norm(kva[:, :r], W[a + "kv_a_layernorm.weight"], hp["eps"])
    k_rot = rope(kva[:, None, r:], pos, hp["rope_theta"], None, hp["yarn"], hp["interleave"])
    q_rot = rope(q[..., nope:], pos, hp["rope_theta"], None, hp["yarn"], hp["interleave"])
    kv = lin(a + "kv_b_proj", latent).reshape(T, H, nope + vd)
    k_nope, v = kv[..., :nope], kv[..., nope:]
    scaling = (nope + rd) ** -0.5
    y = hp["yarn"]
    if y is not None and y.get("mscale_all_dim"):
        import math
        m = 0.1 * y["mscale_all_dim"] * math.log(y["factor"]) + 1.0 if y["factor"] > 1 else 1.0
        scaling = scaling * m * m
    att = np.empty((T, H, vd))
    for hh in range(H):
        s = (q[:, hh, :nope] @ k_nope[:, hh, :].T + q_rot[:, hh, :] @ k_rot[:, 0, :].T) * scaling + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        att[:, hh, :] = (s / s.sum(-1, keepdims=True)) @ v[:, hh, :]
    return lin(a + "o_proj", att.reshape(T, H * vd))


def forward(d: Path, ids: list[int]) -> np.ndarray:
    cfg = json.loads((d / "config.json").read_text())
    hp = load_hparams(cfg)
    W = load_weights(d)
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
        if hp["mla"]:
            x = x + mla_attention(hp, W, lin, p + "self_attn.", h, pos, mask)
        else:
            x = x + gqa_attention(hp, W, lin, p + "self_attn.", h, pos, mask, i)
        h = rms_norm(x, W[p + "post_attention_layernorm.weight"], hp["eps"])
        if not is_moe_layer(hp, i):
            m = p + "mlp."
            x = x + lin(m + "down_proj", silu(lin(m + "gate_proj", h)) * lin(m + "up_proj", h))
            continue
        if hp["gpt_oss"]:  # biased router, softmax over the top-k logits, fused biased experts
            m = p + "mlp."
            logits = lin(m + "router", h)
            out = np.zeros_like(h)
            L, A = hp["limit"], hp["alpha"]
            for t in range(T):
                order = sorted(range(hp["experts"]), key=lambda e: (-logits[t, e], e))[: hp["top_k"]]
                w = np.exp(logits[t, order] - logits[t, order].max())
                w = w / w.sum()
                for e, we in zip(order, w):
                    gu = h[t] @ W[m + "experts.gate_up_proj"][e] + W[m + "experts.gate_up_proj_bias"][e]
                    g, u = np.minimum(gu[::2], L), np.clip(gu[1::2], -L, L)
                    y = (u + 1) * (g / (1.0 + np.exp(-A * g)))
                    out[t] += we * (y @ W[m + "experts.down_proj"][e] + W[m + "experts.down_proj_bias"][e])
            x = x + out
            continue
        if fam in ("mixtral", "minimax_m2"):
            m = p + "block_sparse_moe."
            names = ("w1", "w3", "w2")  # gate, up, down
        else:
            m = p + "mlp."
            names = ("gate_proj", "up_proj", "down_proj")
        logits = h @ W[m + "gate.weight"].T
        if hp["sigmoid"]:
            probs = 1.0 / (1.0 + np.exp(-logits))
            bias_name = m + ("gate.e_score_correction_bias" if fam in ("glm4_moe", "deepseek_v3") else "e_score_correction_bias")
            choice = probs + W[bias_name]
        else:
            probs = np.exp(logits - logits.max(-1, keepdims=True))
            probs /= probs.sum(-1, keepdims=True)
            choice = probs
        out = np.zeros_like(h)
        E, G = hp["experts"], hp["n_group"]
        for t in range(T):
            c = choice[t].copy()
            if G > 1:  # a group ranks by the sum of its two best choices; keep the best topk_group
                per = E // G
                gs = [sum(sorted(c[g * per:(g + 1) * per])[-2:]) for g in range(G)]
                keep = sorted(range(G), key=lambda g: (-gs[g], g))[: hp["topk_group"]]
                for g in range(G):
                    if g not in keep:
                        c[g * per:(g + 1) * per] = -np.inf
            order = sorted(range(E), key=lambda e: (-c[e], e))[: hp["top_k"]]
            w = probs[t, order]
            if hp["norm_topk"]:
                w = w / w.sum()
            w = w * hp["scale"]
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
        if hp["n_shared"]:  # GLM, DeepSeek: shared experts, summed without a gate
            se = m + "shared_experts."
            out = out + lin(se + "down_proj", silu(lin(se + "gate_proj", h)) * lin(se + "up_proj", h))
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
