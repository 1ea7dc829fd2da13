#!/usr/bin/env python3
"""FoT cross-batch training on the CPU: tokens/s against the plain step and against PyTorch, and peak RSS at long
seq_len with and without --recompute.

  python3 tests/bench/bench_fot.py speed [--seq-len 1024] [--pairs 3] [--steps 4] [--threads 2] [--jsonl FILE]
  python3 tests/bench/bench_fot.py rss [--seq-lens 2048,8192,32768] [--threads 2] [--jsonl FILE]

Models: random LongLLaMA-layout checkpoints made by `mnemo train --init random` (vocab 512: the fixture tokenizer;
rope_theta 1e4; max_position_embeddings 32768), cached in --workdir:
  speed  hidden 256, ffn 688, 4 layers, 4 heads x 64, mem_layers [2]; --fot 1/4(0,0),1/4(1,1),1/4(2,1),1/4(3,0)
         (LongLLaMA-3B's), --batch 2 documents = 8 rows of seq_len per step
  rss    hidden 64, ffn 172, 2 layers, 2 heads x 32, mem_layers [1]; --fot 1/2(0,0),1/2(1,0), --batch 1 document =
         2 rows of seq_len (the second sees the first whole: 3 seq_len^2 / 2 attention pairs per memory layer)
Data: bench_train.py's deterministic pseudo-English corpus (2 MiB; rss: its first 400 kB, so that tokenizing the
data does not set the peak). Full fine-tuning, AdamW, shuffle off.

speed: per pair, three runs in alternation, each its own child process: mnemo --fot, mnemo without --fot (the plain
step on the same number of rows and tokens), torch doing the FoT step (tests/bench/torch_fot_worker.py in the train
venv; the same cut of the data, so step 1's losses agree). tokens/s from each side's per-step elapsed_s after the
--warmup steps, as bench_train.py. rss: one run per (seq_len, recompute) of --steps 1 (RSS is reached in the
first step); peak RSS = the child's ru_maxrss (os.wait4); mnemo's own activation figure from its stderr line.
The load average is printed at the start and end of every run (a 2-core machine shared with other builds is noisy).
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import bench_train  # noqa: E402  (corpus and child-process helpers)

TOK = os.path.join(ROOT, "tests", "fixtures", "tokenizer.model")
MODELS = {
    "speed": dict(hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=4, mem_layers=[2],
                  fot="1/4(0,0),1/4(1,1),1/4(2,1),1/4(3,0)", batch=2),
    "rss": dict(hidden_size=64, intermediate_size=172, num_hidden_layers=2, num_attention_heads=2, mem_layers=[1],
                fot="1/2(0,0),1/2(1,0)", batch=1),
}


def log(msg):
    print(msg, flush=True)


def make_model(o, name):
    """A random LongLLaMA checkpoint via mnemo's --init random (kept in the workdir)."""
    spec = MODELS[name]
    d = os.path.join(o.workdir, "model_" + name)
    if os.path.exists(os.path.join(d, "init", "model.safetensors")):
        return os.path.join(d, "init")
    cfg = {"architectures": ["LongLlamaForCausalLM"], "model_type": "longllama", "vocab_size": 512,
           "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
           "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
           "mem_positionals": True, "last_context_length": 1024,
           **{k: v for k, v in spec.items() if k not in ("fot", "batch")}}
    os.makedirs(o.workdir, exist_ok=True)
    conf = os.path.join(o.workdir, name + "_config.json")
    with open(conf, "w") as f:
        json.dump(cfg, f)
    shutil.rmtree(d, ignore_errors=True)
    r = subprocess.run([o.mnemo, "train", "--init", "random", "--config", conf, "--tokenizer", TOK, "--seed", "1",
                        "--data", o.corpus, "--out", d, "--full", "--steps", "1", "--seq-len", "16", "--lr", "0"],
                       capture_output=True, text=True)
    if r.returncode:
        raise SystemExit("making the %s model: %s" % (name, r.stderr))
    return os.path.join(d, "init")


def run(o, cmd, tag):
    load0 = os.getloadavg()
    steps, final, rc, rss, wall = bench_train.run_child(cmd, o.threads, o.timeout, os.path.join(o.logs, tag + ".log"))
    with open(os.path.join(o.logs, tag + ".log"), errors="replace") as f:
        err = f.read()
    if rc != 0 or not steps:
        raise SystemExit("%s: rc %d, %d steps; %s\n%s" % (tag, rc, len(steps), " ".join(cmd), err[-2000:]))
    m = re.search(r"activations ([0-9.]+) MiB", err)
    return {"tag": tag, "steps": steps, "rss_mib": rss / 1024, "wall_s": round(wall, 1), "load_start": load0,
            "load_end": os.getloadavg(), "act_mib": float(m.group(1)) if m else None, "cmd": cmd}


def speed(o, save):
    spec, model = MODELS["speed"], make_model(o, "speed")
    K = 4
    rows, T = spec["batch"] * K, o.seq_len
    common = ["--model", model, "--data", o.corpus, "--full", "--steps", str(o.steps), "--seq-len", str(T),
              "--lr", "1e-4", "--shuffle", "0", "--threads", str(o.threads), "--json"]
    py = os.path.join(o.venv, "bin", "python")
    res = {"fot": [], "plain": [], "torch": []}
    for pair in range(o.pairs):
        cmds = {
            "fot": [o.mnemo, "train", *common, "--fot", spec["fot"], "--batch", str(spec["batch"]),
                    "--out", os.path.join(o.workdir, "out_fot")],
            "plain": [o.mnemo, "train", *common, "--batch", str(rows), "--out", os.path.join(o.workdir, "out_plain")],
            "torch": [py, os.path.join(HERE, "torch_fot_worker.py"), "--model", model, "--data", o.corpus,
                      "--fot", spec["fot"], "--steps", str(o.steps), "--batch", str(spec["batch"]), "--seq-len",
                      str(T), "--lr", "1e-4", "--threads", str(o.threads)],
        }
        for side, cmd in cmds.items():
            for p in ("out_fot", "out_plain"):
                shutil.rmtree(os.path.join(o.workdir, p), ignore_errors=True)
            r = run(o, cmd, "speed_%s_%d" % (side, pair))
            r["tok_s"] = bench_train.tok_per_s(r["steps"], o.warmup, rows * T)
            r.update(side=side, pair=pair, seq_len=T, loss1=r["steps"][0]["loss"])
            res[side].append(r)
            save({k: v for k, v in r.items() if k != "steps"})
            log("pair %d %-5s %8.1f tok/s  peak RSS %7.1f MiB  step-1 loss %.6f  wall %5.1f s  load %.2f -> %.2f"
                % (pair, side, r["tok_s"] or 0, r["rss_mib"], r["loss1"], r["wall_s"], r["load_start"][0],
                   r["load_end"][0]))
        f, p, t = res["fot"][-1], res["plain"][-1], res["torch"][-1]
        ratio = {"pair": pair, "fot_over_plain": f["tok_s"] / p["tok_s"], "fot_over_torch": f["tok_s"] / t["tok_s"],
                 "rss_fot_over_torch": f["rss_mib"] / t["rss_mib"],
                 "loss1_rel_diff": abs(f["loss1"] - t["loss1"]) / abs(t["loss1"])}
        save(ratio)
        log("pair %d: FoT/plain tokens/s %.2fx, mnemo/torch (FoT) %.2fx, RSS mnemo/torch %.2fx, step-1 loss rel diff "
            "%.1e" % (pair, ratio["fot_over_plain"], ratio["fot_over_torch"], ratio["rss_fot_over_torch"],
                      ratio["loss1_rel_diff"]))


def rss(o, save):
    spec, model = MODELS["rss"], make_model(o, "rss")
    # The corpus's first 400 kB (~150k ids, two contexts of 32K and more): the whole 2 MiB file's tokenization alone
    # takes ~190 MiB of RSS, which would hide the activations being measured.
    data = os.path.join(o.workdir, "corpus_400k.txt")
    with open(o.corpus, "rb") as f, open(data, "wb") as g:
        g.write(f.read(400000))
    for L in [int(x) for x in o.seq_lens.split(",") if x]:
        for rec in (False, True):
            out = os.path.join(o.workdir, "out_rss")
            shutil.rmtree(out, ignore_errors=True)
            cmd = [o.mnemo, "train", "--model", model, "--data", data, "--full", "--fot", spec["fot"], "--batch",
                   str(spec["batch"]), "--seq-len", str(L), "--steps", "1", "--lr", "1e-4", "--shuffle", "0",
                   "--threads", str(o.threads), "--json", "-v", "--out", out] + (["--recompute"] if rec else [])
            r = run(o, cmd, "rss_%d_%s" % (L, "rec" if rec else "keep"))
            r.update(seq_len=L, recompute=rec, loss1=r["steps"][0]["loss"], step_s=r["steps"][0]["elapsed_s"])
            save({k: v for k, v in r.items() if k != "steps"})
            log("seq_len %6d %-12s peak RSS %8.1f MiB  activations %8.1f MiB  step %7.1f s  load %.2f -> %.2f" % (
                L, "--recompute" if rec else "(keep all)", r["rss_mib"], r["act_mib"] or 0, r["step_s"],
                r["load_start"][0], r["load_end"][0]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("mode", choices=["speed", "rss"])
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--seq-lens", default="2048,8192,32768")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--mnemo", default=os.path.join(ROOT, "build", "mnemo"))
    ap.add_argument("--venv", default=os.path.join(ROOT, "build", "train-venv"))
    ap.add_argument("--workdir", default=os.path.join(os.path.expanduser("~"), ".cache", "mnemo-bench-fot"))
    ap.add_argument("--jsonl")
    o = ap.parse_args()
    os.makedirs(o.workdir, exist_ok=True)
    o.logs = os.path.join(o.workdir, "logs")
    os.makedirs(o.logs, exist_ok=True)
    o.corpus = os.path.join(o.workdir, "corpus.txt")
    if not os.path.exists(o.corpus):
        bench_train.make_corpus(o.corpus, bench_train.CORPUS_BYTES, bench_train.CORPUS_SEED)
    jsonl = open(o.jsonl, "a") if o.jsonl else None

    def save(row):
        if jsonl:
            jsonl.write(json.dumps(row) + "\n")
            jsonl.flush()

    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    head = {"bench": "fot_" + o.mode, "date": time.strftime("%Y-%m-%d %H:%M:%S"), "commit": commit,
            "cores": os.cpu_count(), "threads": o.threads, "loadavg_start": os.getloadavg(),
            "model": MODELS[o.mode], "seq_len": o.seq_len if o.mode == "speed" else o.seq_lens}
    save(head)
    log("FoT %s bench %s, commit %s, %d cores, %d threads; load average %.2f %.2f %.2f" % (
        o.mode, head["date"], commit, os.cpu_count(), o.threads, *head["loadavg_start"]))
    (speed if o.mode == "speed" else rss)(o, save)
    end = os.getloadavg()
    save({"loadavg_end": end})
    log("load average at end %.2f %.2f %.2f" % end)
    if jsonl:
        jsonl.close()


if __name__ == "__main__":
    main()
