#!/usr/bin/env python3
"""PyTorch side of bench_long_train.py: the step `mnemo train` takes with --s2-attn or --smt (or neither), LoRA+
(LongLoRA's: r, alpha on the given targets, plus every embedding and norm trainable), printing mnemo's JSON lines.
Run with the python of the train venv (tests/reference/setup_train_venv.sh), by bench_long_train.py:

  $PY tests/bench/torch_long_train_worker.py --model DIR --data C.txt --method s2|smt|plain --steps 4 --batch 1 \\
      --seq-len 2048 --threads 2 [--smt-memory M --smt-sampled n]

Data as train_data.c (torch_train_worker.windows_of): windows of seq_len + 1 ids, or for SMT of M + T + 1 - n ids
(the document rows), step s taking windows s*B .. s*B + B - 1, no shuffling.
  plain  full causal attention (transformers' "sdpa").
  s2     S²-Attn in the no-leak form computed group-wise, as LongLoRA's current code does: the first half of the
         heads as T/g causal groups, the second half as T/g - 1 shifted groups plus the two half groups at the ends,
         each batch of groups one torch scaled_dot_product_attention(is_causal=True) call.
  smt    rows sampled with Algorithm 1 (tests/reference/make_s2_smt_fixtures.py's sampler, the same stream as C),
         position_ids kept, loss on the target part, plus beta (1) x the plain loss of the row's first T+1 ids.
AdamW (0.9/0.999, eps 1e-8, wd 0), clip 1.0, constant lr, fp32. JSON: {"step", "loss", "grad_norm", "lr", "tokens"
(positions trained: B*T per pass, two passes for SMT with beta > 0), "elapsed_s"} per step, then {"done": true}.
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "reference"))


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def s2_grouped(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    import torch
    import torch.nn.functional as F
    B, H, T, hd = query.shape
    rep = H // key.shape[1]
    if rep > 1:
        key, value = key.repeat_interleave(rep, dim=1), value.repeat_interleave(rep, dim=1)
    g, h2 = T // 4, H // 2

    def att(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scaling)

    def grp(x, lo, hi, size):
        return x[:, :, lo:hi].reshape(B, x.shape[1], (hi - lo) // size, size, hd)

    q1, k1, v1 = (x[:, :h2] for x in (query, key, value))
    o1 = att(grp(q1, 0, T, g), grp(k1, 0, T, g), grp(v1, 0, T, g)).reshape(B, h2, T, hd)
    q2, k2, v2 = (x[:, h2:] for x in (query, key, value))
    mid = att(grp(q2, g // 2, T - g // 2, g), grp(k2, g // 2, T - g // 2, g), grp(v2, g // 2, T - g // 2, g))
    ends = att(*(torch.stack([x[:, :, :g // 2], x[:, :, T - g // 2:]], dim=2) for x in (q2, k2, v2)))
    o2 = torch.cat([ends[:, :, 0], mid.reshape(B, H - h2, T - g, hd), ends[:, :, 1]], dim=2)
    return torch.cat([o1, o2], dim=1).transpose(1, 2).contiguous(), None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--method", choices=["plain", "s2", "smt"], required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq-len", type=int, required=True)
    ap.add_argument("--lora-rank", type=int, default=8)
    ap.add_argument("--lora-alpha", type=float, default=16)
    ap.add_argument("--lora-targets", default="q,k,v,o")
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--smt-memory", type=int, default=0)
    ap.add_argument("--smt-sampled", type=int, default=0)
    ap.add_argument("--smt-beta", type=float, default=1.0)
    ap.add_argument("--recompute", action="store_true", help="gradient checkpointing (transformers')")
    a = ap.parse_args()
    import torch
    import torch.nn.functional as F
    from peft import LoraConfig, get_peft_model
    from transformers import AttentionInterface, LlamaForCausalLM
    from torch_train_worker import windows_of
    torch.set_num_threads(a.threads)
    T, B = a.seq_len, a.batch
    M = a.smt_memory or 4 * T
    n = a.smt_sampled or T // 2
    L = M + T - n if a.method == "smt" else T          # a data row predicts L ids (it holds L + 1)
    ids, n_win = windows_of(a.model, a.data, L)
    AttentionInterface.register("s2_grouped", s2_grouped)
    model = LlamaForCausalLM.from_pretrained(a.model, dtype=torch.float32,
                                             attn_implementation="s2_grouped" if a.method == "s2" else "sdpa")
    model.config.use_cache = False
    names = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj"}
    torch.manual_seed(a.seed)
    model = get_peft_model(model, LoraConfig(r=a.lora_rank, lora_alpha=a.lora_alpha, lora_dropout=0.0, bias="none",
                                             target_modules=[names.get(t, t) for t in a.lora_targets.split(",")]))
    for name, p in model.named_parameters():     # LoRA+: embeddings and norms too
        if "embed" in name or "norm" in name:
            p.requires_grad_(True)
    if a.recompute:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    if a.method == "smt":
        from make_s2_smt_fixtures import row_seed, sparse_sampling

    def ce(logits, labels):
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)

    t0, tokens = time.perf_counter(), 0
    for s in range(a.steps):
        rows = [(s * B + r) % n_win for r in range(B)]
        x = torch.tensor([ids[w * L: w * L + L + 1] for w in rows], dtype=torch.long)
        opt.zero_grad(set_to_none=True)
        if a.method == "smt":
            idx = [sparse_sampling(row_seed(a.seed, s * B + r), M, n, n, 0) + list(range(M, L + 1)) for r in range(B)]
            sx = torch.stack([x[r, idx[r]] for r in range(B)])
            pos = torch.tensor(idx)
            lab = sx.clone()
            lab[:, :n] = -100
            # an explicit all-ones mask: without one (and without a KV cache) transformers reads the jumps in
            # position_ids as packed sequences and blocks attention across them
            loss = ce(model(input_ids=sx[:, :T], position_ids=pos[:, :T], attention_mask=torch.ones(B, T)).logits,
                      lab[:, 1:])
            if a.smt_beta > 0:
                loss = loss + a.smt_beta * ce(model(input_ids=x[:, :T]).logits, x[:, 1:T + 1])
                tokens += B * T
        else:
            loss = ce(model(input_ids=x[:, :T]).logits, x[:, 1:])
        tokens += B * T
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, 1.0).item()
        opt.step()
        emit({"step": s + 1, "loss": loss.item(), "grad_norm": norm, "lr": a.lr, "tokens": tokens,
              "elapsed_s": round(time.perf_counter() - t0, 6)})
    emit({"done": True, "steps": a.steps, "method": a.method, "torch": torch.__version__,
          "threads": torch.get_num_threads()})


if __name__ == "__main__":
    main()
