#!/usr/bin/env python3
"""A B B A: alternate two benchmark commands in short runs and report the ratio of each pair.

On these shared VMs bandwidth and clock swing over seconds to minutes; a ratio of two runs
made seconds apart, repeated and reduced to its median, is what docs/performance.md records.
Each command prints markdown table rows (`colibri bench`, `llama-bench`); the first
"<value> ± <sd>" cell of each pp/tg row is its tokens/s. Standard library only; developer tool,
never needed by CI.

  scripts/ab_ratio.py ROUNDS "q4|build/cli/colibri bench -m q4.colibri -p 0 -n 64 -r 2 -t 2" \
                             "q8|build/cli/colibri bench -m q8.colibri -p 0 -n 64 -r 2 -t 2"
"""
import subprocess, sys, re, statistics
rounds = int(sys.argv[1]); specs = [s.split("|", 1) for s in sys.argv[2:]]
def run(cmd):
    out = subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout
    vals = []
    for line in out.splitlines():
        if not line.startswith("|") or ("pp" not in line and "tg" not in line): continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        for c in cells:
            m = re.match(r"^([0-9.]+) ± ", c)
            if m: vals.append(float(m.group(1))); break
    return vals
res = {lab: [] for lab, _ in specs}
for r in range(rounds):
    order = specs if r % 2 == 0 else specs[::-1]
    for lab, cmd in order: res[lab].append(run(cmd))
a, b = specs[0][0], specs[1][0]
n = len(res[a][0])
for k in range(n):
    ratios = [res[a][i][k] / res[b][i][k] for i in range(rounds)]
    print(f"test {k}: {a} {[round(x[k],1) for x in res[a]]}  {b} {[round(x[k],1) for x in res[b]]}  ratio {a}/{b} per round {[round(x,3) for x in ratios]} median {statistics.median(ratios):.3f}")
