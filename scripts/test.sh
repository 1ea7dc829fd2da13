#!/usr/bin/env bash
# Builds mnemo and runs every test (unit, whole-model reference, fuzz-corpus regression, example build, and the
# server end to end: a ctest fixture creates build/server-venv with pytest + openai from PyPI).
# Then the CUDA backend's own source is built a second time on the CPU emulator (tests/cuda/emu) and test_ops,
# the whole-model fixtures, device training (test_train_device, test_s2_attn) and IVF-grow searched on the device
# (test_mem_device_ivf) run it against the CPU: CUDA kernels are tested on machines without a GPU (a few minutes;
# MNEMO_SKIP_EMU=1 skips it). On a GPU machine the first build already runs them on the device.
# This is the README's test command and what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
ctest --test-dir build --output-on-failure -j"$(nproc)"
if [ "${MNEMO_SKIP_EMU:-0}" != 1 ]; then
  cmake -S . -B build-emu -DCMAKE_BUILD_TYPE=Release -DMNEMO_CUDA_EMU=ON
  cmake --build build-emu -j"$(nproc)" --target test_ops test_reference_models test_train_device test_s2_attn \
    test_mem_device_ivf
  MNEMO_TEST_DEVICE=cuda ctest --test-dir build-emu --output-on-failure -j"$(nproc)" \
    -R '^(test_ops|test_reference_models|test_train_device|test_s2_attn|test_mem_device_ivf)$'
  build-emu/tests/test_ops --quiet --set cuda.attn=tc attention  # the opt-in tensor-core prefill kernel
  build-emu/tests/test_ops --quiet --set cuda.attn=mma attention # the opt-in bf16 mma.sync prefill kernel
fi
