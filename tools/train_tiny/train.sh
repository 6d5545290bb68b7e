#!/usr/bin/env bash
# Reproduce models/colibri-tiny-moe from scratch on CPU (about 40 minutes on 2 cores).
# Usage (from anywhere): tools/train_tiny/train.sh [extra train.py args, e.g. --budget-min 40]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
venv="$root/tools/.venv"
py="$venv/bin/python"

# 1. the corpus: Debian's King James Bible text and the program that decodes it
if ! command -v bible >/dev/null 2>&1 || [[ ! -e /usr/lib/bible.data ]]; then
  sudo=""; [[ $(id -u) -ne 0 ]] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends bible-kjv bible-kjv-text
fi

# 2. the Python environment (shared with tools/oracle)
if [[ ! -x "$py" ]]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q -r "$here/requirements.txt"
fi

# 3. train (low priority; stops cleanly at the wall-clock budget) and evaluate
cd "$root"
nice -n 15 "$py" "$here/train.py" "$@"
nice -n 15 "$py" "$here/evaluate.py"
