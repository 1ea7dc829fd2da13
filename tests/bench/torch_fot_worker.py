#!/usr/bin/env python3
"""PyTorch side of bench_fot.py: the FoT cross-batch training step `mnemo train --fot` takes, done by torch on the CPU,
printing the same JSON lines as `mnemo train --json`. Run by bench_fot.py with the train venv's python
(tests/reference/setup_train_venv.sh):

  $PY tests/bench/torch_fot_worker.py --model DIR --data C.txt --fot "1/2(0,0),1/2(1,1)" --steps 4 --batch 2 \\
      --seq-len 1024 --lr 1e-4 --threads 2 [--plain]

The step (tests/reference/fot_ref.py states it; this is the same arithmetic written for speed): the .txt file is one
stream, BOS + the SentencePiece ids of the whole file; an example is K * seq_len + 1 ids (examples overlap by one),
step s takes examples s*B .. s*B + B - 1 (shuffle off, wrapping), each cut into K rows of seq_len + 1. Every row runs
through the model (the LongLLaMA checkpoint's weights as plain tensors, fp32; RMSNorm, rotate_half RoPE at positions
0..seq_len-1, SiLU MLP); in memory layers each row attends with one softmax to its extra contexts (unrotated keys,
seen whole) and its own causal keys — F.scaled_dot_product_attention with a boolean mask, one call per row; other
layers use sdpa's causal path. Loss = mean cross-entropy over all rows; AdamW (0.9/0.999, eps 1e-8, weight decay 0)
after clip_grad_norm_(1.0), constant lr; full fine-tuning. --plain: the same rows without cross-batch (every memory
layer local only), the step `mnemo train` takes without --fot on K * batch rows.
"""
import argparse
import json
import math
import os
import resource
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "reference"))


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--fot", required=True)
    ap.add_argument("--plain", action="store_true")
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq-len", type=int, required=True)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    t_start = time.perf_counter()
    import torch
    import torch.nn.functional as F
    import sentencepiece as spm
    from safetensors.torch import load_file
    import fot_ref
    rss_import = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    torch.set_num_threads(a.threads)

    with open(os.path.join(a.model, "config.json")) as f:
        cfg = json.load(f)
    H, hid = cfg["num_attention_heads"], cfg["hidden_size"]
    d = hid // H
    eps = cfg.get("rms_norm_eps", 1e-6)
    mem_layers = set(cfg.get("mem_layers", []))
    rot_mem = cfg.get("mem_positionals", True)
    w = {k: v.float().requires_grad_(True) for k, v in load_file(os.path.join(a.model, "model.safetensors")).items()}
    sp = spm.SentencePieceProcessor(model_file=os.path.join(a.model, "tokenizer.model"))
    with open(a.data, "rb") as f:
        ids = [sp.bos_id()] + sp.encode(f.read().decode("utf-8"))
    K, rows_sched = fot_ref.parse_schedule(a.fot)
    T, D = a.seq_len, a.batch
    R = D * K
    n_ex = (len(ids) - 1) // (K * T)
    vis = fot_ref.visibility(K, rows_sched, D)
    extras = [[s for s in range(R) if vis[r, s]] for r in range(R)]
    inv = 1.0 / (cfg.get("rope_theta", 10000.0) ** (torch.arange(0, d, 2).float() / d))
    ang = torch.outer(torch.arange(T).float(), inv)
    ang = torch.cat([ang, ang], -1)
    cos, sin = ang.cos(), ang.sin()

    def rope(x):  # [R, H, T, d]
        h = d // 2
        return x * cos + torch.cat([-x[..., h:], x[..., :h]], -1) * sin

    def rms(x, wt):
        return wt * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    causal = torch.ones(T, T, dtype=torch.bool).tril()

    def loss_of(x_ids, tgt):
        x = w["model.embed_tokens.weight"][x_ids]
        for i in range(cfg["num_hidden_layers"]):
            p = f"model.layers.{i}."
            h = rms(x, w[p + "input_layernorm.weight"])
            q = F.linear(h, w[p + "self_attn.q_proj.weight"]).view(R, T, H, d).transpose(1, 2)
            k = F.linear(h, w[p + "self_attn.k_proj.weight"]).view(R, T, H, d).transpose(1, 2)
            v = F.linear(h, w[p + "self_attn.v_proj.weight"]).view(R, T, H, d).transpose(1, 2)
            mem = i in mem_layers
            qr, kr = (rope(q), rope(k)) if (not mem or rot_mem) else (q, k)
            if mem and not a.plain:
                outs = []
                for r in range(R):
                    ex = extras[r]
                    kk = torch.cat([k[s] for s in ex] + [kr[r]], dim=1)  # [H, (E+1)T, d]
                    vv = torch.cat([v[s] for s in ex] + [v[r]], dim=1)
                    m = torch.cat([torch.ones(T, len(ex) * T, dtype=torch.bool), causal], dim=1)
                    outs.append(F.scaled_dot_product_attention(qr[r:r + 1], kk[None], vv[None], attn_mask=m))
                o = torch.cat(outs, 0)
            else:
                o = F.scaled_dot_product_attention(qr, kr, v, is_causal=True)
            x = x + F.linear(o.transpose(1, 2).reshape(R, T, hid), w[p + "self_attn.o_proj.weight"])
            h = rms(x, w[p + "post_attention_layernorm.weight"])
            g = F.silu(F.linear(h, w[p + "mlp.gate_proj.weight"]))
            x = x + F.linear(g * F.linear(h, w[p + "mlp.up_proj.weight"]), w[p + "mlp.down_proj.weight"])
        x = rms(x, w["model.norm.weight"])
        logits = F.linear(x, w["lm_head.weight"])
        return F.cross_entropy(logits.reshape(R * T, -1), tgt.reshape(-1))

    params = list(w.values())
    opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    load_s = time.perf_counter() - t_start
    t0 = time.perf_counter()
    for s in range(a.steps):
        rows = []
        for e in range(D):
            ex = ((s * D + e) % n_ex) * K * T
            rows += [ids[ex + j * T: ex + j * T + T + 1] for j in range(K)]
        x = torch.tensor(rows, dtype=torch.long)
        loss = loss_of(x[:, :-1], x[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, 1.0).item()
        opt.step()
        emit({"step": s + 1, "loss": loss.item(), "grad_norm": norm, "lr": a.lr, "tokens": (s + 1) * R * T,
              "elapsed_s": round(time.perf_counter() - t0, 6)})
    emit({"done": True, "steps": a.steps, "load_s": round(load_s, 3), "rss_import_mib": round(rss_import, 1),
          "examples": n_ex, "torch": torch.__version__, "threads": torch.get_num_threads()})


if __name__ == "__main__":
    main()
