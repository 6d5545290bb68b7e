#!/usr/bin/env python3
"""Evaluate the saved tiny model with transformers and write the reference artifacts.

Reads models/<name>/ as saved by train.py. Writes there:
  config.json (adds the legacy keys num_experts / rope_theta / torch_dtype beside the
  transformers-5 ones, so readers of either convention find them), reference.json,
  reference_logits.bin, training_log.txt, MODEL_CARD.md.
All evaluation uses the SAVED bf16 weights loaded with dtype=torch.float32.
"""
import argparse
import hashlib
import json
import math
import os
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import corpus  # noqa: E402

GREEDY_PROMPT = "And God said,"
REF_LOGITS_TOKENS = 32
SAMPLE_PROMPTS = [
    "In the beginning",
    "And the LORD spake unto Moses, saying,",
    "Psalms 23\n",
    "Blessed are the",
    "Jesus answered and said unto them,",
]


def patch_config(out):
    p = os.path.join(out, "config.json")
    with open(p) as f:
        cfg = json.load(f)
    cfg["num_experts"] = cfg.get("num_experts", cfg.get("num_local_experts"))
    rp = cfg.get("rope_parameters") or {}
    if "rope_theta" in rp:
        cfg["rope_theta"] = rp["rope_theta"]
    cfg["torch_dtype"] = cfg.get("dtype", "bfloat16")
    cfg["rope_scaling"] = None
    with open(p, "w") as f:
        json.dump(dict(sorted(cfg.items())), f, indent=2)
        f.write("\n")
    return cfg


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(HERE, "..", "..", "models", "colibri-tiny-moe"))
    ap.add_argument("--workdir", default=os.path.join(HERE, "work"))
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    out = os.path.abspath(args.out)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    cfg_json = patch_config(out)
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    hf_tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    model.eval()
    cfg = model.config
    T = cfg.max_position_embeddings
    E, K, L = cfg.num_experts, cfg.num_experts_per_tok, cfg.num_hidden_layers

    text = open(os.path.join(out, "heldout.txt")).read()
    ids = tok.encode(text).ids
    assert ids[0] == tok.token_to_id(corpus.BOS)
    assert hf_tok(text)["input_ids"] == ids, "AutoTokenizer disagrees with tokenizer.json"
    assert tok.decode(ids) == text, "tokenizer round trip failed"

    # ---- perplexity: non-overlapping windows of T tokens, each scored independently
    tot_nll, n_scored = 0.0, 0
    counts = np.zeros((L, E), dtype=np.int64)
    first_choice = np.zeros((L, E), dtype=np.int64)
    with torch.no_grad():
        for s in range(0, len(ids), T):
            w = ids[s:s + T]
            if len(w) < 2:
                continue
            x = torch.tensor([w])
            o = model(input_ids=x, output_router_logits=True)
            lp = torch.log_softmax(o.logits[0, :-1].float(), -1)
            nll = -lp.gather(-1, x[0, 1:, None]).squeeze(-1)
            tot_nll += nll.double().sum().item()
            n_scored += nll.numel()
            for li, rl in enumerate(o.router_logits):
                top = torch.topk(torch.softmax(rl.float(), -1), K, dim=-1).indices
                counts[li] += np.bincount(top.reshape(-1).numpy(), minlength=E)
                first_choice[li] += np.bincount(top[:, 0].numpy(), minlength=E)
    mean_nll = tot_nll / n_scored
    ppl = math.exp(mean_nll)
    print(f"heldout: {len(ids)} tokens, scored {n_scored}, mean NLL {mean_nll:.5f}, ppl {ppl:.4f}")

    # ---- reference logits for the first tokens of heldout.txt
    ref_ids = ids[:REF_LOGITS_TOKENS]
    with torch.no_grad():
        ref_logits = model(input_ids=torch.tensor([ref_ids])).logits[0].float().numpy()
    ref_logits.astype("<f4").tofile(os.path.join(out, "reference_logits.bin"))

    # ---- greedy continuation (full recompute each step, no early stop on EOS)
    prompt_ids = tok.encode(GREEDY_PROMPT).ids
    seq = list(prompt_ids)
    with torch.no_grad():
        for _ in range(32):
            lg = model(input_ids=torch.tensor([seq])).logits[0, -1]
            seq.append(int(torch.argmax(lg)))
        gen = model.generate(torch.tensor([prompt_ids]), do_sample=False, max_new_tokens=32, max_length=None,
                             min_new_tokens=32, eos_token_id=None, pad_token_id=cfg.eos_token_id)
    greedy_ids = seq[len(prompt_ids):]
    assert gen[0, len(prompt_ids):].tolist() == greedy_ids, "generate() and manual greedy disagree"
    greedy_text = tok.decode(greedy_ids, skip_special_tokens=False)
    print("greedy:", repr(GREEDY_PROMPT + greedy_text))

    # ---- samples
    samples = []
    with torch.no_grad():
        for p in SAMPLE_PROMPTS:
            pid = torch.tensor([tok.encode(p).ids])
            g = model.generate(pid, do_sample=False, max_new_tokens=48, max_length=None, pad_token_id=cfg.eos_token_id)
            greedy = tok.decode(g[0, pid.shape[1]:].tolist())
            torch.manual_seed(42)
            s = model.generate(pid, do_sample=True, temperature=0.8, top_k=40, top_p=1.0,
                               max_new_tokens=48, max_length=None, pad_token_id=cfg.eos_token_id)
            sampled = tok.decode(s[0, pid.shape[1]:].tolist())
            samples.append(dict(prompt=p, greedy=greedy, sampled=sampled))
            print(repr(p), "->", repr(greedy), "|", repr(sampled))

    # ---- parameter counts
    n_total = sum(p.numel() for p in model.parameters())
    n_expert = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
    n_active = n_total - n_expert + n_expert * K // E
    n_embed = model.model.embed_tokens.weight.numel()

    wt = os.path.join(out, "model.safetensors")
    ref = {
        "model": os.path.basename(out),
        "transformers_version": __import__("transformers").__version__,
        "torch_version": torch.__version__,
        "eval_dtype": "float32 (saved bfloat16 weights upcast: from_pretrained(dtype=torch.float32))",
        "checkpoint_sha256": hashlib.sha256(open(wt, "rb").read()).hexdigest(),
        "heldout_sha256": hashlib.sha256(text.encode()).hexdigest(),
        "perplexity": {
            "value": ppl,
            "mean_nll": mean_nll,
            "tokens_in_file": len(ids),
            "tokens_scored": n_scored,
            "protocol": {
                "tokenization": "tokenizer.json encode(whole heldout.txt) with its TemplateProcessing post-processor, i.e. one <|bos|> (id 0) prepended to the whole file; no EOS appended",
                "window": T,
                "stride": T,
                "windows": "non-overlapping windows ids[s:s+window] for s = 0, window, 2*window, ...; the last window is shorter; each window is evaluated independently from an empty KV cache with positions 0..len-1; only the first window starts with BOS",
                "scored": "in each window, tokens 1..len-1 are predicted from their prefix within the window (the first token of every window is not scored)",
                "value": "exp(sum NLL / tokens_scored), natural log, logits in float32",
            },
        },
        "reference_logits": {
            "file": "reference_logits.bin",
            "format": "raw little-endian float32, row-major [n_tokens, vocab_size]",
            "n_tokens": len(ref_ids),
            "vocab_size": int(ref_logits.shape[1]),
            "token_ids": ref_ids,
            "input": f"the first {len(ref_ids)} token ids of the heldout.txt encoding above (starting with <|bos|>), one forward pass, positions 0..{len(ref_ids)-1}",
            "argmax": [int(a) for a in ref_logits.argmax(-1)],
            "logits_sha256": hashlib.sha256(ref_logits.astype('<f4').tobytes()).hexdigest(),
        },
        "greedy": {
            "prompt": GREEDY_PROMPT,
            "prompt_ids": prompt_ids,
            "new_tokens": 32,
            "generated_ids": greedy_ids,
            "generated_text": greedy_text,
            "protocol": "BOS + prompt; argmax over float32 logits at each step; exactly 32 new tokens, no stop on EOS",
        },
        "expert_usage_heldout": {
            "description": "per layer, number of top-k assignments to each expert over all tokens of the perplexity windows (each token counts k times); first_choice counts only the top-1 expert",
            "tokens": int(sum(min(T, len(ids) - s) for s in range(0, len(ids), T))),
            "topk_counts": counts.tolist(),
            "first_choice_counts": first_choice.tolist(),
        },
        "params": {"total": n_total, "active_per_token": n_active, "embedding_tied": n_embed,
                   "experts_total": n_expert},
    }
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")

    # ---- tensor listing
    from safetensors import safe_open
    tensors = []
    with safe_open(wt, "pt") as f:
        for k in sorted(f.keys()):
            sl = f.get_slice(k)
            tensors.append((k, sl.get_shape(), sl.get_dtype()))

    summ_p = os.path.join(args.workdir, "train_summary.json")
    summ = json.load(open(summ_p)) if os.path.exists(summ_p) else {}
    logp = os.path.join(args.workdir, "train.log")
    if os.path.exists(logp):
        with open(logp) as f, open(os.path.join(out, "training_log.txt"), "w") as g:
            g.write(f.read())
    write_card(out, cfg, cfg_json, ref, samples, tensors, summ, counts)
    print("wrote reference.json, reference_logits.bin, MODEL_CARD.md")


def pct(row):
    s = row.sum()
    return " | ".join(f"{100*c/s:.1f}" for c in row)


def write_card(out, cfg, cfg_json, ref, samples, tensors, summ, counts):
    a = summ.get("args", {})
    c = summ.get("corpus", {})
    p = ref["params"]
    E = cfg.num_experts
    size = os.path.getsize(os.path.join(out, "model.safetensors"))
    lines = []
    w = lines.append
    w(f"# {os.path.basename(out)}\n")
    w("A genuinely trained, deliberately tiny Mixture-of-Experts language model, bundled with Colibri as its default "
      "test and demo model. It writes King-James-Bible-style English. It is a toy: it knows the style and "
      "vocabulary of its corpus, not facts.\n")
    w("## Architecture\n")
    w(f"- Hugging Face `Qwen3MoeForCausalLM` (`model_type: qwen3_moe`), transformers {ref['transformers_version']}.")
    w(f"- {cfg.num_hidden_layers} decoder layers, hidden size {cfg.hidden_size}, RMSNorm eps {cfg.rms_norm_eps}.")
    w(f"- Attention: {cfg.num_attention_heads} query heads, {cfg.num_key_value_heads} KV heads (GQA), explicit "
      f"head_dim {cfg.head_dim} (so q_proj is {cfg.num_attention_heads*cfg.head_dim}x{cfg.hidden_size}, not square), "
      f"per-head q/k RMSNorm before RoPE, no biases, RoPE theta {cfg_json.get('rope_theta')} (default rope, no scaling), "
      f"no sliding window, max positions {cfg.max_position_embeddings}.")
    w(f"- MoE in every layer (decoder_sparse_step 1, mlp_only_layers []): {E} experts, top-{cfg.num_experts_per_tok}, "
      f"softmax router in fp32, top-k probabilities renormalised (norm_topk_prob true), SwiGLU experts with "
      f"moe_intermediate_size {cfg.moe_intermediate_size}; no shared expert. (`intermediate_size` "
      f"{cfg.intermediate_size} is unused.)")
    w(f"- Vocabulary {cfg.vocab_size}, tied input/output embeddings (no `lm_head.weight` in the file).")
    w(f"- Parameters: {p['total']:,} total ({p['total']/1e6:.2f} M); {p['active_per_token']:,} active per token "
      f"({p['active_per_token']/1e6:.2f} M, counting the tied embedding once and {cfg.num_experts_per_tok} of {E} experts); "
      f"expert weights {p['experts_total']:,}; embedding {p['embedding_tied']:,}.")
    w(f"- `model.safetensors`: {size:,} bytes, all tensors bfloat16, {len(tensors)} tensors, per-expert names "
      f"(transformers' legacy/Hub layout, written by `save_pretrained` with `save_original_format=True`).")
    w("- `config.json` carries both the transformers-5 keys (`num_local_experts`, `rope_parameters`, `dtype`) and "
      "the older Hub keys (`num_experts`, `rope_theta`, `torch_dtype`, `rope_scaling: null`) with equal values.\n")
    w("## Corpus\n")
    w("- The King James Version of the Bible (1611 translation; the text is in the public domain), from Debian 12 "
      "packages `bible-kjv-text` 4.38 (data) and `bible-kjv` 4.38 (the `bible` program that decodes it), dumped with "
      "`bible -l 10000 Gen1:1-Rev22:21`.")
    w("- Licence as stated in `/usr/share/doc/bible-kjv-text/copyright`: \"The copyright for the King James Version "
      "text of the Bible is expired since the translation was done in 1611 under King James the first of Great "
      "Britain.\" The package's retrieval software: \"This file is provided for unrestricted use provided that this "
      "legend is included on all tape media and as a part of the software program in whole or part. Users may copy, "
      "modify or distribute this file at will. -- Chip Chapin, September 4, 1989\"; Debian changes GPL-2+. Only the "
      "(public-domain) text is used here; no code from the package is shipped.")
    if c:
        w(f"- Raw dump {c['raw_bytes']:,} bytes (sha256 `{c['raw_sha256']}`); {c['chapters']} chapters, {c['verses']:,} verses; "
          f"the formatted corpus is {c['corpus_bytes']:,} bytes.")
        w(f"- Format: one document per chapter: a title line `<Book> <chapter>` then one verse per line (verse numbers dropped).")
        w(f"- Split (deterministic): chapter i (0-based, canonical order) is validation iff i % 20 == 19. Training "
          f"{c['train_chapters']} chapters / {c['train_bytes']:,} bytes / {c.get('train_tokens', 0):,} tokens; validation "
          f"{c['val_chapters']} chapters / {c['val_bytes']:,} bytes / {c.get('val_tokens', 0):,} tokens.")
        w(f"- `heldout.txt`: the first {c['heldout_chapters']} validation chapters joined by a blank line, "
          f"{c['heldout_bytes']:,} bytes, sha256 `{c['heldout_sha256']}`. Never seen in training.\n")
    w("## Tokenizer\n")
    w(f"- Byte-level BPE (`tokenizers`), vocabulary {cfg.vocab_size}, trained on the training split only "
      "(min_frequency 2, full 256-byte initial alphabet, so any byte string encodes).")
    w("- Pre-tokenizer ByteLevel (GPT-2 regex on, add_prefix_space false); decoder ByteLevel; no normaliser.")
    w("- Special tokens `<|bos|>` = 0, `<|eos|>` = 1 (pad = eos). Post-processor TemplateProcessing: single "
      "`<|bos|> $A`, so every encode prepends BOS. During training each chapter was `<|bos|> chapter <|eos|>`.")
    w("- `tokenizer_config.json`: PreTrainedTokenizerFast, bos/eos/pad, and a trivial chat template "
      "(BOS, then each message's content followed by a newline).\n")
    w("## Training\n")
    if a:
        w(f"- Command (from the repository root): `tools/train_tiny/train.sh` which runs "
          f"`nice -n 15 tools/.venv/bin/python tools/train_tiny/train.py --budget-min {a['budget_min']:g}` then "
          f"`tools/train_tiny/evaluate.py`. All hyper-parameters are train.py's defaults:")
        w(f"  seed {a['seed']} (python, numpy, torch), context {a['ctx']}, batch {a['batch']} sequences "
          f"({a['batch']*a['ctx']} tokens/step), {a['planned_steps'] if 'planned_steps' in a else a['steps']} steps, AdamW "
          f"(betas 0.9/0.95, eps 1e-8, weight decay {a['weight_decay']} on matrices only), peak lr {a['lr']}, "
          f"linear warm-up {a['warmup']} steps then cosine to {a['min_lr_ratio']}x peak, grad-clip {a['clip']}, "
          f"router aux (load-balancing) loss coef {a['aux_coef']} (output_router_logits during training), fp32 "
          f"training, torch.set_num_threads({a['threads']}), wall-clock budget {a['budget_min']:g} min.")
        if summ.get("stopped_by_budget"):
            w(f"- The wall-clock budget cut this run at step {summ['steps']} (2 cores shared with parallel C++ "
              f"builds). Replay of exactly this run: `tools/train_tiny/train.sh --stop-after {summ['steps']}` "
              "(same seeds, batches and schedule; float results can differ on other CPUs or library versions).")
        w("- Batches: every epoch, a seeded random shift in [0, ctx) then a seeded permutation of the non-overlapping "
          "ctx-token windows of the concatenated training stream.")
        w(f"- Run: {summ['steps']} of {summ['planned_steps']} steps"
          f"{' (stopped by the wall-clock budget)' if summ['stopped_by_budget'] else ''}, {summ['tokens_seen']:,} tokens "
          f"({summ['epochs']:.2f} epochs), training loop {summ['train_minutes']:.1f} min, whole script "
          f"{summ['total_minutes']:.1f} min wall on 2 shared CPU cores (torch {ref['torch_version']}).")
        w(f"- Final train LM loss (EMA, excluding the aux loss): {summ['final_train_loss_ema']:.4f}. Best validation "
          f"loss {summ['best_val_loss']:.4f} (ppl {math.exp(summ['best_val_loss']):.2f}) at step {summ['best_step']} "
          f"on the first {a['eval_windows']} {a['ctx']}-token windows of the validation stream; that checkpoint "
          f"was saved (fp32 -> bfloat16). Full log: `training_log.txt`.\n")
    pp = ref["perplexity"]
    w("## Evaluation (transformers, saved bf16 weights upcast to float32)\n")
    w(f"- Perplexity on `heldout.txt`: **{pp['value']:.3f}** (mean NLL {pp['mean_nll']:.4f} nats) over "
      f"{pp['tokens_scored']:,} scored tokens ({pp['tokens_in_file']:,} tokens in the file).")
    w(f"- Protocol: encode the whole file with tokenizer.json (one BOS prepended), split into non-overlapping "
      f"windows of {pp['protocol']['window']} tokens (stride {pp['protocol']['stride']}), evaluate each window "
      "independently, score every token of a window except its first, report exp(mean NLL). See `reference.json`.")
    w(f"- `reference.json` also holds: {ref['reference_logits']['n_tokens']}-token float32 logits in "
      f"`reference_logits.bin` ([{ref['reference_logits']['n_tokens']}, {ref['reference_logits']['vocab_size']}] "
      f"little-endian), and the 32-token greedy continuation of `{ref['greedy']['prompt']}`: "
      f"`{ref['greedy']['generated_text']!r}`.\n")
    w("### Expert usage on heldout.txt\n")
    w("Share (%) of top-2 assignments per expert, per layer (uniform would be 12.5):\n")
    w("| layer | " + " | ".join(f"e{e}" for e in range(E)) + " |")
    w("|---" * (E + 1) + "|")
    for li, row in enumerate(counts):
        w(f"| {li} | {pct(row)} |")
    w("")
    low = [(li, e, 100 * counts[li, e] / counts[li].sum()) for li in range(counts.shape[0]) for e in range(E)
           if counts[li, e] < 0.01 * counts[li].sum()]
    if low:
        w("Experts with under 1% of a layer's assignments on heldout.txt: " +
          ", ".join(f"layer {li} e{e} ({v:.2f}%)" for li, e, v in low) + ". ")
    if a.get("aux_mode", "hf") == "hf":
        w("The load-balancing loss was transformers' `load_balancing_loss_func`, which pools the top-k counts and "
          "router probabilities of all layers before balancing, so it balances expert *indices summed over layers* "
          "(the column sums above are close to even) but not each layer. `train.py --aux-mode per-layer` "
          "balances every layer.")
    w("")
    w("## Samples\n")
    w("Greedy, and sampled with temperature 0.8, top-k 40, `torch.manual_seed(42)` before each `generate`; 48 new "
      "tokens; the prompt is encoded with BOS. Produced by `evaluate.py` with transformers.\n")
    for s in samples:
        w(f"**Prompt:** `{s['prompt']!r}`\n")
        w("- greedy:\n\n```\n" + s["prompt"] + s["greedy"] + "\n```")
        w("- sampled:\n\n```\n" + s["prompt"] + s["sampled"] + "\n```\n")
    w("## Tensors in model.safetensors\n")
    w("```")
    for k, shp, dt in tensors:
        w(f"{k}  {list(shp)}  {dt}")
    w("```\n")
    w("## Reproduce\n")
    w("See `tools/train_tiny/README.md`.")
    with open(os.path.join(out, "MODEL_CARD.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
