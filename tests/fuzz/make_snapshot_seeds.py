#!/usr/bin/env python3
"""Writes the fuzz_context_snapshot seeds (tests/fuzz/corpus/fuzz_context_snapshot): real snapshots of the
LongLLaMA fixture cut down to a few KB each. The CLI saves a session of a long prompt (memory of several windows);
this keeps 0-2 local rows and 0-2 memory rows with every count made consistent again, so each seed loads, and
writes only the sections (the harness adds the container's header, end marker and checksum).

usage: tests/fuzz/make_snapshot_seeds.py BUILD_DIR   (run from the repository root; needs BUILD_DIR/mnemo)
"""
import os
import struct
import subprocess
import sys
import tempfile

MODEL = "tests/fixtures/longllama/basic"
OUT = "tests/fuzz/corpus/fuzz_context_snapshot"
STORE_HEADER = 48  # memstore.c store_header: 10 u32 (version, n_heads, head_dim, dtype, ...), u64 rows


def sections(data):
    """[(tag, bytes)] of a snapshot container, header and trailer dropped."""
    out, off = [], 24
    while True:
        tag, length = data[off:off + 4], struct.unpack_from("<Q", data, off + 8)[0]
        if tag == b"END!":
            return out
        out.append((tag, data[off + 16:off + 16 + length]))
        off += 16 + length + (-length % 8)


def pack(secs):
    return b"".join(tag + b"\0" * 4 + struct.pack("<Q", len(d)) + d + b"\0" * (-len(d) % 8) for tag, d in secs)


def rows_per_layer(data, n_layers, old, new, width):
    """The first `new` of `old` rows (width bytes each) of every layer."""
    return b"".join(data[(l * old) * width:(l * old + new) * width] for l in range(n_layers))


def cut(secs, local, memory, logits):
    head = dict(secs)[b"CTXH"]
    fmt, kind, n_layer, kv_dim, n_rows, n_past, last = struct.unpack_from("<IIiiiii", head)
    n_past_new = local + memory
    last_new = last if n_past_new else -1
    head = struct.pack("<IIiiiii", fmt, kind, n_layer, kv_dim, local, n_past_new, last_new) + head[28:]
    out = []
    for tag, d in secs:
        if tag == b"CTXH":
            d = head
        elif tag in (b"KVK_", b"KVV_"):
            d = rows_per_layer(d, n_layer, n_rows, local, kv_dim * 4)
        elif tag == b"RAWK":
            d = rows_per_layer(d, len(d) // (n_rows * kv_dim * 4), n_rows, local, kv_dim * 4)
        elif tag[0:1] == b"M" and tag[3:4] == b"\x7f":
            _, n_heads, head_dim, dtype = struct.unpack_from("<IIII", d)
            rows = struct.unpack_from("<Q", d, 40)[0]
            width = head_dim * (4 if dtype == 0 else 2)
            d = d[:40] + struct.pack("<Q", memory) + rows_per_layer(d[STORE_HEADER:], 2 * n_heads, rows, memory, width)
        elif tag == b"LGTS" and not (logits and n_past_new):
            continue
        out.append((tag, d))
    return out


def with_nan_key(secs):
    """A NaN in the first cached key: the value check's refusal path."""
    return [(t, struct.pack("<f", float("nan")) + d[4:] if t == b"KVK_" else d) for t, d in secs]


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    with tempfile.TemporaryDirectory() as tmp:
        snap = os.path.join(tmp, "long.snap")
        prompt = "the cat sat on the mat and the dog lay by the door " * 14  # ~150 tokens: two windows in memory
        subprocess.run([os.path.join(build, "mnemo"), "generate", "--model", MODEL, "--prompt", prompt, "-n", "0",
                        "--save-session", snap], check=True, stdout=subprocess.DEVNULL)
        secs = sections(open(snap, "rb").read())
    seeds = {"seed_empty.bin": (0, 0, False), "seed_local_1.bin": (1, 0, False),
             "seed_local_2_logits.bin": (2, 0, True), "seed_memory_2_local_1.bin": (1, 2, False),
             "seed_memory_1_logits.bin": (1, 1, True)}
    os.makedirs(OUT, exist_ok=True)
    for name in os.listdir(OUT):
        if name.startswith("seed_"):
            os.remove(os.path.join(OUT, name))
    for name, (local, memory, logits) in seeds.items():
        data = pack(cut(secs, local, memory, logits))
        if name == "seed_local_1.bin":
            with open(os.path.join(OUT, "seed_local_1_nan_key.bin"), "wb") as f:
                f.write(pack(with_nan_key(cut(secs, local, memory, logits))))
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
        print(f"{name}: {len(data)} bytes")


if __name__ == "__main__":
    main()
