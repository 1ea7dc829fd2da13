#!/usr/bin/env bash
# Creates the Python environment the server tests use: pytest and the official openai client, from PyPI.
# Usage: make_venv.sh PYTHON VENV_DIR. Idempotent: an existing venv that imports both is kept.
set -euo pipefail
py=$1 venv=$2
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import pytest, openai" 2>/dev/null; then
  echo "make_venv: $venv ready"
  exit 0
fi
rm -rf "$venv"
"$py" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "pytest>=7" "openai>=1.0"
"$venv/bin/python" -c "import pytest, openai; print('make_venv: pytest', pytest.__version__, 'openai', openai.__version__)"
