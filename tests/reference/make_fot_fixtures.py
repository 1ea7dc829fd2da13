#!/usr/bin/env python3
"""Fixtures of one FoT cross-batch training step from tests/reference/fot_ref.py.
Run by hand (never in CI), from the repository root:

    build/train-venv/bin/python tests/reference/make_fot_fixtures.py [--check]

Writes tests/fixtures/fot/:
  model/     a tiny LongLLaMA-layout checkpoint: config.json (LongLlamaForCausalLM, mem_layers [1] of 3, hidden 8,
             2 heads x 4, inter 16, vocab 512 with tests/fixtures/tokenizer.model, max_position_embeddings 16),
             model.safetensors (fp32, random: make_longllama_fixtures.py's recipe), tokenizer.model
  model_nopos/  the same weights with mem_positionals false (memory layers apply no RoPE)
  model_qknorm/ the same weights with qk_norm true and each layer's self_attn.q_norm / k_norm [head_dim]
  <case>/grads.safetensors   the gradient of the step's loss for every parameter (fp32, HF names)
  <case>/case.json           {"format": "mnemo-fot-fixture", "version": 1, "model", "schedule", "seq_len", "docs"
             ([D][K*seq_len + 1] ids), "loss" (fp32 repr), "loss_fp64", "max_rel_err_fp32_vs_fp64" (torch's own fp32
             error: max over tensors of max|g32 - g64| / max|g64|), "torch"}
Cases (seq_len 8, D documents): d0 "1(0,0)" (no extra context: the plain step), d1 "1/2(0,0),1/2(1,0)" (one
positive), d2 "1/2(0,0),1/2(1,1)" (a positive and a negative), paper "1/4(0,0),1/4(1,1),1/4(2,1),1/4(3,0)"
(LongLLaMA-3B's, d up to 3, 3 documents), nopos: paper's schedule on model_nopos, lora: paper's schedule with a
LoRA adapter (r 2, scale 2, all seven targets, B non-zero; lora/adapter.safetensors, "<module>.lora_A" [r, in] and
"<module>.lora_B" [out, r]) over the frozen model — grads.safetensors then holds the adapter's gradients; mirror and
shared: mirrored negatives (shared: every document's row j sees rows 0..j-1 of all three).
--check: regenerate into a temporary directory and compare bytes with the committed files.
"""
import argparse
import filecmp
import json
import os
import shutil
import sys
import tempfile

import torch
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fot_ref  # noqa: E402
import longllama_ref  # noqa: E402
import make_longllama_fixtures as mlf  # noqa: E402

ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
SPEC = dict(hidden_size=8, intermediate_size=16, num_hidden_layers=3, num_attention_heads=2, max_position_embeddings=16,
            mem_layers=[1], last_context_length=8, mem_dtype="bfloat16", mem_positionals=True, rope_theta=10000.0)
T = 8
CASES = [  # name, model, schedule, documents
    ("d0", "model", "1(0,0)", 2),
    ("d1", "model", "1/2(0,0),1/2(1,0)", 2),
    ("d2", "model", "1/2(0,0),1/2(1,1)", 2),
    ("paper", "model", "1/4(0,0),1/4(1,1),1/4(2,1),1/4(3,0)", 3),
    ("nopos", "model_nopos", "1/4(0,0),1/4(1,1),1/4(2,1),1/4(3,0)", 3),
    ("lora", "model", "1/4(0,0),1/4(1,1),1/4(2,1),1/4(3,0)", 3),
    # mirrored negatives: rows 1-3 also see the documents before theirs at the same contexts; row 3's (3,2,1) lists
    # row 2 of the previous document both as a tail negative and as a mirrored one: seen once
    ("mirror", "model", "1/4(0,0),1/4(1,0,1),1/4(2,1,2),1/4(3,2,1)", 3),
    # qk_norm: every layer's q and k heads RMS-normalized (weights 1 + 0.3 N(0,1)), the paper's schedule
    ("qknorm", "model_qknorm", "1/4(0,0),1/4(1,1),1/4(2,1),1/4(3,0)", 3),
    # shared: row j of every document sees rows 0..j-1 of all three (the proof's recipe): mnemo computes each
    # context's extras once for a group of three rows (fot_attention.c)
    ("shared", "model_qknorm", "1/4(0,0),1/4(1,0,2),1/4(2,0,2),1/4(3,0,2)", 3),
]
LORA_R, LORA_SCALE = 2, 2.0  # peft's r 2, lora_alpha 4


def make_lora(cfg_json, seed):
    """{module: (A [r, in], B [out, r])} on all seven targets of every layer; B non-zero so every gradient is."""
    g = torch.Generator().manual_seed(seed)
    D, I = cfg_json["hidden_size"], cfg_json["intermediate_size"]
    shapes = {"q_proj": (D, D), "k_proj": (D, D), "v_proj": (D, D), "o_proj": (D, D), "gate_proj": (I, D),
              "up_proj": (I, D), "down_proj": (D, I)}
    out = {}
    for i in range(cfg_json["num_hidden_layers"]):
        for t in fot_ref.LORA_TARGETS:
            o, n = shapes[t]
            mod = f"model.layers.{i}.{'mlp' if t in ('gate_proj', 'up_proj', 'down_proj') else 'self_attn'}.{t}"
            out[mod] = (torch.randn(LORA_R, n, generator=g) / n ** 0.5, torch.randn(o, LORA_R, generator=g) * 0.3)
    return out


def write_model(out, name, cfg_json, weights):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg_json, f, indent=1)
        f.write("\n")
    save_file({k: v.contiguous() for k, v in sorted(weights.items())}, os.path.join(d, "model.safetensors"),
              metadata={"format": "pt"})
    shutil.copyfile(mlf.TOK, os.path.join(d, "tokenizer.model"))


def generate(out):
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    cfg_json = mlf.hf_config(SPEC)
    weights = mlf.make_weights(cfg_json, seed=2101)
    nopos_json = dict(cfg_json, mem_positionals=False)
    write_model(out, "model", cfg_json, weights)
    write_model(out, "model_nopos", nopos_json, weights)
    qk_json = dict(cfg_json, qk_norm=True)
    g = torch.Generator().manual_seed(2401)
    qk_weights = dict(weights)
    for i in range(cfg_json["num_hidden_layers"]):
        for n in ("q_norm", "k_norm"):
            qk_weights[f"model.layers.{i}.self_attn.{n}.weight"] = 1.0 + 0.3 * torch.randn(SPEC["hidden_size"] // SPEC[
                "num_attention_heads"], generator=g)
    write_model(out, "model_qknorm", qk_json, qk_weights)
    cfgs = {"model": longllama_ref.Config(cfg_json), "model_nopos": longllama_ref.Config(nopos_json),
            "model_qknorm": longllama_ref.Config(qk_json)}
    model_weights = {"model": weights, "model_nopos": weights, "model_qknorm": qk_weights}
    lora = make_lora(cfg_json, seed=2301)
    for ci, (name, model, schedule, D) in enumerate(CASES):
        K, _ = fot_ref.parse_schedule(schedule)
        docs = [mlf.rand_ids(2200 + 10 * ci + g, K * T + 1) for g in range(D)]
        ad = lora if name == "lora" else None
        mw = model_weights[model]
        loss, grads = fot_ref.step(cfgs[model], mw, docs, schedule, T, lora=ad, lora_scale=LORA_SCALE)
        loss64, grads64 = fot_ref.step(cfgs[model], mw, docs, schedule, T, dtype=torch.float64, lora=ad,
                                       lora_scale=LORA_SCALE)
        rel = max(float((grads[n].double() - grads64[n]).abs().max() / grads64[n].abs().max().clamp_min(1e-300))
                  for n in grads)
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        save_file({n: g.contiguous() for n, g in sorted(grads.items())}, os.path.join(d, "grads.safetensors"),
                  metadata={"format": "pt"})
        if ad:
            save_file({n + suf: t.contiguous() for n, ab in sorted(ad.items()) for suf, t in zip((".lora_A", ".lora_B"), ab)},
                      os.path.join(d, "adapter.safetensors"), metadata={"format": "pt"})
        with open(os.path.join(d, "case.json"), "w") as f:
            json.dump({"format": "mnemo-fot-fixture", "version": 1, "model": model, "schedule": schedule,
                       "seq_len": T, "docs": docs, "loss": repr(float(loss)), "loss_fp64": float(loss64),
                       "max_rel_err_fp32_vs_fp64": float(f"{rel:.3g}"), "torch": torch.__version__.split("+")[0],
                       **({"lora_r": LORA_R, "lora_scale": LORA_SCALE} if ad else {})},
                      f, indent=1)
            f.write("\n")
        print(f"{name:6s} {schedule:38s} loss {float(loss):.7f}  fp32 vs fp64 {rel:.2e}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    dest = os.path.join(ROOT, "tests", "fixtures", "fot")
    if not a.check:
        generate(dest)
        return
    with tempfile.TemporaryDirectory() as tmp:
        generate(tmp)
        cmp = filecmp.dircmp(tmp, dest)
        bad = []

        def walk(c, p):
            bad.extend(os.path.join(p, x) for x in c.diff_files + c.left_only + c.right_only)
            for s, sub in c.subdirs.items():
                walk(sub, os.path.join(p, s))
        walk(cmp, "")
        print("identical" if not bad else f"differ: {bad}")
        sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
