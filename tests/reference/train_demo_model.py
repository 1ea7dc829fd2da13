#!/usr/bin/env python3
"""Train models/tiny-shakespeare: the small real LLaMA the `mnemo` CLI uses by default.

A demo, not a useful model: ~1M parameters trained for a few minutes on tiny shakespeare with the 512-piece
fixture tokenizer, so `build/mnemo generate --prompt ...` prints Shakespeare-like text out of the box.
Run once by hand (never in CI), from the repository root:

    build/train-venv/bin/python tests/reference/train_demo_model.py [--minutes 12]

Needs torch, transformers, sentencepiece, safetensors. Deterministic seed; wall-clock budget, so the exact
loss depends on the machine's speed (the one reached is written into the model's README).
"""
import argparse
import json
import math
import os
import shutil
import time

import sentencepiece as spm
import torch
from transformers import LlamaConfig, LlamaForCausalLM

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TOK = os.path.join(ROOT, "tests", "fixtures", "tokenizer.model")
OUT = os.path.join(ROOT, "models", "tiny-shakespeare")
TEXT = os.path.join(ROOT, "data", "tinyshakespeare.txt")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=12.0)
    ap.add_argument("--text", default=TEXT)
    args = ap.parse_args()
    torch.manual_seed(1234)
    torch.set_num_threads(2)
    sp = spm.SentencePieceProcessor(model_file=TOK)
    ids = torch.tensor(sp.encode(open(args.text, encoding="utf-8").read()), dtype=torch.long)
    split = int(len(ids) * 0.95)
    train, val = ids[:split], ids[split:]
    cfg = LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=344, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256,
                      rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=True, bos_token_id=1,
                      eos_token_id=2, pad_token_id=None, hidden_act="silu")
    cfg._attn_implementation = "sdpa"
    model = LlamaForCausalLM(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
    T, B, budget = 128, 16, args.minutes * 60
    g = torch.Generator().manual_seed(0)

    def batch(data):
        ix = torch.randint(len(data) - T - 1, (B,), generator=g)
        x = torch.stack([data[i:i + T] for i in ix])
        y = torch.stack([data[i + 1:i + T + 1] for i in ix])
        return x, y

    def val_loss():
        model.eval()
        with torch.no_grad():
            losses = [model(input_ids=x, labels=x).loss.item() for x, _ in (batch(val) for _ in range(20))]
        model.train()
        return sum(losses) / len(losses)

    t0, step, est_steps = time.time(), 0, None
    while time.time() - t0 < budget:
        frac = min((time.time() - t0) / budget, 1.0)
        lr = 3e-3 * min(1.0, (step + 1) / 100) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for pg in opt.param_groups:
            pg["lr"] = lr
        x, _ = batch(train)
        loss = model(input_ids=x, labels=x).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 200 == 0:
            print(f"step {step} t {time.time() - t0:.0f}s loss {loss.item():.3f} lr {lr:.2e}", flush=True)
        step += 1
    vl = val_loss()
    print(f"done: {step} steps, val loss {vl:.3f} nats/token, {n_params} params", flush=True)

    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    model.eval()
    model.to(torch.bfloat16).save_pretrained(OUT)
    p = os.path.join(OUT, "config.json")
    c = json.load(open(p))
    c.update(architectures=["LlamaForCausalLM"], torch_dtype="bfloat16", dtype="bfloat16", rope_theta=10000.0,
             rope_scaling=None, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, model_type="llama")
    json.dump(c, open(p, "w"), indent=2, sort_keys=True)
    shutil.copyfile(TOK, os.path.join(OUT, "tokenizer.model"))
    with open(os.path.join(OUT, "README.md"), "w") as f:
        f.write(f"""# tiny-shakespeare — mnemo's demo model

A {n_params / 1e6:.2f}M-parameter LLaMA (4 layers, hidden 128, 4 heads, ffn 344, tied embeddings, bf16) trained for
{args.minutes:g} minutes ({step} steps of 16 x 128 tokens) on tiny shakespeare (public domain) with the 512-piece
fixture tokenizer. Validation loss {vl:.3f} nats/token on the held-out last 5%. It exists so `mnemo generate` prints
Shakespeare-like text with nothing downloaded; it is not a useful language model.

Regenerate: `build/train-venv/bin/python tests/reference/train_demo_model.py --minutes {args.minutes:g}`
""")
    print("saved", OUT, sum(os.path.getsize(os.path.join(OUT, n)) for n in os.listdir(OUT)), "bytes")


if __name__ == "__main__":
    main()
