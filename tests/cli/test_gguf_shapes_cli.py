#!/usr/bin/env python3
"""`mnemo generate --model FILE` on GGUF files whose tensor shapes lie: must exit non-zero at once with one clear
message, not spin (stdlib only; run by ctest).

A 2-D tensor with ne[0] = 0 holds 0 bytes whatever ne[1] claims, so a huge ne[1] passed the size checks and the
loader then walked ~1e13-1e17 empty rows (the q5_0 -> q8_0 conversion, the Q/K row reorder). The files here are
the gguf-py fixture (a model that loads) with one tensor's dims, and type, rewritten.

usage: test_gguf_shapes_cli.py MNEMO_BIN FIXTURES_DIR
"""
import os
import struct
import subprocess
import sys
import tempfile
import time

from cli_harness import check, finish

BIN, FIX = sys.argv[1], sys.argv[2]
GGML_Q5_0 = 6


def tensor_infos(b):
    """{name: byte offset of its ne[] array} of a GGUF image."""
    _, _, n_tensors, n_kv = struct.unpack_from("<4sIQQ", b, 0)
    scalar = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def string(p):
        n, = struct.unpack_from("<Q", b, p)
        return b[p + 8:p + 8 + n].decode(), p + 8 + n

    def skip(p, t):
        if t == 8:
            return string(p)[1]
        if t == 9:
            at, n = struct.unpack_from("<IQ", b, p)
            p += 12
            for _ in range(n):
                p = skip(p, at)
            return p
        return p + scalar[t]

    p, out = 24, {}
    for _ in range(n_kv):
        _, p = string(p)
        t, = struct.unpack_from("<I", b, p)
        p = skip(p + 4, t)
    for _ in range(n_tensors):
        name, p = string(p)
        nd, = struct.unpack_from("<I", b, p)
        out[name] = (p + 4, nd)
        p += 4 + 8 * nd + 4 + 8
    return out


src = open(os.path.join(FIX, "gguf", "gqa_q8_0.gguf"), "rb").read()
infos = tensor_infos(src)
cases = [  # tensor, new type (None: keep), ne — each spun the loader before shapes were checked
    ("blk.0.attn_q.weight", None, (0, 1 << 57)),         # Q/K row reorder: 1.4e17 empty rows
    ("blk.0.ffn_down.weight", GGML_Q5_0, (0, 1 << 45)),  # a q5_0 matrix: 3.5e13 empty rows walked before
    ("blk.1.attn_k.weight", None, (1 << 40, 0)),         # the other dim empty
]
with tempfile.TemporaryDirectory() as tmp:
    for name, ty, ne in cases:
        b = bytearray(src)
        at, nd = infos[name]
        check(nd == 2, f"{name} is 2-D in the fixture")
        struct.pack_into("<QQ", b, at, *ne)
        if ty is not None:
            struct.pack_into("<I", b, at + 16, ty)
        path = os.path.join(tmp, name + ".gguf")
        open(path, "wb").write(bytes(b))
        t0 = time.monotonic()
        try:
            p = subprocess.run([BIN, "generate", "--model", path, "--prompt", "hi", "-n", "1"], capture_output=True,
                               timeout=60)
            rc, err = p.returncode, p.stderr.decode("utf-8", "replace")
        except subprocess.TimeoutExpired:
            rc, err = None, "still running after 60 s"
        secs = time.monotonic() - t0
        check(rc not in (None, 0), f"{name} {ne}: exit {rc}: {err}")
        check("zero dimension" in err and name in err, f"{name} {ne}: message names the tensor and the problem: {err}")
        check(secs < 10, f"{name} {ne}: refused in {secs:.1f} s")

finish()
