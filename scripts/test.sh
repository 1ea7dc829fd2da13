#!/usr/bin/env bash
# Builds mnemo and runs every test (unit, whole-model reference, fuzz-corpus regression, example build, and the
# server end to end: a ctest fixture creates build/server-venv with pytest + openai from PyPI).
# This is the README's test command and what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
ctest --test-dir build --output-on-failure -j"$(nproc)"
