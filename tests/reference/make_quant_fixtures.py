"""Writes tests/fixtures/quant/blocks.bin: GGML quant blocks and what gguf-py (pip package `gguf`, the numpy port of
ggml-quants.c that llama.cpp's own Python tooling uses) makes of them, so mnemo's block layouts, dequantization and
reference quantizers are checked bit for bit against code mnemo did not write.

    python3 -m venv /tmp/ggufvenv && /tmp/ggufvenv/bin/pip install gguf numpy
    /tmp/ggufvenv/bin/python tests/reference/make_quant_fixtures.py

For every type (q4_0, q4_1, q5_0, q5_1, q8_0, q2_K, q3_K, q4_K, q5_K, q6_K):
- a "dequant" entry: random block bytes (every bit of quants, scales and masks random; the f16 scale fields set to
  finite values of either sign) and gguf.quants.dequantize's float32 values;
- for the types gguf-py can quantize (q4_0, q4_1, q5_0, q5_1, q8_0), a "quantize" entry: float32 input (random
  blocks, an all-zero block, a constant block) and gguf.quants.quantize's bytes, which mnemo's quantizer must equal.
Format (little-endian): "MQFX", u32 entry count; per entry: name (8 bytes, NUL-padded), u32 kind (0 dequant,
1 quantize), u32 element count, u32 byte count, the bytes, then element count float32s. Deterministic.
"""
import os
import struct
from importlib.metadata import version

import numpy as np

import gguf
from gguf.quants import dequantize, quantize

T = gguf.GGMLQuantizationType
# type, name, f16 scale fields' byte offsets in a block (d first)
TYPES = [(T.Q4_0, "q4_0", [0]), (T.Q4_1, "q4_1", [0, 2]), (T.Q5_0, "q5_0", [0]), (T.Q5_1, "q5_1", [0, 2]),
         (T.Q8_0, "q8_0", [0]), (T.Q2_K, "q2_K", [80, 82]), (T.Q3_K, "q3_K", [108]), (T.Q4_K, "q4_K", [0, 2]),
         (T.Q5_K, "q5_K", [0, 2]), (T.Q6_K, "q6_K", [208])]
QUANTIZABLE = {T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0}
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "quant", "blocks.bin")


def entry(name, kind, data, values):
    data = np.ascontiguousarray(data, dtype=np.uint8).tobytes()
    values = np.ascontiguousarray(values, dtype="<f4")
    return (name.encode().ljust(8, b"\0") + struct.pack("<III", kind, values.size, len(data)) + data +
            values.tobytes())


def main():
    rng = np.random.default_rng(20260)
    entries = []
    for qt, name, f16s in TYPES:
        elems, nbytes = gguf.GGML_QUANT_SIZES[qt]
        nb = 4 if elems == 32 else 2
        blocks = rng.integers(0, 256, size=(nb, nbytes), dtype=np.uint8)
        for b in range(nb):
            for o in f16s:
                v = np.float16(rng.uniform(0.001, 0.05) * rng.choice([-1.0, 1.0]))
                blocks[b, o:o + 2] = np.frombuffer(v.tobytes(), dtype=np.uint8)
        flat = blocks.reshape(-1)
        entries.append(entry(name, 0, flat, dequantize(flat, qt)))
        if qt in QUANTIZABLE:
            x = (rng.standard_normal((6, 32)) * rng.uniform(0.1, 3.0, size=(6, 1)) +
                 rng.uniform(-1, 1, size=(6, 1))).astype(np.float32)
            x[4] = 0.0                            # all zero: scale 0
            x[5] = np.float32(0.75)               # constant: q4_1 / q5_1 range 0
            x[3, 7] = -np.abs(x[3]).max() * 1.5   # the largest magnitude negative (the sign trick's other side)
            entries.append(entry(name, 1, quantize(x.reshape(-1), qt), x.reshape(-1)))
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "wb") as f:
        f.write(b"MQFX" + struct.pack("<I", len(entries)) + b"".join(entries))
    print("wrote %s: %d entries, %d bytes (gguf %s)" % (OUT, len(entries), os.path.getsize(OUT),
                                                          version("gguf")))


if __name__ == "__main__":
    main()
