#!/usr/bin/env bash
# Creates the Python environment the server tests use: pytest, the official openai client and selenium (the web
# page's browser tests drive Debian's chromium with it), from PyPI.
# Usage: make_venv.sh PYTHON VENV_DIR. Idempotent: an existing venv that imports all three is kept; one that lacks
# only selenium gets it added, so tests running from that venv meanwhile keep their packages.
set -euo pipefail
py=$1 venv=$2
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import pytest, openai, selenium" 2>/dev/null; then
  echo "make_venv: $venv ready"
  exit 0
fi
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import pytest, openai" 2>/dev/null; then
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "selenium>=4.10"
  "$venv/bin/python" -c "import selenium; print('make_venv: added selenium', selenium.__version__)"
  exit 0
fi
rm -rf "$venv"
"$py" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "pytest>=7" "openai>=1.0" "selenium>=4.10"
"$venv/bin/python" -c "import pytest, openai, selenium; print('make_venv: pytest', pytest.__version__, 'openai', openai.__version__, 'selenium', selenium.__version__)"
