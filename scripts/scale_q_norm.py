#!/usr/bin/env python3
"""Multiplies the q_norm weights of the given layers of a qk_norm checkpoint by FACTOR, the other tensors, the
config and the tokenizer copied: a softmax temperature for those layers' attention (their scores are cosines weighted
by q_norm x k_norm), chosen after training on held-out data. tests/bench/proof_dict_lookup.sh uses it on the memory layers of the dictionary-lookup
model (see tests/bench/RESULTS.md, "memory temperature"). F32 and BF16 tensors (BF16 rounded to nearest even;
a power of two is exact in both).

  scripts/scale_q_norm.py SRC_DIR DST_DIR FACTOR LAYER[,LAYER...]
"""
import json
import os
import shutil
import struct
import sys

import numpy as np


def scaled(raw, dtype, factor):
    if dtype == "F32":
        return (np.frombuffer(raw, dtype="<f4") * np.float32(factor)).astype("<f4").tobytes()
    if dtype == "BF16":
        f = (np.frombuffer(raw, dtype="<u2").astype("<u4") << 16).view("<f4") * np.float32(factor)
        u = f.astype("<f4").view("<u4").astype(np.uint64)
        return (((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")).tobytes()
    raise SystemExit(f"q_norm stored as {dtype}: only F32 and BF16 are handled")


def main():
    if len(sys.argv) != 5:
        raise SystemExit(__doc__)
    src, dst, factor, layers = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4].split(",")
    names = {f"model.layers.{int(l)}.self_attn.q_norm.weight" for l in layers}
    with open(os.path.join(src, "model.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    missing = names - header.keys()
    if missing:
        raise SystemExit(f"{src}: no tensor {sorted(missing)[0]} (a qk_norm model with those layers?)")
    os.makedirs(dst, exist_ok=True)
    out_header, chunks, off = {}, [], 0
    for name, t in header.items():
        if name == "__metadata__":
            out_header[name] = t
            continue
        a, b = t["data_offsets"]
        raw = scaled(data[a:b], t["dtype"], factor) if name in names else data[a:b]
        out_header[name] = {"dtype": t["dtype"], "shape": t["shape"], "data_offsets": [off, off + len(raw)]}
        chunks.append(raw)
        off += len(raw)
    hb = json.dumps(out_header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    with open(os.path.join(dst, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb)
        for c in chunks:
            f.write(c)
    for entry in os.listdir(src):  # config and tokenizer (not a training state: this is a new model)
        p = os.path.join(src, entry)
        if entry.endswith((".json", ".model")) and os.path.isfile(p) and os.path.abspath(src) != os.path.abspath(dst):
            shutil.copyfile(p, os.path.join(dst, entry))


if __name__ == "__main__":
    main()
