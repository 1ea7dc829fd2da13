#!/usr/bin/env python3
"""End-to-end tests of `mnemo train --fot` and `--init random` (stdlib only; run by ctest).

FoT cross-batch training of the LongLLaMA fixture (tests/fixtures/fot/model) in full and with LoRA: the run writes
a LongLLaMA checkpoint (config.json with mem_layers, model.safetensors) or an adapter that `mnemo generate` serves;
a checkpoint resumes only under the same schedule. --init random: the same seed writes the same bytes, another
seed other weights, transformers' init (std 0.02, norms 1, the pad row 0) and a first loss of ln(vocab). Bad input
(a plain model, a malformed schedule, too few documents for the negatives, --fot with --uio, --smt or --s2-attn,
--init without --config) refused with one clear message.
"""
import array
import json
import math
import os
import struct
import sys
import tempfile

from cli_harness import check, finish, runner

BIN = sys.argv[1]
FIX = sys.argv[2]
MODEL = os.path.join(FIX, "fot", "model")
DATA = os.path.join(FIX, "train", "data", "train.txt")
PAPER = "1/4(0,0),1/4(1,1),1/4(2,1),1/4(3,0)"
COMMON = ["train", "--data", DATA, "--batch", "2", "--seq-len", "8", "--lr", "1e-2", "--threads", "2", "--json"]


run = runner(BIN)


def steps_of(out):
    rows = [json.loads(l) for l in out.splitlines() if l.strip()]
    return [r for r in rows if "step" in r]


def read_safetensors(path):
    """{name: (shape, array('f'))} for the F32 tensors of a .safetensors file."""
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    out = {}
    for name, t in head.items():
        if name == "__metadata__" or t["dtype"] != "F32":
            continue
        a = array.array("f")
        a.frombytes(raw[8 + n + t["data_offsets"][0]: 8 + n + t["data_offsets"][1]])
        out[name] = (t["shape"], a)
    return out


with tempfile.TemporaryDirectory() as td:
    # ---- full fine-tuning with the paper's schedule: a LongLLaMA checkpoint the engine serves
    full = os.path.join(td, "full")
    rc, out, err = run(*COMMON, "--model", MODEL, "--out", full, "--full", "--fot", PAPER, "--steps", "4")
    steps = steps_of(out)
    check(rc == 0 and len(steps) == 4 and all(math.isfinite(s["loss"]) for s in steps), f"FoT full run: {rc} {err!r}")
    check(steps and steps[0]["tokens"] == 2 * 4 * 8, f"a step trains 2 documents x 4 contexts x 8 tokens: {steps[:1]}")
    with open(os.path.join(full, "config.json")) as f:
        cfg = json.load(f)
    check(cfg.get("mem_layers") == [1] and cfg.get("architectures") == ["LongLlamaForCausalLM"],
          "the output is a LongLLaMA checkpoint")
    rc, out, err = run("generate", "--model", full, "--prompt", "To be", "-n", "4", "--temp", "0")
    check(rc == 0, f"generate serves the FoT-trained checkpoint: {rc} {err!r}")
    # resume: the same schedule continues (here: nothing left), another schedule is refused
    rc, out, err = run(*COMMON, "--model", MODEL, "--out", full, "--full", "--fot", PAPER, "--steps", "4", "--resume")
    check(rc == 0, f"resume under the same schedule: {rc} {err!r}")
    rc, out, err = run(*COMMON, "--model", MODEL, "--out", full, "--full", "--fot", "1/2(0,0),1/2(1,1)", "--steps", "4",
                       "--resume")
    check(rc == 1 and "cannot resume" in err, f"resume under another schedule refused: {rc} {err!r}")

    # ---- LoRA with FoT: a peft adapter over the LongLLaMA model
    lora = os.path.join(td, "lora")
    rc, out, err = run(*COMMON, "--model", MODEL, "--out", lora, "--lora-targets", "all", "--fot", "1/2(0,0),1/2(1,1)",
                       "--steps", "3")
    check(rc == 0 and len(steps_of(out)) == 3 and os.path.exists(os.path.join(lora, "adapter_model.safetensors")),
          f"FoT LoRA run: {rc} {err!r}")
    rc, out, err = run("generate", "--model", MODEL, "--adapter", lora, "--prompt", "To be", "-n", "4", "--temp", "0")
    check(rc == 0, f"generate --adapter serves it: {rc} {err!r}")

    # ---- --init random
    conf = os.path.join(td, "tiny.json")
    with open(conf, "w") as f:
        json.dump({"architectures": ["LongLlamaForCausalLM"], "model_type": "longllama", "vocab_size": 512,
                   "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                   "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
                   "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "mem_layers": [1],
                   "mem_positionals": True, "last_context_length": 32}, f)
    tok = os.path.join(FIX, "tokenizer.model")
    runs = {}
    for name, seed in (("a", "7"), ("b", "7"), ("c", "8")):
        d = os.path.join(td, "rand_" + name)
        rc, out, err = run(*COMMON, "--init", "random", "--config", conf, "--tokenizer", tok, "--out", d, "--full",
                           "--fot", PAPER, "--steps", "2", "--seed", seed, "--seq-len", "16")
        check(rc == 0 and len(steps_of(out)) == 2, f"--init random run {name}: {rc} {err!r}")
        runs[name] = (d, steps_of(out))
    init = lambda n: open(os.path.join(runs[n][0], "init", "model.safetensors"), "rb").read()
    check(init("a") == init("b"), "the same seed writes the same random weights")
    check(init("a") != init("c"), "another seed writes other weights")
    w = read_safetensors(os.path.join(runs["a"][0], "init", "model.safetensors"))
    q = w["model.layers.0.self_attn.q_proj.weight"][1]
    std = math.sqrt(sum(x * x for x in q) / len(q))
    check(abs(std - 0.02) < 0.002 and abs(sum(q) / len(q)) < 0.002, f"projections ~ N(0, 0.02^2): std {std:.4f}")
    check(all(x == 1.0 for x in w["model.layers.1.input_layernorm.weight"][1]), "norms start at 1")
    emb = w["model.embed_tokens.weight"][1]
    check(all(x == 0.0 for x in emb[:32]) and any(x != 0.0 for x in emb[32:64]), "the pad token's embedding row is 0")
    check(len(w) == 1 + 2 * 9 + 2, f"{len(w)} tensors (embeddings, 2 x 9 per layer, norm, lm_head)")
    first = runs["a"][1][0]["loss"] if runs["a"][1] else 0
    check(abs(first - math.log(512)) < 0.05, f"the first loss of a random model is ln(vocab): {first}")
    check(os.path.exists(os.path.join(runs["a"][0], "tokenizer.model")), "the trained checkpoint has the tokenizer")
    # qk_norm: two head norms more per layer (head_dim 8, starting at 1), trained and served
    qconf = os.path.join(td, "tiny_qk.json")
    with open(conf) as f:
        qk = dict(json.load(f), qk_norm=True)
    with open(qconf, "w") as f:
        json.dump(qk, f)
    d = os.path.join(td, "rand_qk")
    rc, out, err = run(*COMMON, "--init", "random", "--config", qconf, "--tokenizer", tok, "--out", d, "--full",
                       "--fot", PAPER, "--steps", "2", "--seed", "7", "--seq-len", "16")
    check(rc == 0 and len(steps_of(out)) == 2, f"--init random with qk_norm: {rc} {err!r}")
    w0 = read_safetensors(os.path.join(d, "init", "model.safetensors"))
    check(len(w0) == 1 + 2 * 11 + 2 and list(w0["model.layers.1.self_attn.k_norm.weight"][1]) == [1.0] * 8,
          f"qk_norm init: {len(w0)} tensors, k_norm at 1")
    w2 = read_safetensors(os.path.join(d, "model.safetensors"))
    qn = list(w2["model.layers.0.self_attn.q_norm.weight"][1])
    check(len(qn) == 8 and qn != [1.0] * 8, f"qk_norm: the head norms are trained: {qn}")
    rc, out, err = run("generate", "--model", d, "--prompt", "To be", "-n", "4", "--temp", "0")
    check(rc == 0, f"generate serves the qk_norm model: {rc} {err!r}")

    # ---- refusals: one line naming the problem
    x = os.path.join(td, "x")
    cases = [
        (["--model", os.path.join(FIX, "models", "gqa"), "--out", x, "--fot", PAPER], 2, "mem_layers"),
        (["--model", MODEL, "--out", x, "--fot", "1/4(0,0)"], 2, "FoT schedule"),
        (["--model", MODEL, "--out", x, "--fot", "1/2(1,0),1/2(0,0)"], 2, "FoT schedule"),
        (["--model", MODEL, "--out", x, "--fot", "1/2(0,0),1/2(1,1)", "--batch", "1"], 2, "--batch"),
        (["--model", MODEL, "--uio", x, "--uio-chunk", "8", "--uio-num-memory", "2", "--fot", "1/2(0,0),1/2(1,1)"], 2,
         "--uio"),
        (["--model", MODEL, "--out", x, "--fot", "1/2(0,0),1/2(1,1)", "--smt"], 2, "--smt"),
        (["--model", MODEL, "--out", x, "--fot", "1/2(0,0),1/2(1,1)", "--s2-attn"], 2, "--s2-attn"),
        (["--init", "zeros", "--config", conf, "--tokenizer", tok, "--out", x], 2, "--init"),
        (["--init", "random", "--tokenizer", tok, "--out", x], 2, "--config"),
        (["--model", MODEL, "--config", conf, "--out", x], 2, "--init random"),
        (["--init", "random", "--config", os.path.join(td, "none.json"), "--tokenizer", tok, "--out", x], 1,
         "none.json"),
        (["--init", "random", "--config", conf, "--tokenizer", os.path.join(td, "none.model"), "--out", x], 1,
         "none.model"),
    ]
    for args, code, needle in cases:
        rc, out, err = run(*COMMON, *args)
        check(rc == code and needle in err and err.count("\n") == 1,
              f"{' '.join(args)}: exit {rc} (want {code}), {err!r} should name {needle!r} on one line")
    check(not os.path.exists(os.path.join(x, "train_state.mnemo")), "refused runs write no checkpoint")

finish()
