#!/usr/bin/env bash
# Create the Python environment for tools/oracle/make_fixtures.py (developer-only; CI never
# runs Python).  Idempotent: an existing venv that already has the pinned versions is left
# alone and nothing is downloaded.  Packages come from PyPI (the default index).
#
#   tools/oracle/setup_venv.sh            # creates tools/.venv
#   VENV=/some/dir PYTHON=python3.11 tools/oracle/setup_venv.sh
#
# The pins are the exact versions the committed fixtures were generated with
# (tests/fixtures/oracle/*/oracle.json "versions").  torch from PyPI is the CUDA build;
# the generator runs on the CPU only.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${VENV:-$here/../.venv}"
python="${PYTHON:-python3}"

pins=(
  "torch==2.15.0"
  "transformers==5.24.0"
  "tokenizers==0.23.3"
  "safetensors==0.8.0"
  "numpy==2.4.6"
  "Jinja2==3.1.6"
)

pins_satisfied() {
  "$venv/bin/python" - "${pins[@]}" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version, PackageNotFoundError
for pin in sys.argv[1:]:
    name, want = pin.split("==")
    try:
        have = version(name)
    except PackageNotFoundError:
        sys.exit(1)
    if have.split("+")[0] != want:
        sys.exit(1)
PY
}

if [ ! -x "$venv/bin/python" ]; then
  echo "creating venv $venv with $("$python" --version 2>&1)"
  "$python" -m venv "$venv"
fi

if pins_satisfied; then
  echo "venv $venv already has: ${pins[*]}"
  exit 0
fi

"$venv/bin/python" -m pip install --disable-pip-version-check "${pins[@]}"
pins_satisfied || { echo "error: pinned versions not satisfied after install" >&2; exit 1; }
echo "done: $venv"
