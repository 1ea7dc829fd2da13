#!/usr/bin/env python3
"""End-to-end tests of `mnemo train`'s long-context methods (stdlib only; run by ctest).

- LongLoRA's recipe: --s2-attn --lora-plus --rope-scale 2 on a model with a 128-position window trains at seq_len
  256, writes config.json with rope_scaling linear 2 and max_position_embeddings 256; `mnemo export --merge` takes
  it, and the merged model generates from a prompt longer than the base's window (which the base refuses).
- A resume under other long-context settings is refused.
- --smt runs on text (loss = SMT + beta x plain), writes config.json with the documents' window, and refuses JSON
  lines; bad settings exit 2 with a message.
"""
import json
import os
import sys
import tempfile

from cli_harness import check, finish, runner

BIN = sys.argv[1]
FIX = sys.argv[2]
MODEL = os.path.join(FIX, "models", "gqa")


run = runner(BIN)


def losses(out):
    return [json.loads(l)["loss"] for l in out.splitlines() if l.strip() and '"step"' in l]


with tempfile.TemporaryDirectory() as td:
    text = os.path.join(td, "long.txt")
    with open(os.path.join(FIX, "train", "data", "train.txt")) as f:
        body = f.read()
    with open(text, "w") as f:
        f.write((body + "\n") * 8)
    base = ["train", "--model", MODEL, "--data", text, "--threads", "2", "--json", "--seed", "1"]

    # LongLoRA's recipe
    out_dir = os.path.join(td, "longlora")
    rc, out, err = run(*base, "--s2-attn", "--lora-plus", "--rope-scale", "2", "--seq-len", "256", "--steps", "2",
                       "--lora-targets", "q,k,v,o", "--out", out_dir)
    check(rc == 0 and len(losses(out)) == 2, f"recipe run: exit {rc} {err!r}")
    cfg = json.load(open(os.path.join(out_dir, "config.json"))) if rc == 0 else {}
    check(cfg.get("rope_scaling", {}).get("type") == "linear" and cfg["rope_scaling"].get("factor") == 2.0
          and cfg.get("max_position_embeddings") == 256, f"recipe config: {cfg.get('rope_scaling')}")
    merged = os.path.join(td, "merged")
    rc, _, err = run("export", "--model", MODEL, "--adapter", out_dir, "--merge", "--out", merged)
    check(rc == 0, f"export --merge: {err!r}")
    mcfg = json.load(open(os.path.join(merged, "config.json"))) if rc == 0 else {}
    check(mcfg.get("max_position_embeddings") == 256 and mcfg.get("rope_scaling", {}).get("factor") == 2.0,
          "the merged checkpoint carries the longer window")
    prompt = os.path.join(td, "prompt.txt")
    with open(prompt, "w") as f:
        f.write(body[:300])
    rc, out, err = run("tokenize", "--model", MODEL, "-f", prompt)
    n_prompt = len(out.split())
    check(128 < n_prompt < 250, f"the prompt is past the base's window and within the new one ({n_prompt} tokens)")
    rc, out, err = run("generate", "--model", merged, "-f", prompt, "-n", "4", "--temp", "0", "--ignore-eos")
    check(rc == 0, f"the merged model serves a {n_prompt}-token prompt: {err!r}")
    rc, out, err = run("generate", "--model", MODEL, "-f", prompt, "-n", "4", "--temp", "0")
    check(rc != 0 and "does not fit" in err, f"the base refuses it: {err!r}")

    # resume under other settings
    rc, _, err = run(*base, "--lora-plus", "--rope-scale", "2", "--seq-len", "256", "--steps", "2",
                     "--lora-targets", "q,k,v,o", "--out", out_dir, "--resume")
    check(rc != 0 and "resume" in err, f"resume without --s2-attn refused: {err!r}")

    # SMT
    rc, out, err = run(*base, "--smt", "--seq-len", "32", "--smt-memory", "192", "--steps", "2",
                       "--out", os.path.join(td, "smt"))
    ls = losses(out)
    check(rc == 0 and len(ls) == 2 and all(l > 6 for l in ls), f"SMT run (SMT + plain loss): {rc} {ls} {err!r}")
    scfg = json.load(open(os.path.join(td, "smt", "config.json"))) if rc == 0 else {}
    check(scfg.get("max_position_embeddings") == 192 + 32 + 1 - 16 and not scfg.get("rope_scaling"),
          f"SMT's config: the window of its documents, RoPE unchanged ({scfg.get('max_position_embeddings')})")
    rc, out, err = run(*base, "--smt", "--smt-beta", "0", "--seq-len", "32", "--smt-memory", "192", "--steps", "1",
                       "--out", os.path.join(td, "smt0"))
    check(rc == 0 and 0 < losses(out)[0] < ls[0], f"SMT with beta 0: the SMT loss alone {losses(out)}")
    jsonl = os.path.join(td, "d.jsonl")
    with open(jsonl, "w") as f:
        f.write('{"prompt": "a", "completion": "b"}\n')
    rc, _, err = run("train", "--model", MODEL, "--data", jsonl, "--smt", "--seq-len", "32", "--steps", "1",
                     "--out", os.path.join(td, "x1"))
    check(rc != 0 and "text file" in err, f"SMT on JSON lines refused: {err!r}")

    # bad settings: one message, exit 2
    for args, words in [(["--s2-attn", "--seq-len", "60"], "multiple of 8"),
                        (["--s2-attn", "--smt", "--seq-len", "32"], "choose one"),
                        (["--rope-scale", "0.5", "--seq-len", "32"], "rope-scale"),
                        (["--smt", "--seq-len", "32", "--smt-sampled", "40"], "sampled")]:
        rc, _, err = run(*base, *args, "--steps", "1", "--out", os.path.join(td, "bad"))
        check(rc == 2 and words in err and err.count("\n") == 1, f"{args}: exit {rc}, {err!r}")

finish()
