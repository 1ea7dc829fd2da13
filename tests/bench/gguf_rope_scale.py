#!/usr/bin/env python3
"""gguf_rope_scale.py — a copy of a llama GGUF file with linear RoPE scaling (position interpolation) written into
its metadata: llama.rope.scaling.type = "linear", llama.rope.scaling.factor = F, and llama.context_length times F.
Both mnemo and llama.cpp read these keys, so the copy runs a model trained on N positions over N * F positions
without training (Chen et al. 2023, "Extending Context Window of Large Language Models via Positional
Interpolation"). The tensors are copied byte for byte; only the metadata section grows.

usage: gguf_rope_scale.py IN.gguf OUT.gguf FACTOR
"""
import struct
import sys

# GGUF value types and their fixed sizes (strings and arrays are handled apart)
FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
T_STRING, T_ARRAY, T_U32, T_F32 = 8, 9, 4, 6


def skip_value(buf, off, t):
    if t in FIXED:
        return off + FIXED[t]
    if t == T_STRING:
        (n,) = struct.unpack_from("<Q", buf, off)
        return off + 8 + n
    if t == T_ARRAY:
        et, n = struct.unpack_from("<IQ", buf, off)
        off += 12
        if et in FIXED:
            return off + n * FIXED[et]
        for _ in range(n):
            off = skip_value(buf, off, et)
        return off
    raise SystemExit(f"unknown GGUF value type {t}")


def read_str(buf, off):
    (n,) = struct.unpack_from("<Q", buf, off)
    return buf[off + 8 : off + 8 + n].decode(), off + 8 + n


def enc_str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def main():
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    src, dst, factor = sys.argv[1], sys.argv[2], float(sys.argv[3])
    buf = open(src, "rb").read()
    magic, version, n_tensors, n_kv = struct.unpack_from("<4sIQQ", buf, 0)
    if magic != b"GGUF" or version < 2:
        raise SystemExit(f"{src}: not a GGUF v2/v3 file")
    off = 24
    kvs = []  # (key, raw bytes of the whole entry)
    alignment, ctx_len = 32, None
    for _ in range(n_kv):
        start = off
        key, off = read_str(buf, off)
        (t,) = struct.unpack_from("<I", buf, off)
        off += 4
        vstart = off
        off = skip_value(buf, off, t)
        if key == "general.alignment":
            (alignment,) = struct.unpack_from("<I", buf, vstart)
        if key == "llama.context_length":
            (ctx_len,) = struct.unpack_from("<I", buf, vstart)
        kvs.append((key, buf[start:off]))
    tinfo_start = off
    for _ in range(n_tensors):
        _, off = read_str(buf, off)
        (nd,) = struct.unpack_from("<I", buf, off)
        off += 4 + 8 * nd + 4 + 8
    tinfo = buf[tinfo_start:off]
    data_start = (off + alignment - 1) // alignment * alignment
    drop = {"llama.rope.scaling.type", "llama.rope.scaling.factor", "llama.rope.scale_linear", "llama.context_length"}
    out = [raw for key, raw in kvs if key not in drop]
    out.append(enc_str("llama.rope.scaling.type") + struct.pack("<I", T_STRING) + enc_str("linear"))
    out.append(enc_str("llama.rope.scaling.factor") + struct.pack("<If", T_F32, factor))
    if ctx_len is not None:
        out.append(enc_str("llama.context_length") + struct.pack("<II", T_U32, int(round(ctx_len * factor))))
    head = struct.pack("<4sIQQ", b"GGUF", version, n_tensors, len(out)) + b"".join(out) + tinfo
    pad = (-len(head)) % alignment
    with open(dst, "wb") as f:
        f.write(head + b"\0" * pad)
        f.write(buf[data_start:])
    print(f"{dst}: linear RoPE scaling x{factor:g}, context {ctx_len} -> {int(round((ctx_len or 0) * factor))}")


if __name__ == "__main__":
    main()
