#!/usr/bin/env python3
"""Generate mnemo's training reference fixtures: gradients, LoRA, AdamW runs, adapter interop.

Run by hand (never in CI), from the repository root, in the venv of setup_train_venv.sh:

    bash tests/reference/setup_train_venv.sh            # once: build/train-venv
    build/train-venv/bin/python tests/reference/make_train_fixtures.py [--check]

Writes tests/fixtures/train/ (README.md there documents every file). The base models are the
existing inference fixtures tests/fixtures/models/{mha,gqa,tied,rope_scaled,bf16}: no new model
weights. Everything is fp32 on the CPU with 1 torch thread and fixed seeds, so a rerun writes
byte-identical files; --check regenerates into a temp dir and compares the bytes with the
committed ones (exit 1 on any difference).

Cases:
  full/<model>/        every parameter's gradient for one batch (B=2 windows of 17 ids: the model
                       reads 16, predicts 16), HF names, + loss
  lora/<model>_<t>/    peft LoRA r=4 alpha=8 (t = qv: q_proj,v_proj; all: the seven projections),
                       seeded NON-zero A and B, the initial adapter as peft saves it, the gradient of
                       every lora_A/lora_B (peft file names), + loss
  lora_plus/<model>/   LongLoRA's LoRA+: the lora/<model>_all adapter with the embeddings and every
                       RMSNorm trainable too; gradients of all of them, + loss
  adamw/<run>/         10 AdamW steps (lr 1e-3, betas (0.9, 0.999), eps 1e-8, wd 0.01), clip 1.0,
                       cosine schedule with 2 warmup steps over 10; batch B=2, seq_len 16 from
                       data/train.txt as train_data.h (shuffle off), G=1 and G=2
  interop/<model>_<t>/ a peft adapter with non-zero B and the logits of base+adapter on prompts
"""
import argparse
import filecmp
import json
import math
import os
import shutil
import struct
import sys
import tempfile

import numpy as np
import torch
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
MODELS = "tests/fixtures/models"          # relative to ROOT: peft records it in adapter_config.json
CORPUS = os.path.join(ROOT, "data", "tinyshakespeare.txt")
TOKENIZER = "tests/fixtures/tokenizer.model"

SEQ_LEN = 16
BATCH = 2
N_WINDOWS = 30          # the training text is cut so the stream has exactly this many windows:
                        # the G=1 runs take windows 0..19, the G=2 runs 0..29 then wrap to 0..9
LORA_R, LORA_ALPHA = 4, 8
TARGETS = {"qv": ["q_proj", "v_proj"],
           "all": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}
ADAMW = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
STEPS, WARMUP, CLIP = 10, 2, 1.0


def dump_json(obj, path):
    """Indented JSON with lists of numbers on one line; floats as repr (round-trip exact)."""
    import re
    txt = json.dumps(obj, ensure_ascii=False, indent=1, sort_keys=False)
    txt = re.sub(r"\[\s*([-0-9.e+, \n]*?)\s*\]",
                 lambda m: "[" + re.sub(r"\s*,\s*", ", ", m.group(1).strip()) + "]", txt)
    assert json.loads(txt) == obj
    with open(path, "w", encoding="utf-8") as f:
        f.write(txt + "\n")


def versions():
    import peft
    import safetensors
    import transformers
    return {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__,
            "safetensors": safetensors.__version__, "numpy": np.__version__}


def load_base(name, dtype=torch.float32):
    """A fixture model as LlamaForCausalLM, weights widened to fp32 (bf16 ones exactly), eager attention."""
    from transformers import LlamaForCausalLM
    m = LlamaForCausalLM.from_pretrained(os.path.join(MODELS, name), dtype=dtype, attn_implementation="eager")
    m.train()  # dropout is 0 everywhere; train() only to be explicit
    for p in m.parameters():
        assert p.dtype == dtype
        if name == "bf16":  # widened exactly: every value is a bf16 value
            assert torch.equal(p, p.to(torch.bfloat16).to(dtype))
    return m


def save_tensors(tensors, path):
    save_file({k: v.detach().contiguous().to(torch.float32) for k, v in tensors.items()}, path,
              metadata={"format": "pt"})


def ce_loss(model, tokens):
    """HF's causal-LM loss: labels = input_ids, shifted inside, mean over every predicted token."""
    return model(input_ids=tokens, labels=tokens).loss


def manual_loss(model, tokens):
    logits = model(input_ids=tokens).logits[:, :-1]  # no .float(): the fp64 twin stays fp64
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


def rel_err(a, b):
    """max |a-b| / max |b| (the issue's tolerance: relative to the tensor's max |grad|)."""
    den = b.abs().max().item()
    return (a - b).abs().max().item() / den if den > 0 else (a - b).abs().max().item()


# ----------------------------------------------------------------------------------------------- data
def make_text(sp, out_dir):
    """A prefix of tinyshakespeare (public domain), cut at a line end so that BOS + its ids make exactly
    N_WINDOWS windows of SEQ_LEN+1 overlapping by one: n_ex = (n_ids - 1) // SEQ_LEN (train_data.c)."""
    with open(CORPUS, encoding="utf-8") as f:
        corpus = f.read()
    pos = 0
    while True:
        nl = corpus.index("\n", pos)
        text = corpus[:nl + 1]
        n = 1 + len(sp.encode(text))
        if (n - 1) // SEQ_LEN == N_WINDOWS:
            break
        assert (n - 1) // SEQ_LEN < N_WINDOWS, "no line end gives exactly %d windows" % N_WINDOWS
        pos = nl + 1
    with open(os.path.join(out_dir, "train.txt"), "w", encoding="utf-8", newline="") as f:
        f.write(text)
    ids = [1] + sp.encode(text)
    windows = [ids[i * SEQ_LEN: i * SEQ_LEN + SEQ_LEN + 1] for i in range(N_WINDOWS)]
    dump_json({"format": "mnemo-train-data", "version": 1, "source": "train.txt (the first %d bytes of "
               "tinyshakespeare.txt, public domain)" % len(text.encode("utf-8")),
               "tokenizer": "tests/fixtures/tokenizer.model (sentencepiece encode(text), BOS=1 prepended)",
               "seq_len": SEQ_LEN, "n_ids": len(ids), "n_windows": N_WINDOWS, "ids": ids},
              os.path.join(out_dir, "train_ids.json"))
    return windows


def step_rows(step, batch, accum):
    """train_data.h, shuffle off: step s takes windows s*B*G .. s*B*G+B*G-1, wrapping; micro-batch g
    of the step takes its rows g*B .. g*B+B-1."""
    first = step * batch * accum
    return [[(first + g * batch + r) % N_WINDOWS for r in range(batch)] for g in range(accum)]


# ----------------------------------------------------------------------------------------------- LoRA
def peft_model(base, targets, modules_extra=False):
    from peft import LoraConfig, get_peft_model
    cfg = LoraConfig(r=LORA_R, lora_alpha=LORA_ALPHA, target_modules=list(targets), lora_dropout=0.0,
                     bias="none", task_type="CAUSAL_LM")
    return get_peft_model(base, cfg)


def lora_params(pm):
    """(file name, parameter) for every lora_A/lora_B, in module order; file names drop peft's
    adapter name '.default' as save_pretrained does."""
    return [(n.replace(".default.", "."), p) for n, p in pm.named_parameters() if ".lora_" in n]


def seed_lora(pm, seed):
    """A ~ N(0, 0.2^2), B ~ N(0, 0.1^2), both non-zero, drawn in module order from one generator."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in lora_params(pm):
            std = 0.2 if ".lora_A." in n else 0.1
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float32) * std)


def save_adapter(pm, out_dir):
    pm.save_pretrained(out_dir)
    # peft keeps target_modules as a set, so the saved list's order follows Python's string hashing
    # (PYTHONHASHSEED): sort it, keeping peft's own layout (indent 2, sorted keys), for reproducible bytes.
    cfg_path = os.path.join(out_dir, "adapter_config.json")
    with open(cfg_path, encoding="utf-8") as f:
        cfg = json.load(f)
    cfg["target_modules"] = sorted(cfg["target_modules"])
    with open(cfg_path, "w", encoding="utf-8") as f:
        f.write(json.dumps(cfg, indent=2, sort_keys=True))
    readme = os.path.join(out_dir, "README.md")  # peft's model card template: not needed
    if os.path.exists(readme):
        os.remove(readme)


def plus_trainable(pm):
    """LongLoRA's LoRA+ (trainable_params "embed,norm"): embeddings and every norm trainable too."""
    out = []
    for n, p in pm.named_parameters():
        if "embed" in n or "norm" in n:
            p.requires_grad_(True)
            out.append(n)
    return out


# ----------------------------------------------------------------------------------------------- cases
def case_full(name, tokens, out_dir):
    os.makedirs(out_dir)
    m = load_base(name)
    loss = ce_loss(m, tokens)
    loss.backward()
    grads = {n: p.grad for n, p in m.named_parameters()}  # tied: the one shared tensor, once
    save_tensors(grads, os.path.join(out_dir, "grads.safetensors"))
    # fp64 twin: how far torch's own fp32 gradients are from exact (the budget the C side shares).
    # (HF's loss casts logits with .float(), so the twin uses the plain cross-entropy; RoPE's cos/sin are
    # computed in fp32 by LlamaRotaryEmbedding either way.)
    m64 = load_base(name).double()
    loss64 = manual_loss(m64, tokens)
    loss64.backward()
    g64 = {n: p.grad for n, p in m64.named_parameters()}
    with torch.no_grad():
        mloss = manual_loss(m, tokens).item()
    worst = max(rel_err(grads[n].double(), g64[n]) for n in grads)
    dump_json({"model": name, "base": "%s/%s" % (MODELS, name), "batch": "../../batch.json",
               "loss": loss.item(), "loss_fp64": loss64.item(), "loss_manual_check": mloss,
               "n_tensors": len(grads), "n_params": sum(g.numel() for g in grads.values()),
               "tensors": sorted(grads), "max_rel_err_fp32_vs_fp64": worst},
              os.path.join(out_dir, "result.json"))
    assert abs(mloss - loss.item()) < 1e-5 * abs(mloss)
    return loss.item()


def case_lora(name, tkey, seed, tokens, out_dir):
    os.makedirs(out_dir)
    pm = peft_model(load_base(name), TARGETS[tkey])
    seed_lora(pm, seed)
    save_adapter(pm, out_dir)
    loss = ce_loss(pm, tokens)
    loss.backward()
    grads = {n: p.grad for n, p in lora_params(pm)}
    save_tensors(grads, os.path.join(out_dir, "grads.safetensors"))
    # Independent check through the merged model W' = W + s*B*A (s = alpha/r): same loss, and
    # dL/dB = s * dL/dW' * A^T, dL/dA = s * B^T * dL/dW'.
    merged = load_base(name)
    mods = dict(merged.named_modules())
    s = LORA_ALPHA / LORA_R
    with torch.no_grad():
        for n, p in lora_params(pm):
            if ".lora_A." in n:
                mod = n[len("base_model.model."):-len(".lora_A.weight")]
                b = dict(lora_params(pm))[n.replace(".lora_A.", ".lora_B.")]
                mods[mod].weight += s * b @ p
    mloss = ce_loss(merged, tokens)
    mloss.backward()
    merged_err = 0.0
    for n, p in lora_params(pm):
        mod = n[len("base_model.model."):-len(".lora_A.weight")]
        gw = mods[mod].weight.grad
        if ".lora_A." in n:
            b = dict(lora_params(pm))[n.replace(".lora_A.", ".lora_B.")]
            want = s * b.t() @ gw
        else:
            a = dict(lora_params(pm))[n.replace(".lora_B.", ".lora_A.")]
            want = s * gw @ a.t()
        merged_err = max(merged_err, rel_err(grads[n], want.detach()))
    assert merged_err < 1e-4 and abs(mloss.item() - loss.item()) < 1e-5 * loss.item(), (merged_err, mloss.item())
    dump_json({"model": name, "base": "%s/%s" % (MODELS, name), "batch": "../../batch.json",
               "targets": TARGETS[tkey], "r": LORA_R, "lora_alpha": LORA_ALPHA, "scaling": LORA_ALPHA / LORA_R,
               "init_seed": seed, "init": "A ~ N(0, 0.2^2), B ~ N(0, 0.1^2) (torch.Generator, module order)",
               "loss": loss.item(), "n_tensors": len(grads), "tensors": sorted(grads),
               "merged_check": {"loss": mloss.item(), "max_rel_err": merged_err,
                                "what": "the same gradients from the merged model W + (alpha/r) B A: "
                                        "dB = s dW' A^T, dA = s B^T dW'"}},
              os.path.join(out_dir, "result.json"))
    return loss.item()


def case_lora_plus(name, seed, tokens, out_dir):
    os.makedirs(out_dir)
    pm = peft_model(load_base(name), TARGETS["all"])
    seed_lora(pm, seed)
    extra = plus_trainable(pm)
    loss = ce_loss(pm, tokens)
    loss.backward()
    grads = {n.replace(".default.", "."): p.grad for n, p in pm.named_parameters() if p.requires_grad}
    save_tensors(grads, os.path.join(out_dir, "grads.safetensors"))
    dump_json({"model": name, "base": "%s/%s" % (MODELS, name), "batch": "../../batch.json",
               "adapter": "../../lora/%s_all" % name, "targets": TARGETS["all"],
               "trainable_extra": extra, "loss": loss.item(), "n_tensors": len(grads), "tensors": sorted(grads)},
              os.path.join(out_dir, "result.json"))
    return loss.item()


def run_adamw(model, params, windows, accum):
    """10 optimizer steps exactly as a user's torch loop would do them; returns the per-step log."""
    from transformers import get_cosine_schedule_with_warmup
    opt = torch.optim.AdamW(params, lr=ADAMW["lr"], betas=ADAMW["betas"], eps=ADAMW["eps"],
                            weight_decay=ADAMW["weight_decay"])
    sched = get_cosine_schedule_with_warmup(opt, num_warmup_steps=WARMUP, num_training_steps=STEPS)
    log = []
    for s in range(STEPS):
        rows = step_rows(s, BATCH, accum)
        opt.zero_grad(set_to_none=True)
        losses = []
        for micro in rows:
            tok = torch.tensor([windows[w] for w in micro], dtype=torch.long)
            loss = ce_loss(model, tok)
            (loss / accum).backward()
            losses.append(loss.item())
        lr = opt.param_groups[0]["lr"]
        norm = torch.nn.utils.clip_grad_norm_(params, CLIP).item()
        opt.step()
        sched.step()
        log.append({"step": s, "loss": sum(losses) / accum, "micro_losses": losses, "grad_norm": norm, "lr": lr,
                    "windows": [w for micro in rows for w in micro],
                    "tokens": [windows[w] for micro in rows for w in micro]})
    return log


def run_manual(model, params, windows, accum):
    """The same loop with AdamW, clipping and the schedule written out by hand from their documented
    formulas (what the C side implements), to show the fixture's semantics are the ones written in
    README.md. Returns the per-step losses; the parameters end updated."""
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    b1, b2 = ADAMW["betas"]
    losses = []
    for s in range(STEPS):
        for p in params:
            p.grad = None
        ls = []
        for micro in step_rows(s, BATCH, accum):
            tok = torch.tensor([windows[w] for w in micro], dtype=torch.long)
            loss = ce_loss(model, tok)
            (loss / accum).backward()
            ls.append(loss.item())
        losses.append(sum(ls) / accum)
        if s < WARMUP:
            lr = ADAMW["lr"] * s / WARMUP
        else:
            lr = ADAMW["lr"] * max(0.0, 0.5 * (1 + math.cos(math.pi * (s - WARMUP) / (STEPS - WARMUP))))
        norm = math.sqrt(sum(float(p.grad.double().square().sum()) for p in params))
        scale = min(1.0, CLIP / (norm + 1e-6))
        t = s + 1
        with torch.no_grad():
            for p, mi, vi in zip(params, m, v):
                g = p.grad * scale
                p.mul_(1 - lr * ADAMW["weight_decay"])
                mi.mul_(b1).add_(g, alpha=1 - b1)
                vi.mul_(b2).addcmul_(g, g, value=1 - b2)
                denom = vi.sqrt() / math.sqrt(1 - b2 ** t) + ADAMW["eps"]
                p.addcdiv_(mi, denom, value=-lr / (1 - b1 ** t))
    return losses


def manual_check(log, final, model, params, windows, accum):
    """max relative difference of the hand-written run from torch's (losses; parameters relative to
    each tensor's max |value|)."""
    losses = run_manual(model, params, windows, accum)
    dl = max(abs(a - e["loss"]) / abs(e["loss"]) for a, e in zip(losses, log))
    dp = max(rel_err(p.detach(), final[i].detach()) for i, p in enumerate(params))
    assert dl < 1e-5 and dp < 1e-5, (dl, dp)
    return {"max_rel_loss_diff": dl, "max_rel_param_diff": dp,
            "what": "the same 10 steps with AdamW, clip_grad_norm_ and the schedule written by hand from the "
                    "formulas in README.md, against torch's"}


def adamw_meta(accum, kind):
    return {"optimizer": "torch.optim.AdamW", "lr": ADAMW["lr"], "betas": list(ADAMW["betas"]),
            "eps": ADAMW["eps"], "weight_decay": ADAMW["weight_decay"], "weight_decay_applies_to": "every "
            "trained tensor (one param group: norms, embeddings and lora_B included)",
            "grad_clip": CLIP, "clip": "torch.nn.utils.clip_grad_norm_(params, 1.0) after the backward of the "
            "last micro-batch, before opt.step(); grad_norm = its return value (pre-clip)",
            "schedule": "transformers.get_cosine_schedule_with_warmup(num_warmup_steps=2, "
            "num_training_steps=10), scheduler.step() after every opt.step(); lr = the lr opt.step() used",
            "steps": STEPS, "batch": BATCH, "seq_len": SEQ_LEN, "grad_accum": accum,
            "data": "../../data/train.txt, shuffle off: step s takes windows s*B*G .. s*B*G+B*G-1 (mod %d); "
                    "micro-batch g takes the step's windows g*B .. g*B+B-1" % N_WINDOWS,
            "loss": "mean cross-entropy over the step's B*G*seq_len predicted tokens (= mean of micro_losses); "
                    "each micro-batch's mean loss is divided by G before its backward",
            "kind": kind}


SGD = {"lr": 0.05, "momentum": 0.9, "weight_decay": 0.01}


def run_sgd(model, params, windows):
    """10 torch.optim.SGD steps (momentum, weight decay), clipping, linear schedule with warmup; per-step log."""
    from transformers import get_linear_schedule_with_warmup
    opt = torch.optim.SGD(params, lr=SGD["lr"], momentum=SGD["momentum"], weight_decay=SGD["weight_decay"])
    sched = get_linear_schedule_with_warmup(opt, num_warmup_steps=WARMUP, num_training_steps=STEPS)
    log = []
    for s in range(STEPS):
        (micro,) = step_rows(s, BATCH, 1)
        opt.zero_grad(set_to_none=True)
        tok = torch.tensor([windows[w] for w in micro], dtype=torch.long)
        loss = ce_loss(model, tok)
        loss.backward()
        lr = opt.param_groups[0]["lr"]
        norm = torch.nn.utils.clip_grad_norm_(params, CLIP).item()
        opt.step()
        sched.step()
        log.append({"step": s, "loss": loss.item(), "grad_norm": norm, "lr": lr, "windows": list(micro)})
    return log


def case_sgd_full(name, windows, out_dir):
    os.makedirs(out_dir)
    m = load_base(name)
    params = [p for _, p in m.named_parameters()]
    log = run_sgd(m, params, windows)
    meta = {"optimizer": "torch.optim.SGD", **SGD, "dampening": 0, "nesterov": False, "grad_clip": CLIP,
            "schedule": "transformers.get_linear_schedule_with_warmup(num_warmup_steps=%d, num_training_steps=%d)"
                        % (WARMUP, STEPS),
            "steps": STEPS, "batch": BATCH, "seq_len": SEQ_LEN, "grad_accum": 1, "kind": "full fine-tuning",
            "model": name, "base": "%s/%s" % (MODELS, name), "data": "../../data/train.txt, shuffle off", "log": log,
            "final_l2": {n: p.detach().double().norm().item() for n, p in m.named_parameters()}}
    dump_json(meta, os.path.join(out_dir, "steps.json"))
    return log


def case_adamw_full(name, windows, accum, out_dir, save_final):
    os.makedirs(out_dir)
    m = load_base(name)
    params = [p for _, p in m.named_parameters()]
    log = run_adamw(m, params, windows, accum)
    final = {n: p for n, p in m.named_parameters()}
    m2 = load_base(name)
    check = manual_check(log, [p for p in params], m2, [p for _, p in m2.named_parameters()], windows, accum)
    meta = adamw_meta(accum, "full fine-tuning")
    meta.update({"model": name, "base": "%s/%s" % (MODELS, name), "log": log, "manual_check": check,
                 "final_l2": {n: p.detach().double().norm().item() for n, p in final.items()}})
    if save_final:
        save_tensors(final, os.path.join(out_dir, "model.safetensors"))
        meta["final"] = "model.safetensors (every parameter after step 10, HF names)"
    else:
        meta["final"] = "not stored (size); final_l2 = the 2-norm of each parameter after step 10"
    dump_json(meta, os.path.join(out_dir, "steps.json"))
    return log


def case_adamw_lora(name, tkey, seed, windows, accum, out_dir):
    os.makedirs(out_dir)
    torch.manual_seed(seed)  # peft's default init: A kaiming-uniform from torch's RNG, B = 0
    pm = peft_model(load_base(name), TARGETS[tkey])
    save_adapter(pm, os.path.join(out_dir, "adapter_init"))
    params = [p for _, p in lora_params(pm)]
    log = run_adamw(pm, params, windows, accum)
    save_adapter(pm, os.path.join(out_dir, "adapter_final"))
    torch.manual_seed(seed)
    pm2 = peft_model(load_base(name), TARGETS[tkey])
    check = manual_check(log, params, pm2, [p for _, p in lora_params(pm2)], windows, accum)
    meta = adamw_meta(accum, "LoRA r=%d alpha=%d on %s, base frozen" % (LORA_R, LORA_ALPHA, ",".join(TARGETS[tkey])))
    meta.update({"model": name, "base": "%s/%s" % (MODELS, name), "init": "peft's default (torch.manual_seed(%d) "
                 "before get_peft_model): A kaiming-uniform, B = 0; start from adapter_init/ (--init-adapter)" % seed,
                 "final": "adapter_final/ (peft save_pretrained after step 10)", "log": log,
                 "manual_check": check})
    dump_json(meta, os.path.join(out_dir, "steps.json"))
    return log


def write_logits(path, rows):
    """MNFXLGT1 (tests/reference/README.md): magic, version 1, n_prompts, then n_tokens, n_vocab, f32 rows."""
    with open(path, "wb") as f:
        f.write(b"MNFXLGT1")
        f.write(struct.pack("<II", 1, len(rows)))
        for lg in rows:
            a = lg.detach().to(torch.float32).numpy()
            f.write(struct.pack("<II", a.shape[0], a.shape[1]))
            f.write(a.astype("<f4").tobytes())


def case_interop(name, tkey, seed, prompt_idx, out_dir):
    os.makedirs(out_dir)
    with open(os.path.join(MODELS, name, "reference.json"), encoding="utf-8") as f:
        ref = json.load(f)
    prompts = [ref["prompts"][i] for i in prompt_idx]
    pm = peft_model(load_base(name), TARGETS[tkey])
    seed_lora(pm, seed)
    save_adapter(pm, out_dir)
    # Reload the way a user would (PeftModel.from_pretrained on a fresh base) and take the logits from that.
    from peft import PeftModel
    re_m = PeftModel.from_pretrained(load_base(name), out_dir)
    re_m.eval()
    rows, base_rows = [], []
    base = load_base(name).eval()
    with torch.no_grad():
        for p in prompts:
            x = torch.tensor([p["ids"]], dtype=torch.long)
            rows.append(re_m(input_ids=x).logits[0].float())
            assert torch.equal(rows[-1], pm(input_ids=x).logits[0].float())
            base_rows.append(base(input_ids=x).logits[0].float())
    write_logits(os.path.join(out_dir, "logits.bin"), rows)
    dump_json({"model": name, "base": "%s/%s" % (MODELS, name), "targets": TARGETS[tkey], "r": LORA_R,
               "lora_alpha": LORA_ALPHA, "init_seed": seed,
               "prompts": [{"text": p["text"], "ids": p["ids"]} for p in prompts], "logits_file": "logits.bin",
               "logits": "PeftModel.from_pretrained(base, this dir)(ids).logits, every position, fp32, MNFXLGT1",
               "max_abs_diff_vs_base": max((a - b).abs().max().item() for a, b in zip(rows, base_rows))},
              os.path.join(out_dir, "reference.json"))


# ----------------------------------------------------------------------------------------------- main
def generate(out):
    import sentencepiece as spm
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.chdir(ROOT)
    os.makedirs(out)
    data_dir = os.path.join(out, "data")
    os.makedirs(data_dir)
    sp = spm.SentencePieceProcessor(model_file=TOKENIZER)
    windows = make_text(sp, data_dir)

    # The gradient batch: windows 0 and 1 of the stream (= step 0 of the G=1 runs).
    tokens = torch.tensor([windows[0], windows[1]], dtype=torch.long)
    dump_json({"format": "mnemo-train-batch", "version": 1, "batch": BATCH, "seq_len": SEQ_LEN,
               "windows": [0, 1], "tokens": tokens.tolist(),
               "notes": "tokens[b] = window b of data/train_ids.json (seq_len + 1 ids). The model reads "
                        "tokens[b][0..15] and predicts tokens[b][1..16]; loss = mean cross-entropy over the "
                        "32 predictions. The reference runs HF with input_ids = labels = tokens (17 ids): the "
                        "17th position's logits are outside the loss and, attention being causal, change "
                        "nothing else."},
              os.path.join(out, "batch.json"))

    summary = {"format": "mnemo-train-fixtures", "version": 1, "versions": versions(), "cases": {}}
    models = ["mha", "gqa", "tied", "rope_scaled", "bf16"]
    for i, name in enumerate(models):
        summary["cases"]["full/" + name] = case_full(name, tokens, os.path.join(out, "full", name))
    lora_cases = [("mha", "qv"), ("mha", "all"), ("gqa", "qv"), ("gqa", "all"), ("tied", "qv"),
                  ("rope_scaled", "qv"), ("bf16", "qv")]
    for i, (name, tkey) in enumerate(lora_cases):
        d = "lora/%s_%s" % (name, tkey)
        summary["cases"][d] = case_lora(name, tkey, 1800 + i, tokens, os.path.join(out, d))
    seed_all_mha = 1800 + lora_cases.index(("mha", "all"))
    summary["cases"]["lora_plus/mha"] = case_lora_plus("mha", seed_all_mha, tokens,
                                                       os.path.join(out, "lora_plus", "mha"))
    for accum in (1, 2):
        d = "adamw/full_mha_g%d" % accum
        log = case_adamw_full("mha", windows, accum, os.path.join(out, d), save_final=(accum == 1))
        summary["cases"][d] = [e["loss"] for e in log]
        d = "adamw/lora_mha_qv_g%d" % accum
        log = case_adamw_lora("mha", "qv", 1850, windows, accum, os.path.join(out, d))
        summary["cases"][d] = [e["loss"] for e in log]
    summary["cases"]["sgd/full_mha"] = [e["loss"] for e in case_sgd_full("mha", windows, os.path.join(out, "sgd", "full_mha"))]
    case_interop("mha", "all", 1860, [0, 2], os.path.join(out, "interop", "mha_all"))
    case_interop("gqa", "qv", 1861, [0], os.path.join(out, "interop", "gqa_qv"))
    dump_json(summary, os.path.join(out, "summary.json"))


def same_tree(a, b):
    da = sorted(os.path.relpath(os.path.join(r, f), a) for r, _, fs in os.walk(a) for f in fs)
    db = sorted(os.path.relpath(os.path.join(r, f), b) for r, _, fs in os.walk(b) for f in fs)
    bad = sorted(set(da) ^ set(db))
    bad += [f for f in sorted(set(da) & set(db)) if not filecmp.cmp(os.path.join(a, f), os.path.join(b, f),
                                                                   shallow=False)]
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "train"))
    ap.add_argument("--check", action="store_true", help="regenerate into a temp dir and compare bytes")
    args = ap.parse_args()
    out = os.path.abspath(args.out)
    tmp = tempfile.mkdtemp(prefix="mnemo-train-fix-")
    try:
        gen = os.path.join(tmp, "train")
        generate(gen)
        if args.check:
            bad = same_tree(gen, out)
            bad = [f for f in bad if f != "README.md"]  # hand-written
            print("identical" if not bad else "DIFFERENT: " + ", ".join(bad))
            return 1 if bad else 0
        readme = os.path.join(out, "README.md")
        keep = open(readme, encoding="utf-8").read() if os.path.exists(readme) else None
        if os.path.exists(out):
            shutil.rmtree(out)
        shutil.copytree(gen, out)
        if keep is not None:
            with open(readme, "w", encoding="utf-8") as f:
                f.write(keep)
        print("wrote", os.path.relpath(out, ROOT))
        return 0
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    sys.exit(main())
