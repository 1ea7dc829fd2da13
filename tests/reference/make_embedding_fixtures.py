#!/usr/bin/env python3
"""Expected embeddings (mean-pooled, L2-normalised last hidden state after the final RMSNorm) for the f32
fixture models, for tests/unit/test_embed.c. Run by hand from the repository root (never in CI):

    python tests/reference/make_embedding_fixtures.py          # needs numpy; transformers+torch if present

The hidden states come from transformers (`model.model(ids).last_hidden_state`, which is after the final norm)
when it is importable. Otherwise from a float64 numpy forward of the same checkpoint, written from the
LlamaForCausalLM equations, that must first reproduce transformers' own logits stored in the fixture's
logits.bin (max |diff| < 1e-4, recorded): lm_head has full column rank (vocab 512 > hidden), so matching logits
pin the normed hidden rows down. Writes tests/fixtures/embeddings/<model>.json:

  {"format": "mnemo-embeddings", "version": 1, "model", "pooling", "source", "max_logit_diff",
   "cases": [{"ids": [...BOS first], "embedding": [n_embd floats]}]}

The prompts are the model's reference.json prompts (ids with BOS). Deterministic: two runs write the same bytes.
"""
import json
import os
import re
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "..", "fixtures")
MODELS = ["mha", "gqa"]
POOLING = "mean over positions of the last hidden state after the final RMSNorm, then L2-normalised"


def read_safetensors(path):
    with open(path, "rb") as f:
        b = f.read()
    n = struct.unpack_from("<Q", b, 0)[0]
    header = json.loads(b[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", (name, t["dtype"])
        lo, hi = t["data_offsets"]
        out[name] = np.frombuffer(b, dtype="<f4", count=(hi - lo) // 4, offset=8 + n + lo).reshape(t["shape"])
    return out


def read_logits(path):
    with open(path, "rb") as f:
        b = f.read()
    assert b[:8] == b"MNFXLGT1"
    _, count = struct.unpack_from("<II", b, 8)
    off, rows = 16, []
    for _ in range(count):
        t, v = struct.unpack_from("<II", b, off)
        rows.append(np.frombuffer(b, dtype="<f4", count=t * v, offset=off + 8).reshape(t, v))
        off += 8 + 4 * t * v
    return rows


def rmsnorm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def rope(x, theta, hd):  # x: (T, heads, hd); HF rotate_half convention
    inv = 1.0 / theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
    ang = np.arange(x.shape[0], dtype=np.float64)[:, None] * inv[None, :]
    cos = np.concatenate([np.cos(ang)] * 2, -1)[:, None, :]
    sin = np.concatenate([np.sin(ang)] * 2, -1)[:, None, :]
    rot = np.concatenate([-x[..., hd // 2:], x[..., :hd // 2]], -1)
    return x * cos + rot * sin


def numpy_forward(cfg, w, ids):
    """(normed last hidden state (T, d), logits (T, V)) in float64."""
    d, hq, hkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd, eps = d // hq, cfg["rms_norm_eps"]
    assert not cfg.get("rope_scaling"), "linear scaling not implemented here"
    g = {k: v.astype(np.float64) for k, v in w.items()}
    x = g["model.embed_tokens.weight"][ids]
    T = len(ids)
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for l in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % l
        h = rmsnorm(x, g[p + "input_layernorm.weight"], eps)
        q = rope((h @ g[p + "self_attn.q_proj.weight"].T).reshape(T, hq, hd), cfg["rope_theta"], hd)
        k = rope((h @ g[p + "self_attn.k_proj.weight"].T).reshape(T, hkv, hd), cfg["rope_theta"], hd)
        v = (h @ g[p + "self_attn.v_proj.weight"].T).reshape(T, hkv, hd)
        k, v = np.repeat(k, hq // hkv, axis=1), np.repeat(v, hq // hkv, axis=1)
        s = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        att = np.einsum("hts,shd->thd", s, v).reshape(T, hq * hd)
        x = x + att @ g[p + "self_attn.o_proj.weight"].T
        h = rmsnorm(x, g[p + "post_attention_layernorm.weight"], eps)
        gate = h @ g[p + "mlp.gate_proj.weight"].T
        x = x + (gate / (1 + np.exp(-gate)) * (h @ g[p + "mlp.up_proj.weight"].T)) @ g[p + "mlp.down_proj.weight"].T
    normed = rmsnorm(x, g["model.norm.weight"], eps)
    lm = g["lm_head.weight"] if "lm_head.weight" in g else g["model.embed_tokens.weight"]
    return normed, normed @ lm.T


def transformers_hidden(d, ids):
    try:
        import torch
        from transformers import LlamaForCausalLM
    except ImportError:
        return None
    torch.set_num_threads(1)
    model = LlamaForCausalLM.from_pretrained(d, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        return model.model(input_ids=torch.tensor([ids])).last_hidden_state[0].double().numpy()


def make(name):
    d = os.path.join(FIX, "models", name)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    with open(os.path.join(d, "reference.json")) as f:
        prompts = [p["ids"] for p in json.load(f)["prompts"]]
    w = read_safetensors(os.path.join(d, "model.safetensors"))
    hf_logits = read_logits(os.path.join(d, "logits.bin"))
    cases, worst, source = [], 0.0, None
    for ids, ref in zip(prompts, hf_logits):
        normed, logits = numpy_forward(cfg, w, ids)
        worst = max(worst, float(np.abs(logits - ref).max()))
        hf = transformers_hidden(d, ids)
        if hf is not None:
            normed, source = hf, "transformers LlamaModel last_hidden_state"
        else:
            source = "numpy float64 forward, checked against transformers' logits.bin"
        mean = normed.mean(0)
        cases.append({"ids": ids, "embedding": [round(float(v), 8) for v in mean / np.linalg.norm(mean)]})
    assert worst < 1e-4, "the numpy forward does not reproduce transformers' logits (max diff %g)" % worst
    out = {"format": "mnemo-embeddings", "version": 1, "model": name, "pooling": POOLING, "source": source,
           "max_logit_diff": float("%.3g" % worst), "cases": cases}
    os.makedirs(os.path.join(FIX, "embeddings"), exist_ok=True)
    path = os.path.join(FIX, "embeddings", name + ".json")
    txt = json.dumps(out, indent=1)  # lists of numbers on one line: readable diffs
    txt = re.sub(r"\[\s*([-0-9.e, \n]*?)\s*\]", lambda m: "[" + re.sub(r"\s*,\s*", ", ", m.group(1).strip()) + "]", txt)
    assert json.loads(txt) == out
    with open(path, "w") as f:
        f.write(txt + "\n")
    print("wrote %s (%d cases, logits within %.2g of transformers)" % (path, len(cases), worst))


if __name__ == "__main__":
    for m in sys.argv[1:] or MODELS:
        make(m)
