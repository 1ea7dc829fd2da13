#!/usr/bin/env python3
"""Generate the tiny checkpoint files the loader tests read (tests/fixtures/loader/).

Run once by hand (never in CI), from the repository root:

    build/train-venv/bin/python tests/reference/make_loader_fixtures.py

Needs torch and safetensors (transformers >= 5 no longer writes pytorch_model.bin, so the HF-style files are
written the way older transformers did: torch.save(model.state_dict())). Every file is a few KB and fully
deterministic in content (values are formulas, not random), so tests/unit/test_loader_torch.c hardcodes them.

Writes:
  mixed.bin        OrderedDict state dict with _metadata: a f32[2,3], b bf16[4], c f16[2,2], s f32[] (scalar),
                   e f32[0,3], row f32[3] (a view at storage offset 3 of base f32[2,3]), base, n i64[3]
  zip64.bin        mixed.bin's entries rewritten with every ZIP64 structure (zip64 extra fields with 0xFFFFFFFF
                   in local and central headers, ZIP64 end record + locator), as torch's writer does past 4 GB
  noncontig.bin    {"t": a transposed view}: must be refused as non-contiguous
  param_nested.bin plain dict {"w": nn.Parameter f32[2], "outer": {"inner": f32[1]}} (_rebuild_parameter,
                   nested dict flattened to "outer.inner")
  evil.bin         a pickle whose object reduces to os.system: must be refused by global name, never run
  legacy.bin       the pre-1.6 non-zip torch.save format: must be refused with a clear message
  llama_st/model.safetensors and llama_bin/pytorch_model.bin: the same tiny LLaMA weights in both formats
  llama_bin_sharded/pytorch_model-0000{1,2}-of-00002.bin + pytorch_model.bin.index.json: same weights, sharded

Also (re)writes the seed_* files of the fuzz corpora tests/fuzz/corpus/fuzz_{safetensors,torch_zip,config}/
(valid and malformed inputs, each < 20 KB). Other files there (crashers found by fuzzing) are left alone.
"""
import collections
import json
import os
import shutil
import struct
import sys
import zipfile

import torch
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "fixtures", "loader")
CORPUS = os.path.join(HERE, "..", "fuzz", "corpus")
MODELS = os.path.join(HERE, "..", "fixtures", "models")


def mixed_state_dict():
    sd = collections.OrderedDict()
    sd["a"] = (torch.arange(6, dtype=torch.float32) * 0.25 - 0.5).reshape(2, 3)
    sd["b"] = torch.tensor([1.5, -2.0, 0.125, 3.0], dtype=torch.bfloat16)
    sd["c"] = (torch.arange(4, dtype=torch.float32) * 0.5).to(torch.float16).reshape(2, 2)
    sd["s"] = torch.tensor(7.0)
    sd["e"] = torch.zeros(0, 3)
    base = torch.arange(6, dtype=torch.float32).reshape(2, 3) + 10
    sd["base"] = base
    sd["row"] = base[1]  # shares base's storage at element offset 3, contiguous
    sd["n"] = torch.tensor([-1, 0, 1 << 40], dtype=torch.int64)
    sd._metadata = collections.OrderedDict([("", {"version": 1})])
    return sd


def write_zip64(src, dst):
    """Rewrite src's entries (STORED) with ZIP64 records everywhere."""
    zin = zipfile.ZipFile(src)
    out = bytearray()
    central = bytearray()
    entries = zin.infolist()
    for info in entries:
        data = zin.read(info.filename)
        name = info.filename.encode()
        off = len(out)
        ex = struct.pack("<HHQQ", 1, 16, len(data), len(data))
        pad = (-(len(out) + 30 + len(name) + len(ex) + 4)) % 64  # keep torch's 64-byte data alignment
        ex += struct.pack("<HH", 0x4246, pad) + b"\0" * pad
        crc = zipfile.crc32(data) & 0xFFFFFFFF
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 45, 0, 0, 0, 0, crc, 0xFFFFFFFF, 0xFFFFFFFF, len(name),
                           len(ex))
        out += name + ex + data
        cex = struct.pack("<HHQQQ", 1, 24, len(data), len(data), off)
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, 0, 0, 0, 0, crc, 0xFFFFFFFF, 0xFFFFFFFF,
                               len(name), len(cex), 0, 0, 0, 0, 0xFFFFFFFF)
        central += name + cex
    cd_off = len(out)
    out += central
    eocd64 = len(out)
    out += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, len(entries), len(entries), len(central),
                       cd_off)
    out += struct.pack("<IIQI", 0x07064B50, 0, eocd64, 1)
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0xFFFF, 0xFFFF, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    with open(dst, "wb") as f:
        f.write(out)


class Evil:
    def __reduce__(self):
        return (os.system, ("echo this must never run",))


def tiny_llama_state_dict():
    """A 1-layer LLaMA-shaped state dict (hidden 8, GQA 2/1 heads, vocab 16) with formula values."""
    shapes = collections.OrderedDict([
        ("model.embed_tokens.weight", (16, 8)),
        ("model.layers.0.self_attn.q_proj.weight", (8, 8)),
        ("model.layers.0.self_attn.k_proj.weight", (4, 8)),
        ("model.layers.0.self_attn.v_proj.weight", (4, 8)),
        ("model.layers.0.self_attn.o_proj.weight", (8, 8)),
        ("model.layers.0.mlp.gate_proj.weight", (12, 8)),
        ("model.layers.0.mlp.up_proj.weight", (12, 8)),
        ("model.layers.0.mlp.down_proj.weight", (8, 12)),
        ("model.layers.0.input_layernorm.weight", (8,)),
        ("model.layers.0.post_attention_layernorm.weight", (8,)),
        ("model.norm.weight", (8,)),
        ("lm_head.weight", (16, 8)),
    ])
    sd = collections.OrderedDict()
    for i, (k, s) in enumerate(shapes.items()):
        n = 1
        for d in s:
            n *= d
        sd[k] = ((torch.arange(n, dtype=torch.float32) % 7) * 0.125 - 0.25 + i).reshape(s).to(torch.bfloat16)
    sd._metadata = collections.OrderedDict([("", {"version": 1})])
    return sd


def st_image(header, data=b"", n=None):
    h = json.dumps(header).encode() if not isinstance(header, bytes) else header
    return struct.pack("<Q", len(h) if n is None else n) + h + data


def write_corpora():
    def put(target, name, data):
        d = os.path.join(CORPUS, target)
        os.makedirs(d, exist_ok=True)
        assert len(data) < 20000, name
        with open(os.path.join(d, "seed_" + name), "wb") as f:
            f.write(data)

    # safetensors
    t = lambda dt, shape, b, e: {"dtype": dt, "shape": shape, "data_offsets": [b, e]}
    put("fuzz_safetensors", "valid_small", st_image({"__metadata__": {"format": "pt"}, "a": t("F32", [2, 2], 0, 16),
                                                      "b": t("BF16", [3], 16, 22)}, bytes(range(22))))
    sizes = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
             "F8_E4M3": 1, "F8_E5M2": 1}
    hdr, off = {}, 0
    for dt, sz in sizes.items():
        hdr["t_" + dt] = t(dt, [2, 1], off, off + 2 * sz)
        off += 2 * sz
    put("fuzz_safetensors", "all_dtypes", st_image(hdr, bytes(off)))
    put("fuzz_safetensors", "scalar_empty_overlap", st_image({"s": t("F32", [], 0, 4), "z": t("F16", [0, 7], 4, 4),
                                                               "o": t("U8", [4], 0, 4)}, bytes(8)))
    put("fuzz_safetensors", "llama", open(os.path.join(OUT, "llama_st", "model.safetensors"), "rb").read())
    put("fuzz_safetensors", "bad_offsets", st_image({"x": t("F32", [4, 4], 0, 99)}, bytes(100)))
    put("fuzz_safetensors", "bad_dtype", st_image({"x": t("F31", [1], 0, 4)}, bytes(4)))
    put("fuzz_safetensors", "header_past_eof", st_image({"x": t("F32", [1], 0, 4)}, bytes(4), n=1234))
    put("fuzz_safetensors", "overflow_shape", st_image({"x": t("F32", [2 ** 40, 2 ** 40], 0, 4)}, bytes(4)))
    put("fuzz_safetensors", "wrong_types", st_image(b'{"x": {"dtype": 1, "shape": "a", "data_offsets": {}}}'))
    put("fuzz_safetensors", "truncated", st_image({"a": t("F32", [8], 0, 32)}, bytes(32))[:40])

    # torch zip
    for name in ["mixed.bin", "zip64.bin", "noncontig.bin", "param_nested.bin", "evil.bin", "legacy.bin"]:
        put("fuzz_torch_zip", name.replace(".bin", ""), open(os.path.join(OUT, name), "rb").read())
    put("fuzz_torch_zip", "llama", open(os.path.join(OUT, "llama_bin", "pytorch_model.bin"), "rb").read())
    mixed = open(os.path.join(OUT, "mixed.bin"), "rb").read()
    put("fuzz_torch_zip", "truncated", mixed[: len(mixed) // 2])
    put("fuzz_torch_zip", "no_eocd", mixed[:-22])

    # config
    for m in ["mha", "gqa", "rope_scaled", "tied"]:
        put("fuzz_config", m, open(os.path.join(MODELS, m, "config.json"), "rb").read())
    longllama = {"architectures": ["LongLlamaForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
                 "hidden_act": "silu", "hidden_size": 3200, "intermediate_size": 8640, "last_context_length": 1024,
                 "max_position_embeddings": 2048, "mem_attention_grouping": [4, 2048], "mem_dtype": "bfloat16",
                 "mem_layers": [6, 12, 18], "mem_positionals": True, "model_type": "longllama",
                 "num_attention_heads": 32, "num_hidden_layers": 26, "rms_norm_eps": 1e-06, "rope_scaling": None,
                 "rope_theta": 10000, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 32000}
    put("fuzz_config", "longllama_3b", json.dumps(longllama, indent=1).encode())
    put("fuzz_config", "eos_list_rope_params", json.dumps({
        "model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 100,
        "eos_token_id": [2, 7], "rope_parameters": {"rope_theta": 5e5, "rope_type": "linear", "factor": 2}}).encode())
    put("fuzz_config", "bad_arch", b'{"architectures": ["GPT2LMHeadModel"], "hidden_size": 64}')
    put("fuzz_config", "bad_types", b'{"architectures": ["LlamaForCausalLM"], "hidden_size": "64", "rope_scaling": 1}')
    put("fuzz_config", "bad_json", b'{"architectures": ["LlamaForCausalLM"], ')


def main():
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    p = lambda *a: os.path.join(OUT, *a)

    torch.save(mixed_state_dict(), p("mixed.bin"))
    write_zip64(p("mixed.bin"), p("zip64.bin"))
    a = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    torch.save({"t": a.t()}, p("noncontig.bin"))
    torch.save({"w": torch.nn.Parameter(torch.tensor([0.5, -0.5])), "outer": {"inner": torch.tensor([2.0])}},
               p("param_nested.bin"))
    torch.save({"x": Evil()}, p("evil.bin"))
    torch.save({"x": torch.tensor([1.0])}, p("legacy.bin"), _use_new_zipfile_serialization=False)

    sd = tiny_llama_state_dict()
    os.makedirs(p("llama_st"))
    save_file(dict(sd), p("llama_st", "model.safetensors"), metadata={"format": "pt"})
    os.makedirs(p("llama_bin"))
    torch.save(sd, p("llama_bin", "pytorch_model.bin"))
    os.makedirs(p("llama_bin_sharded"))
    names = list(sd.keys())
    shards = [names[:6], names[6:]]
    wm = {}
    for i, part in enumerate(shards):
        fn = "pytorch_model-%05d-of-00002.bin" % (i + 1)
        sub = collections.OrderedDict((k, sd[k]) for k in part)
        sub._metadata = sd._metadata
        torch.save(sub, p("llama_bin_sharded", fn))
        for k in part:
            wm[k] = fn
    with open(p("llama_bin_sharded", "pytorch_model.bin.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": wm}, f, indent=2, sort_keys=True)

    write_corpora()

    for root, _, files in os.walk(OUT):
        for fn in sorted(files):
            print("%6d  %s" % (os.path.getsize(os.path.join(root, fn)), os.path.relpath(os.path.join(root, fn), OUT)))


if __name__ == "__main__":
    sys.exit(main())
