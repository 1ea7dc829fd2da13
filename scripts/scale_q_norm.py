#!/usr/bin/env python3
"""Multiplies the q_norm weights of the given layers of a qk_norm checkpoint by FACTOR, the other tensors, the
config and the tokenizer copied: a softmax temperature for those layers' attention (their scores are cosines
weighted by q_norm x k_norm), chosen after training on held-out data. tests/bench/proof_dict_lookup.sh uses it on the
memory layers of the dictionary-lookup model (see tests/bench/RESULTS.md, "memory temperature"). F32 and BF16
tensors (BF16 rounded to nearest even; a power of two is exact in both).

  scripts/scale_q_norm.py SRC_DIR DST_DIR FACTOR LAYER[,LAYER...]
"""
import math
import sys

import numpy as np

from safetensors_dir import f32_bits_to_bf16, rewrite, tensor_names


def main():
    if len(sys.argv) != 5:
        raise SystemExit(__doc__)
    src, dst = sys.argv[1], sys.argv[2]
    try:
        factor = float(sys.argv[3])
        names = {f"model.layers.{int(l)}.self_attn.q_norm.weight" for l in sys.argv[4].split(",")}
    except ValueError:
        raise SystemExit(f"scale_q_norm: FACTOR must be a number and LAYERS integers, got '{sys.argv[3]}' "
                         f"'{sys.argv[4]}'\n{__doc__}")
    if not (math.isfinite(factor) and factor > 0):
        raise SystemExit(f"scale_q_norm: FACTOR must be finite and positive, got {sys.argv[3]}")
    missing = names - tensor_names(src)
    if missing:
        raise SystemExit(f"{src}: no tensor {sorted(missing)[0]} (a qk_norm model with those layers?)")

    def scale(name, dtype, raw):
        if name not in names:
            return dtype, raw
        if dtype == "F32":
            return dtype, (np.frombuffer(raw, dtype="<f4") * np.float32(factor)).astype("<f4").tobytes()
        if dtype == "BF16":
            f = (np.frombuffer(raw, dtype="<u2").astype("<u4") << 16).view("<f4") * np.float32(factor)
            return dtype, f32_bits_to_bf16(f.astype("<f4").view("<u4"))
        raise SystemExit(f"{name} stored as {dtype}: only F32 and BF16 are handled")

    rewrite(src, dst, scale)


if __name__ == "__main__":
    main()
