#!/usr/bin/env python3
"""Top-1 agreement of quantised images against a reference image on a text file or random tokens.

Encodes FILE with the reference image's tokenizer (`colibri tokenize`, special tokens added as
`colibri perplexity` does), or draws --random-tokens ids uniformly from the model's vocabulary
(seeded: the held-out random models of tests/fixtures have no text they were trained on), cuts
them into windows of --window tokens (each from an empty cache, the perplexity protocol of
docs/cli.md), runs `colibri logits --all-positions` on every window with every image, and reports
for each other image the share of positions whose arg-max token equals the reference's, and the
largest |logit difference|. Standard library only (the .npy files are read directly:
little-endian float32, C order).

  scripts/top1_agreement.py --colibri build/cli/colibri -f heldout.txt REF.colibri A.colibri ...
  scripts/top1_agreement.py --colibri build/cli/colibri --random-tokens 1024 --window 128 F32.colibri Q4.colibri
"""
import argparse
import ast
import os
import random
import struct
import subprocess
import sys
import tempfile


def read_npy(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:6] != b"\x93NUMPY":
        raise SystemExit(f"{path}: not a .npy file")
    header_len = struct.unpack("<H", data[8:10])[0]
    header = ast.literal_eval(data[10:10 + header_len].decode("latin1"))
    if header["descr"] != "<f4" or header["fortran_order"]:
        raise SystemExit(f"{path}: expected little-endian float32 in C order")
    rows, cols = header["shape"]
    values = struct.unpack(f"<{rows * cols}f", data[10 + header_len:])
    return [values[r * cols:(r + 1) * cols] for r in range(rows)]


def argmax(row):
    best = 0
    for i, v in enumerate(row):
        if v > row[best]:
            best = i
    return best


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--colibri", required=True, help="the colibri CLI binary")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("-f", "--file", help="text to evaluate")
    source.add_argument("--random-tokens", type=int, help="this many token ids drawn uniformly from the vocabulary")
    p.add_argument("--seed", type=int, default=1, help="seed of --random-tokens")
    p.add_argument("--window", type=int, default=256)
    p.add_argument("--windows", type=int, default=0, help="evaluate only the first N windows (0: all)")
    p.add_argument("images", nargs="+", help="the reference image first, then the images to compare")
    a = p.parse_args()
    if a.file:
        out = subprocess.run([a.colibri, "tokenize", "-m", a.images[0], "-f", a.file, "--special"],
                             check=True, capture_output=True, text=True).stdout
        ids = [int(t) for t in out.replace(",", " ").split()]
    else:
        with tempfile.TemporaryDirectory() as tmp:  # the vocabulary size: the width of one logits row
            path = os.path.join(tmp, "logits.npy")
            subprocess.run([a.colibri, "logits", "-m", a.images[0], "--tokens", "0", "-o", path],
                           check=True, capture_output=True)
            vocab = len(read_npy(path)[0])
        rng = random.Random(a.seed)
        ids = [rng.randrange(vocab) for _ in range(a.random_tokens)]
    windows = [ids[s:s + a.window] for s in range(0, len(ids), a.window)]
    windows = [w for w in windows if len(w) > 1]
    if a.windows:
        windows = windows[:a.windows]
    agree = {img: 0 for img in a.images[1:]}
    worst = {img: 0.0 for img in a.images[1:]}
    positions = 0
    with tempfile.TemporaryDirectory() as tmp:
        for w in windows:
            tokens = ",".join(str(t) for t in w)
            logits = {}
            for img in a.images:
                path = os.path.join(tmp, "logits.npy")
                subprocess.run([a.colibri, "logits", "-m", img, "--tokens", tokens, "--all-positions", "-o", path],
                               check=True, capture_output=True)
                logits[img] = read_npy(path)
            ref = logits[a.images[0]]
            ref_top = [argmax(r) for r in ref]
            positions += len(ref)
            for img in a.images[1:]:
                for r, row in enumerate(logits[img]):
                    agree[img] += argmax(row) == ref_top[r]
                    worst[img] = max(worst[img], max(abs(x - y) for x, y in zip(row, ref[r])))
    source = a.file if a.file else f"{a.random_tokens} random tokens (seed {a.seed})"
    print(f"reference {a.images[0]}: {source}, {len(windows)} windows of {a.window}, {positions} positions")
    for img in a.images[1:]:
        print(f"{img}: top-1 agreement {agree[img] / positions:.4f} ({agree[img]}/{positions}), "
              f"max |logit diff| {worst[img]:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
