#!/usr/bin/env bash
# Fetches the byte-level BPE test vectors test_bpe_tokenizer compares against: llama.cpp's own vocabulary files
# (models/ggml-vocab-{llama-bpe,deepseek-llm,gpt-2,starcoder}.gguf with their .inp/.out, MIT) from the source package
# of llama-cpp-python 0.3.36 on PyPI, which vendors llama.cpp. The package (76 MB) is kept in a cache ($MNEMO_CACHE,
# default ~/.cache/mnemo) so it is downloaded once per machine; the twelve files (15 MB) land in
# tests/fixtures/tokenizers/ (git-ignored), each checked against its sha256 below. Idempotent; scripts/install-deps.sh
# runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=tests/fixtures/tokenizers
CACHE=${MNEMO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mnemo}
SUMS="
  867f77537b54565f0d81d508c04edc41aa1d4ffc1a92745f225b4c1b02755f76  ggml-vocab-deepseek-llm.gguf
  be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0  ggml-vocab-deepseek-llm.gguf.inp
  87cfc1a8a9a7ef25d04d28c26a67b6a620af7be938c9bd0feeb4d319b9302832  ggml-vocab-deepseek-llm.gguf.out
  cedc56ca6e2e89f63e781696d1fd76b4b1d49e6720dee86463e915f6e90016ac  ggml-vocab-gpt-2.gguf
  be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0  ggml-vocab-gpt-2.gguf.inp
  48e8c4cb3ad5c37915b225f872222567c1c4dd4d66951aa53460c8d152ff6d60  ggml-vocab-gpt-2.gguf.out
  97272e430d53bc7688f52d5e0ad8ea8f163ede9f1bbd1694feaa504797d5d96e  ggml-vocab-llama-bpe.gguf
  be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0  ggml-vocab-llama-bpe.gguf.inp
  118abf2034a197fc5c9dec5204dfdeee7004c7c70952ae577f66b99e212fab9b  ggml-vocab-llama-bpe.gguf.out
  fedb892b4e1bd3c1f2fcdae356440b14fb458f4264d586e5c987ed93df4e174d  ggml-vocab-starcoder.gguf
  be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0  ggml-vocab-starcoder.gguf.inp
  3ef12183c57ad076f9defd8e5eb454f509f5f0865cad35646abb4c4b2d2c5764  ggml-vocab-starcoder.gguf.out
"
if (cd "$DEST" && echo "$SUMS" | sha256sum -c --quiet - >/dev/null 2>&1); then
  echo "fetch-test-vocabs: $DEST/ggml-vocab-* present"
  exit 0
fi
mkdir -p "$CACHE"
SDIST=$CACHE/llama_cpp_python-0.3.36.tar.gz
if ! [ -f "$SDIST" ]; then
  # pip from a private venv: Debian's python3 has no pip of its own (python3-venv brings one into the venv)
  [ -x "$CACHE/pip-venv/bin/pip" ] || python3 -m venv "$CACHE/pip-venv"
  "$CACHE/pip-venv/bin/pip" download --quiet --no-deps --no-binary :all: --dest "$CACHE" llama-cpp-python==0.3.36
fi
names=$(echo "$SUMS" | awk 'NF { print "llama_cpp_python-0.3.36/vendor/llama.cpp/models/" $2 }')
# shellcheck disable=SC2086
tar -xzf "$SDIST" -C "$DEST" --strip-components=4 $names
if ! (cd "$DEST" && echo "$SUMS" | sha256sum -c --quiet -); then
  echo "fetch-test-vocabs: the files from llama-cpp-python 0.3.36 do not have the expected sha256" >&2
  exit 1
fi
echo "fetch-test-vocabs: $DEST/ggml-vocab-* (sha256 checked)"
