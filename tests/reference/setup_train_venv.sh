#!/usr/bin/env bash
# Create the Python venv that runs tests/reference/make_train_fixtures.py,
# tests/reference/check_mnemo_adapter.py and the torch side of tests/bench/bench_train.py
# (torch + transformers + peft + safetensors + numpy, from PyPI only). Never needed by CI: the
# fixtures it produces are committed.
#
#   bash tests/reference/setup_train_venv.sh [DIR]      # DIR defaults to build/train-venv
#
# Why --no-deps: PyPI's Linux torch wheel (2.15.0, the only Linux x86_64 build on PyPI) is the
# CUDA build and declares the CUDA stack as hard requirements. A CPU-only install from PyPI alone
# is not possible: libtorch.so links libtorch_cuda.so, which has DT_NEEDED entries for cudart,
# cublas/cublasLt, cusparse, cusparseLt, cufft, cufile, nccl, cudnn, nvrtc and (through
# libtorch_nvshmem.so) nvshmem, so `import torch` fails with e.g. "libcufile.so.0: cannot open
# shared object file" when the nvidia-* wheels are missing (checked). What *can* be dropped is
# what no library links: triton (~1 GB, only torch.compile), the cuda-toolkit meta-package,
# cuda-bindings/cuda-pathfinder and the cccl headers. A plain `pip install torch` after a
# --no-deps one re-resolves torch's requirements and pulls them all back, so the whole closure is
# pinned in train-requirements.txt and installed in one `pip install --no-deps -r`. Result: 4.6 GB
# venv instead of 5.6 GB, ~1 min 15 s here. `pip check` reports torch's missing requirements
# (triton, cuda-toolkit, cuda-bindings): expected. torch.cuda.is_available() is False on a machine
# without a GPU; everything here runs on the CPU anyway. The script ends with a smoke test (CPU
# forward + backward + AdamW step) and fails if it does not pass.
set -euo pipefail

DIR="${1:-build/train-venv}"
PY="${PYTHON:-python3}"

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

"$PY" -m venv "$DIR"
VPY="$DIR/bin/python"
# Pins (torch 2.15.0, transformers 5.23.0, peft 0.21.2, safetensors 0.8.0, numpy 2.4.6, sentencepiece 0.2.3 and
# their dependencies) live in train-requirements.txt.
"$VPY" -m pip install --quiet --no-deps -r "$HERE/train-requirements.txt"

"$VPY" - <<'EOF'
import torch, transformers, peft, safetensors, numpy
torch.manual_seed(0)
lin = torch.nn.Linear(8, 4)
opt = torch.optim.AdamW(lin.parameters(), lr=1e-3)
loss = lin(torch.randn(3, 8)).square().mean()
loss.backward()
opt.step()
assert lin.weight.grad is not None and torch.isfinite(lin.weight).all()
print("train venv ok: torch %s (cuda available: %s), transformers %s, peft %s, "
      "safetensors %s, numpy %s" % (torch.__version__, torch.cuda.is_available(),
                                    transformers.__version__, peft.__version__,
                                    safetensors.__version__, numpy.__version__))
EOF
