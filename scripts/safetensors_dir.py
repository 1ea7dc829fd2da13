"""Rewriting a checkpoint directory's model.safetensors tensor by tensor, shared by scripts/safetensors_bf16.py and
scripts/scale_q_norm.py: read the header and data, let a function map each tensor's (name, dtype, bytes), write the
result with fresh offsets (header padded to 8 bytes), and copy the config and tokenizer (*.json, *.model; not a
training state) beside it.
"""
import json
import os
import shutil
import struct

import numpy as np


def f32_bits_to_bf16(u32):
    """bf16 bytes of fp32 values given as their uint32 bit patterns, rounded to nearest even."""
    u = u32.astype(np.uint64)
    return (((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")).tobytes()


def tensor_names(src):
    """The tensor names of SRC/model.safetensors."""
    with open(os.path.join(src, "model.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return set(json.loads(f.read(n))) - {"__metadata__"}


def rewrite(src, dst, transform):
    """DST/model.safetensors = SRC's with transform(name, dtype, raw) -> (dtype, raw) applied to every tensor."""
    with open(os.path.join(src, "model.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    os.makedirs(dst, exist_ok=True)
    out_header, chunks, off = {}, [], 0
    for name, t in header.items():
        if name == "__metadata__":
            out_header[name] = t
            continue
        a, b = t["data_offsets"]
        dtype, raw = transform(name, t["dtype"], data[a:b])
        out_header[name] = {"dtype": dtype, "shape": t["shape"], "data_offsets": [off, off + len(raw)]}
        chunks.append(raw)
        off += len(raw)
    hb = json.dumps(out_header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    with open(os.path.join(dst, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb)
        for c in chunks:
            f.write(c)
    if os.path.abspath(src) == os.path.abspath(dst):
        return
    for entry in os.listdir(src):
        p = os.path.join(src, entry)
        if os.path.isfile(p) and entry.endswith((".json", ".model")):
            shutil.copyfile(p, os.path.join(dst, entry))
