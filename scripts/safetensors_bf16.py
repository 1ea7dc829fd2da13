#!/usr/bin/env python3
"""Rewrites a checkpoint directory's model.safetensors with every F32 tensor as BF16 (round to nearest even), the
config and tokenizer copied: how scripts/train_default_model.sh turns `mnemo train --full`'s fp32 output into the
shipped copy.

  scripts/safetensors_bf16.py SRC_DIR DST_DIR
"""
import sys

import numpy as np

from safetensors_dir import f32_bits_to_bf16, rewrite


def to_bf16(name, dtype, raw):
    if dtype != "F32":
        return dtype, raw
    return "BF16", f32_bits_to_bf16(np.frombuffer(raw, dtype="<u4"))


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    rewrite(sys.argv[1], sys.argv[2], to_bf16)


if __name__ == "__main__":
    main()
