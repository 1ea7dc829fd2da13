#!/usr/bin/env python3
"""Generate mnemo's LongLLaMA reference fixtures from the public reference implementation.

The expected logits come from modeling_longllama.py of CStanKonrad/long_llama (the code the released
checkpoints ship with), which nobody here wrote. It is not committed: fetch the repository and pass its src/
directory. Run once by hand (never in CI), from the repository root:

    /work/pyref/bin/python tests/reference/make_longllama_fixtures.py --upstream /path/to/long_llama/src

Needs torch, transformers (5.x works once config.rope_scaling is forced to None, which the upstream asserts),
safetensors, numpy. Deterministic: fixed seeds, 1 torch thread, fp32 compute.

Writes tests/fixtures/longllama/<name>/ for two tiny random LongLLaMA configs:
  basic  hidden 64, 4 heads x 16, 4 layers, mem_layers [1, 3], window 64, last_context_length 32, bf16 memory
  odd    hidden 100, 2 heads x 50, 3 layers, mem_layers [0, 2], window 48, last_context_length 24,
         mem_positionals false, float32 memory
each with config.json (LongLlamaForCausalLM), model.safetensors (fp32), tokenizer.model (the fixture tokenizer),
reference.json and logits.bin.

reference.json "cases": each case runs on a fresh session:
  "calls": [{"ids": [...], "last_context_length": n, "rows": [i, ...]}, ...]  forward calls in order (a call
           with several tokens goes through the long-input handling); "rows" are the positions of that call
           whose logits are stored
  "decode": [t0, t1, ...]  then single-token calls feeding these tokens (the reference's greedy choices); the
           logits after each are stored
  "min_greedy_margin": smallest top1 - top2 logit gap along "decode"
logits.bin (little-endian): char[8] "MNFXLGT1", uint32 version=1, uint32 n_cases, then per case: uint32 n_rows,
uint32 n_vocab, float32[n_rows * n_vocab]: every call's stored rows in order, then one row per decode step.
"""
import argparse
import json
import os
import shutil
import struct
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
OUT = os.path.join(ROOT, "tests", "fixtures", "longllama")
TOK = os.path.join(ROOT, "tests", "fixtures", "tokenizer.model")
VOCAB = 512

CONFIGS = {
    "basic": dict(hidden_size=64, intermediate_size=88, num_hidden_layers=4, num_attention_heads=4,
                  max_position_embeddings=64, mem_layers=[1, 3], last_context_length=32, mem_dtype="bfloat16",
                  mem_positionals=True, rope_theta=10000.0, seed=501),
    "odd": dict(hidden_size=100, intermediate_size=72, num_hidden_layers=3, num_attention_heads=2,
                max_position_embeddings=48, mem_layers=[0, 2], last_context_length=24, mem_dtype="float32",
                mem_positionals=False, rope_theta=500000.0, seed=502),
}


def build(upstream, spec):
    sys.path.insert(0, os.path.dirname(upstream))
    pkg = os.path.basename(upstream.rstrip("/"))
    mod = __import__(pkg + ".modeling_longllama", fromlist=["LongLlamaForCausalLM"])
    cmod = __import__(pkg + ".configuration_longllama", fromlist=["LongLlamaConfig"])
    kw = {k: v for k, v in spec.items() if k != "seed"}
    cfg = cmod.LongLlamaConfig(vocab_size=VOCAB, rms_norm_eps=1e-6, torch_dtype="float32",
                               tie_word_embeddings=False, **kw)
    cfg.rope_scaling = None
    torch.manual_seed(spec["seed"])
    model = mod.LongLlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # larger weights than the 0.02 init: decisive logits, so greedy margins are wide
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) * (1.0 / p.shape[-1] ** 0.5) * (3.0 if "embed" in name else 1.0))
    return cfg, model


def run_case(model, calls, n_decode):
    """calls: [(ids, lcl, rows)]. Returns stored rows, decode tokens, min margin."""
    rows_out, past, last = [], None, None
    with torch.no_grad():
        for ids, lcl, rows in calls:
            out = model(input_ids=torch.tensor([ids]), past_key_values=past, use_cache=True,
                        last_context_length=lcl)
            past = out.past_key_values
            for r in rows:
                rows_out.append(out.logits[0, r].clone())
            last = out.logits[0, -1]
        decode, margin = [], float("inf")
        for _ in range(n_decode):
            top2 = torch.topk(last, 2).values
            margin = min(margin, float(top2[0] - top2[1]))
            tok = int(last.argmax())
            decode.append(tok)
            out = model(input_ids=torch.tensor([[tok]]), past_key_values=past, use_cache=True)
            past = out.past_key_values
            last = out.logits[0, -1]
            rows_out.append(last.clone())
    return rows_out, decode, margin


def stored_rows(n, lcl, window):
    """Positions kept: the last of every prefix window, every 8th of the tail, and the last."""
    prefix = max(n - lcl, 0)
    rows = set()
    for b in range(0, prefix, window):
        e = min(prefix, b + window)
        rows.add(e - 1)
    rows.update(range(prefix, n, 8))
    rows.add(n - 1)
    return sorted(r for r in rows if 0 <= r < n)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upstream", required=True, help="src/ directory of CStanKonrad/long_llama")
    args = ap.parse_args()
    torch.set_num_threads(1)
    import safetensors.torch
    import transformers
    os.makedirs(OUT, exist_ok=True)
    for name, spec in CONFIGS.items():
        cfg, model = build(os.path.abspath(args.upstream), spec)
        W, L = spec["max_position_embeddings"], spec["last_context_length"]
        g = torch.Generator().manual_seed(spec["seed"] + 1000)

        def rand_ids(n, bos=True):
            ids = torch.randint(3, VOCAB, (n,), generator=g).tolist()
            if bos:
                ids[0] = 1
            return ids

        cases = []
        ids = rand_ids(10 * W)  # 10 windows: 8+ prefix windows to memory, then decode past an overflow
        cases.append(("long", [(ids, L, stored_rows(len(ids), L, W))], W - L + 4))
        ids = rand_ids(4 * W)  # last_context_length overridden to 5
        cases.append(("lcl_override", [(ids, 5, stored_rows(len(ids), 5, W))], W - 5 + 4))
        ids = rand_ids(L - 7)  # shorter than last_context_length: no memory until decode overflows
        cases.append(("short", [(ids, L, list(range(len(ids))))], W - len(ids) + 4))
        a, b = rand_ids(3 * W), rand_ids(2 * W + 10, bos=False)  # a session continued with a long second input
        cases.append(("session", [(a, L, stored_rows(len(a), L, W)), (b, L, stored_rows(len(b), L, W))], 6))
        ids = rand_ids(3 * W + 5)  # last_context_length = the whole window
        cases.append(("lcl_window", [(ids, W, stored_rows(len(ids), W, W))], 4))

        d = os.path.join(OUT, name)
        if os.path.isdir(d):
            shutil.rmtree(d)
        os.makedirs(d)
        config = {
            "architectures": ["LongLlamaForCausalLM"], "model_type": "longllama", "vocab_size": VOCAB,
            "hidden_size": spec["hidden_size"], "intermediate_size": spec["intermediate_size"],
            "num_hidden_layers": spec["num_hidden_layers"], "num_attention_heads": spec["num_attention_heads"],
            "max_position_embeddings": W, "rms_norm_eps": 1e-6, "rope_theta": spec["rope_theta"],
            "rope_scaling": None, "hidden_act": "silu", "tie_word_embeddings": False, "bos_token_id": 1,
            "eos_token_id": 2, "pad_token_id": 0, "torch_dtype": "float32", "mem_layers": spec["mem_layers"],
            "mem_dtype": spec["mem_dtype"], "mem_positionals": spec["mem_positionals"],
            "mem_attention_grouping": None, "last_context_length": L, "torch_attention": False,
        }
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(config, f, indent=1)
        sd = {k: v.contiguous() for k, v in model.state_dict().items() if "rotary_emb" not in k}
        safetensors.torch.save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
        shutil.copy(TOK, os.path.join(d, "tokenizer.model"))
        ref = {"format": "mnemo-longllama-fixture", "version": 1, "model": name, "torch": torch.__version__,
               "transformers": transformers.__version__, "reference": "CStanKonrad/long_llama src/modeling_longllama.py",
               "seed": spec["seed"], "cases": []}
        blobs = []
        for cname, calls, n_dec in cases:
            rows, decode, margin = run_case(model, calls, n_dec)
            ref["cases"].append({"name": cname,
                                 "calls": [{"ids": c[0], "last_context_length": c[1], "rows": c[2]} for c in calls],
                                 "decode": decode, "min_greedy_margin": margin})
            blobs.append(torch.stack(rows).float().numpy())
            print(f"{name}/{cname}: {len(rows)} rows, min greedy margin {margin:.4f}")
        with open(os.path.join(d, "reference.json"), "w") as f:
            json.dump(ref, f, separators=(",", ":"))
        with open(os.path.join(d, "logits.bin"), "wb") as f:
            f.write(b"MNFXLGT1" + struct.pack("<II", 1, len(blobs)))
            for bl in blobs:
                f.write(struct.pack("<II", bl.shape[0], bl.shape[1]))
                f.write(bl.astype("<f4").tobytes())


if __name__ == "__main__":
    main()
