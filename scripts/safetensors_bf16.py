#!/usr/bin/env python3
"""Rewrites a checkpoint directory's model.safetensors with every F32 tensor as BF16 (round to nearest even), the
other files copied: how scripts/train_default_model.sh turns `mnemo train --full`'s fp32 output into the shipped copy.

  scripts/safetensors_bf16.py SRC_DIR DST_DIR
"""
import json
import os
import shutil
import struct
import sys

import numpy as np


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    src, dst = sys.argv[1:]
    os.makedirs(dst, exist_ok=True)
    with open(os.path.join(src, "model.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out_header, chunks, off = {}, [], 0
    for name, t in header.items():
        if name == "__metadata__":
            out_header[name] = t
            continue
        a, b = t["data_offsets"]
        raw = data[a:b]
        dtype = t["dtype"]
        if dtype == "F32":
            u = np.frombuffer(raw, dtype="<u4").astype(np.uint64)
            raw = (((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")).tobytes()
            dtype = "BF16"
        out_header[name] = {"dtype": dtype, "shape": t["shape"], "data_offsets": [off, off + len(raw)]}
        chunks.append(raw)
        off += len(raw)
    hb = json.dumps(out_header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    with open(os.path.join(dst, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb)
        for c in chunks:
            f.write(c)
    for name in os.listdir(src):
        p = os.path.join(src, name)
        if os.path.isfile(p) and name.endswith((".json", ".model")) and name != "model.safetensors":
            shutil.copyfile(p, os.path.join(dst, name))


if __name__ == "__main__":
    main()
