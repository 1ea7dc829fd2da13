#!/usr/bin/env python3
"""CPU training throughput and peak memory, mnemo against PyTorch on the same model, data and threads.

  python3 tests/bench/bench_train.py [--cases lora3b,fullsmall] [--batch 1,4] [--steps 6] [--pairs 3] \\
      [--threads 2] [--seq-len 512] [--mnemo build/mnemo] [--venv build/train-venv] [--jsonl FILE] [--only torch]
      [--device cuda --only mnemo --peak-tflops P]

Cases (random fp32 weights, a 8000-piece SentencePiece BPE tokenizer trained on the benchmark's corpus):
  lora3b     LongLLaMA-3B's layer shape (LlamaForCausalLM: hidden 3200, ffn 8640, 32 heads x head_dim 100) with 4
             layers and vocab 8000 (547M parameters, 2.2 GB): LoRA r 8, alpha 16 on q,v, the base frozen
  fullsmall  hidden 512, ffn 1376, 8 heads x 64, 4 layers, vocab 8000 (20.8M parameters): full fine-tuning
Each (case, batch) runs --pairs times as an alternating pair, mnemo then torch (A B A B ...), every run its own child
process: `build/mnemo train ... --json` and tests/bench/torch_train_worker.py in the venv of
tests/reference/setup_train_venv.sh, both given the same model directory, data file, seed and thread count
(--threads, and OMP/OPENBLAS/MKL_NUM_THREADS in the environment). Both do the same work: AdamW (0.9/0.999, eps 1e-8,
weight decay 0), clip 1.0, constant lr, shuffle off, windows of seq_len + 1 ids.

Measured: tokens/s = B * seq_len * (steps - warmup) / (elapsed_s at the last step - elapsed_s at step `warmup`),
from each side's own per-step timestamps (the first --warmup steps are skipped identically on both sides; loading
is not counted); peak RSS = the child's ru_maxrss from os.wait4 (per child, KiB on Linux). Printed: one line per
run, per-pair ratios (mnemo/torch tokens/s, RSS), the load average at start and end, and a markdown table for
tests/bench/RESULTS.md. Step 1's loss is compared across the sides (same model, same ids: they agree to ~1e-5 unless
the data or tokenizer differ). The corpus is deterministic pseudo-English (seeded; no file needed); checkpoints
and corpus are cached in --workdir (outside git, never committed). Stdlib only; the venv is needed for the torch side
and to make the checkpoints once.
On a GPU: `--device cuda --only mnemo` (mnemo train --device cuda; torch here is CPU-only, so no pairs) with
`--peak-tflops P`, the cuBLAS GEMM peak bench_cuda measures in the same session, adds MFU = model FLOP/s / P per run.
A machine without the venv reuses the checkpoints of one that has it: copy --workdir. The cases' weights are fp32
(fp32 GEMMs on the device); for the bf16 figure convert them first (scripts/safetensors_bf16.py).
"""
import argparse
import bisect
import hashlib
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
WORKER = os.path.join(ROOT, "tests", "bench", "torch_train_worker.py")
STAMP_VERSION = 1
VOCAB = 8000
CORPUS_BYTES = 2 << 20        # ~510k ids with the 8000-piece tokenizer: ~1000 windows of 513
CORPUS_SEED = 2026

# One place for each case's shape and its training flags (the same on both sides).
CASES = {
    "lora3b": dict(
        what="LongLLaMA-3B layer shape, 4 layers, vocab 8000; LoRA r 8 alpha 16 on q,v",
        config=dict(hidden_size=3200, intermediate_size=8640, num_hidden_layers=4, num_attention_heads=32,
                    num_key_value_heads=32, head_dim=100, vocab_size=VOCAB, max_position_embeddings=2048,
                    rms_norm_eps=1e-6),
        train=["--lora-rank", "8", "--lora-alpha", "16", "--lora-targets", "q,v"]),
    "fullsmall": dict(
        what="hidden 512, ffn 1376, 8 heads x 64, 4 layers, vocab 8000; full fine-tuning",
        config=dict(hidden_size=512, intermediate_size=1376, num_hidden_layers=4, num_attention_heads=8,
                    num_key_value_heads=8, head_dim=64, vocab_size=VOCAB, max_position_embeddings=2048,
                    rms_norm_eps=1e-5),
        train=["--full"]),
    # rows of whole 256-blocks for the k-quants (q4_K: bench_vs_llamacpp.py), about lora3b's size; not a training
    # case of this script's defaults
    "k256": dict(
        what="hidden 3072, ffn 8192, 24 heads x 128, 4 layers, vocab 8000 (rows of whole 256-blocks)",
        config=dict(hidden_size=3072, intermediate_size=8192, num_hidden_layers=4, num_attention_heads=24,
                    num_key_value_heads=24, head_dim=128, vocab_size=VOCAB, max_position_embeddings=2048,
                    rms_norm_eps=1e-6),
        train=["--lora-rank", "8", "--lora-alpha", "16", "--lora-targets", "q,v"]),
}

# Pseudo-English: real function words at the top of a Zipf distribution, then seeded syllable words.
FUNCTION_WORDS = ("the of and to in is was that for on with as by at from his her they this which but not are had "
                  "have were one all their there been has when who will more no if out so said what up its about "
                  "into than them can only other new some could time these two may then do first any my now such "
                  "like our over man me even most made after also did many before must through back years where "
                  "much your way well down should because each just those people how too little good very make "
                  "world still own").split()
ONSETS = ["", "b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "y", "z", "th",
          "st", "br", "ch", "sh", "gr", "pl", "cr", "tr", "fl", "wh", "sp"]
VOWELS = ["a", "e", "i", "o", "u", "a", "e", "i", "o", "ai", "ea", "ou", "ee", "oo", "ie", "y"]
CODAS = ["", "", "", "n", "r", "s", "t", "l", "nd", "st", "ng", "ck", "m", "rd", "nt", "ll", "sh"]


def log(msg):
    print(msg, flush=True)


def make_corpus(path, n_bytes, seed):
    """Deterministic text (only random.Random.random() is used: the same bytes on every Python 3)."""
    rng = random.Random(seed)

    def pick(seq):
        return seq[int(rng.random() * len(seq))]

    words, seen = list(FUNCTION_WORDS), set(FUNCTION_WORDS)
    while len(words) < 12000:
        w = "".join(pick(ONSETS) + pick(VOWELS) + pick(CODAS) for _ in range(1 + int(rng.random() * 3)))
        if len(w) > 1 and w not in seen:
            seen.add(w)
            words.append(w)
    cum, tot = [], 0.0
    for rank in range(len(words)):
        tot += 1.0 / (rank + 2.7)
        cum.append(tot)
    out, size = [], 0
    while size < n_bytes:
        sent = []
        for i in range(4 + int(rng.random() * 15)):
            w = words[min(bisect.bisect(cum, rng.random() * tot), len(words) - 1)]
            if i == 0:
                w = w.capitalize()
            elif rng.random() < 0.03:
                w = str(int(rng.random() * 2000))
            sent.append(w + ("," if rng.random() < 0.08 else ""))
        line = " ".join(sent).rstrip(",") + pick(".....?!") + ("\n" if rng.random() < 0.3 else " ")
        out.append(line)
        size += len(line)
    text = "".join(out)[:n_bytes].rsplit(" ", 1)[0] + ".\n"
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(text)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def venv_run(py, args, what):
    t0 = time.time()
    r = subprocess.run([py, WORKER, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise SystemExit("%s failed (rc %d):\n%s" % (what, r.returncode, r.stderr[-4000:]))
    return json.loads(r.stdout.strip().splitlines()[-1]), time.time() - t0


def prepare(o, py, cases):
    """corpus.txt, tokenizer.model and one model dir per case in the workdir, each remade only when its stamp
    (what it was made from) changes. Returns (corpus path, {case: model dir})."""
    os.makedirs(o.workdir, exist_ok=True)
    corpus = os.path.join(o.workdir, "corpus.txt")
    stamp_path = os.path.join(o.workdir, "stamp.json")
    stamps = {}

    def save_stamps():
        with open(stamp_path, "w", encoding="utf-8") as f:
            json.dump(stamps, f, indent=1)

    if os.path.exists(stamp_path):
        with open(stamp_path, encoding="utf-8") as f:
            stamps = json.load(f)
    want = {"version": STAMP_VERSION, "bytes": CORPUS_BYTES, "seed": CORPUS_SEED}
    if stamps.get("corpus") != want or not os.path.exists(corpus):
        make_corpus(corpus, CORPUS_BYTES, CORPUS_SEED)
        stamps = {"corpus": want}
        save_stamps()
        log("made %s (%d bytes, sha256 %s)" % (corpus, os.path.getsize(corpus), sha256(corpus)[:16]))
    tok = os.path.join(o.workdir, "tokenizer.model")
    want = {"version": STAMP_VERSION, "corpus": sha256(corpus), "vocab": VOCAB}
    if stamps.get("tokenizer") != want or not os.path.exists(tok):
        if py is None:
            raise SystemExit("the tokenizer must be made once with the venv's python: give --venv")
        r, dt = venv_run(py, ["tokenizer", "--corpus", corpus, "--vocab", str(VOCAB), "--out", tok],
                         "training the tokenizer")
        stamps = {"corpus": stamps["corpus"], "tokenizer": want}
        save_stamps()
        log("made %s (vocab %d) in %.1f s" % (tok, r["vocab"], dt))
    dirs = {}
    for name in cases:
        d = os.path.join(o.workdir, "models", name)
        want = {"version": STAMP_VERSION, "config": CASES[name]["config"], "tokenizer": sha256(tok), "seed": o.seed}
        if stamps.get("model_" + name) != want or not os.path.exists(os.path.join(d, "config.json")):
            if py is None:
                raise SystemExit("the checkpoints must be made once with the venv's python: give --venv")
            shutil.rmtree(d, ignore_errors=True)
            r, dt = venv_run(py, ["model", "--config", json.dumps(CASES[name]["config"]), "--tokenizer", tok,
                                  "--seed", str(o.seed), "--threads", str(o.threads), "--out", d],
                             "making the %s checkpoint" % name)
            stamps["model_" + name] = want
            save_stamps()
            log("made %s (%.1fM parameters, fp32) in %.1f s" % (d, r["params"] / 1e6, dt))
        dirs[name] = d
    return corpus, dirs


def run_child(cmd, threads, timeout, log_path):
    """Runs one training child; returns (step rows, final row, rc, peak RSS KiB, wall s). Its stderr goes to
    log_path. The peak RSS is the child's own (os.wait4), not the maximum over all children so far."""
    env = dict(os.environ)
    for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[k] = str(threads)
    t0 = time.time()
    with open(log_path, "w", encoding="utf-8") as err:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
        timer = threading.Timer(timeout, p.kill)
        timer.start()
        steps, final = [], None
        for line in p.stdout:
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if row.get("done"):
                final = row
            elif "step" in row:
                steps.append(row)
        p.stdout.close()
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        timer.cancel()
    return steps, final, p.returncode, ru.ru_maxrss, time.time() - t0


def flops_per_token(case, seq_len):
    """Model FLOPs per trained token, counted the usual way (2 per multiply-add; norms, activations, softmax and the
    optimizer left out). Forward: 2 x the matmul weights (projections, MLP, lm_head; the embedding is a lookup) plus
    causal attention, 2 * seq_len * n_heads * head_dim per layer (QK^T and PV over seq_len/2 keys on average).
    Backward: full fine-tuning 2 x forward (input and weight gradients); LoRA 1 x forward (input gradients only, the
    base frozen; the rank-r adapters are negligible). A yardstick for how near each side runs to the machine's
    sgemm rate, not a measurement."""
    c = CASES[case]["config"]
    h, f, n, hd = c["hidden_size"], c["intermediate_size"], c["num_attention_heads"], c["head_dim"]
    kv = c["num_key_value_heads"]
    weights = c["num_hidden_layers"] * (2 * h * n * hd + 2 * h * kv * hd + 3 * h * f) + h * c["vocab_size"]
    fwd = 2 * weights + c["num_hidden_layers"] * 2 * seq_len * n * hd
    return fwd * (3 if "--full" in CASES[case]["train"] else 2)


def tok_per_s(steps, warmup, tokens_per_step):
    """B*L*(n - warmup) over the elapsed_s difference between the last step and step `warmup` (>= 1)."""
    if len(steps) <= warmup:
        return None
    dt = steps[-1]["elapsed_s"] - steps[warmup - 1]["elapsed_s"]
    return tokens_per_step * (len(steps) - warmup) / dt if dt > 0 else None


def check_mnemo(path):
    """None when `mnemo train` looks usable, else why not."""
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        return "no executable at %s (build it: cmake --build build --target mnemo)" % path
    try:
        r = subprocess.run([path, "train", "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=30)
    except subprocess.TimeoutExpired:
        return "`%s train --help` did not return in 30 s" % path
    if "--lora-rank" not in r.stdout or "--full" not in r.stdout:
        return "`%s train --help` does not list --lora-rank/--full (no train command in this build?): %s" % (
            path, r.stdout.strip()[:300])
    return None


def fmt_range(xs, f="%.1f"):
    if not xs:
        return "—"
    if len(xs) == 1:
        return f % xs[0]
    return (f + " (" + f + "–" + f + ")") % (statistics.median(xs), min(xs), max(xs))


def mfu(gflop_s, peak_tflops):
    """Model FLOP utilisation: model GFLOP/s (flops_per_token's count) over the peak the caller measured (TFLOP/s),
    e.g. bench_cuda's cuBLAS bf16 GEMM peak in the same session; None without one."""
    return gflop_s / (peak_tflops * 1e3) if gflop_s and peak_tflops else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--cases", default="lora3b,fullsmall", help="comma list of " + ", ".join(CASES))
    ap.add_argument("--batch", default="1,4", help="comma list of batch sizes")
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--steps", type=int, default=6, help="optimizer steps per run, warm-up included")
    ap.add_argument("--warmup", type=int, default=1, help="first steps left out of tokens/s, on both sides (>= 1)")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--mnemo", default=os.path.join(ROOT, "build", "mnemo"))
    ap.add_argument("--venv", default=os.path.join(ROOT, "build", "train-venv"))
    ap.add_argument("--workdir", default=os.path.join(os.path.expanduser("~"), ".cache", "mnemo-bench-train"),
                    help="checkpoints, corpus, logs (outside git)")
    ap.add_argument("--only", choices=["mnemo", "torch"], help="run one side alone (no ratios)")
    ap.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"], help="torch's attention path")
    ap.add_argument("--adamw", default="default", choices=["default", "foreach", "fused"],
                    help="torch's AdamW implementation (default: what torch picks on the CPU)")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per run before it is killed")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                    help="where mnemo trains (mnemo train --device); the torch side is CPU-only: with cuda give --only "
                         "mnemo")
    ap.add_argument("--peak-tflops", type=float,
                    help="the device's GEMM peak in TFLOP/s measured in the same session (bench_cuda): prints MFU")
    ap.add_argument("--jsonl", help="append the raw rows (runs, pairs, summary) to this file")
    o = ap.parse_args()

    cases = [c for c in o.cases.split(",") if c]
    for c in cases:
        if c not in CASES:
            raise SystemExit("unknown case %r (known: %s)" % (c, ", ".join(CASES)))
    batches = [int(b) for b in o.batch.split(",") if b]
    if o.warmup < 1 or o.steps <= o.warmup:
        raise SystemExit("need 1 <= --warmup < --steps: tokens/s is timed from the end of step --warmup, so that "
                         "neither side's loading (inside mnemo's elapsed_s or not) is counted")
    sides = [s for s in ("mnemo", "torch") if o.only in (None, s)]
    if o.device != "cpu" and "torch" in sides:
        raise SystemExit("--device %s trains mnemo on the GPU while the torch worker runs on the CPU: the pair would "
                         "compare two machines; give --only mnemo" % o.device)
    py = os.path.join(o.venv, "bin", "python")
    if not os.path.exists(py):
        if "torch" in sides:
            raise SystemExit("no venv python at %s: make it with tests/reference/setup_train_venv.sh or give --venv"
                             % py)
        py = None
    if "mnemo" in sides:
        why = check_mnemo(o.mnemo)
        if why:
            raise SystemExit("mnemo side unavailable: %s\nrun the torch side alone with --only torch" % why)

    corpus, dirs = prepare(o, py, cases)
    logs = os.path.join(o.workdir, "logs")
    os.makedirs(logs, exist_ok=True)
    jsonl = open(o.jsonl, "a", encoding="utf-8") if o.jsonl else None

    def save(row):
        if jsonl:
            jsonl.write(json.dumps(row) + "\n")
            jsonl.flush()

    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True).stdout.strip()
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    load_start = os.getloadavg()
    head = {"bench": "train", "date": time.strftime("%Y-%m-%d %H:%M:%S"), "commit": commit, "cpu": cpu,
            "cores": os.cpu_count(), "host": platform.node(), "threads": o.threads, "seq_len": o.seq_len,
            "steps": o.steps, "warmup": o.warmup, "pairs": o.pairs, "sides": sides, "attn": o.attn, "adamw": o.adamw,
            "device": o.device, "peak_tflops": o.peak_tflops,
            "loadavg_start": load_start}
    save(head)
    log("train bench %s, commit %s, %s, %d cores; %d threads, seq_len %d, %d steps (%d warm-up), %d pairs; "
        "load average at start %.2f %.2f %.2f" % (head["date"], commit, cpu, os.cpu_count(), o.threads, o.seq_len,
                                                  o.steps, o.warmup, o.pairs, *load_start))

    results = {}   # (case, batch) -> {side: [run rows]}, ratios
    torch_info = {}
    for case in cases:
        for b in batches:
            key = (case, b)
            results[key] = {"mnemo": [], "torch": [], "speed": [], "rss": []}
            tokens_per_step = b * o.seq_len
            fpt = flops_per_token(case, o.seq_len)
            common = ["--model", dirs[case], "--data", corpus, *CASES[case]["train"], "--steps", str(o.steps),
                      "--batch", str(b), "--seq-len", str(o.seq_len), "--lr", repr(o.lr), "--shuffle", "0",
                      "--seed", str(o.seed), "--threads", str(o.threads), "--json"]
            for pair in range(o.pairs):
                got = {}
                for side in sides:
                    tag = "%s_b%d_p%d_%s" % (case, b, pair, side)
                    out_dir = os.path.join(o.workdir, "out", tag)
                    shutil.rmtree(out_dir, ignore_errors=True)
                    if side == "mnemo":
                        cmd = [o.mnemo, "train", *common, "--device", o.device, "--out", out_dir]
                    else:
                        cmd = [py, WORKER, "train", *common, "--attn", o.attn, "--adamw", o.adamw]
                    load0 = os.getloadavg()[0]
                    steps, final, rc, rss_kib, wall = run_child(cmd, o.threads, o.timeout,
                                                                os.path.join(logs, tag + ".log"))
                    shutil.rmtree(out_dir, ignore_errors=True)  # a full model's output is 84 MB: not kept
                    if rc != 0 or len(steps) != o.steps:
                        with open(os.path.join(logs, tag + ".log"), encoding="utf-8", errors="replace") as f:
                            tail = f.read()[-3000:]
                        raise SystemExit("%s: rc %d, %d of %d step lines; command: %s\nstderr tail:\n%s" % (
                            tag, rc, len(steps), o.steps, " ".join(cmd), tail))
                    bad = [s["step"] for i, s in enumerate(steps) if s.get("tokens") != (i + 1) * tokens_per_step]
                    if bad:
                        log("  note: %s counts tokens differently from B*seq_len per step (steps %s); tokens/s "
                            "below uses B*seq_len" % (side, bad[:3]))
                    tps = tok_per_s(steps, o.warmup, tokens_per_step)
                    row = {"case": case, "batch": b, "pair": pair, "side": side, "tok_s": tps,
                           "model_gflop_s": tps * fpt / 1e9 if tps else None, "device": o.device,
                           "mfu": mfu(tps * fpt / 1e9 if tps else None, o.peak_tflops),
                           "peak_rss_kib": rss_kib, "wall_s": round(wall, 2), "loss1": steps[0]["loss"],
                           "losses": [s["loss"] for s in steps], "elapsed_s": [s["elapsed_s"] for s in steps],
                           "final": final, "load1_start": load0, "load1_end": os.getloadavg()[0], "cmd": cmd}
                    save(row)
                    results[key][side].append(row)
                    got[side] = row
                    if side == "torch" and final:
                        torch_info = final
                        if o.steps * b > final["windows"]:
                            log("  note: %d steps x batch %d pass the corpus's %d windows: the data wraps" % (
                                o.steps, b, final["windows"]))
                    log("%-9s b%d pair %d %-5s: %8.1f tok/s (~%5.1f model GFLOP/s%s)  peak RSS %7.1f MiB  "
                        "step-1 loss %.5f  wall %6.1f s  load %.2f -> %.2f" % (
                            case, b, pair, side, tps or 0, (tps or 0) * fpt / 1e9,
                            ", MFU %.1f%%" % (100 * row["mfu"]) if row["mfu"] else "", rss_kib / 1024, row["loss1"],
                            wall, load0, row["load1_end"]))
                if len(got) == 2:
                    m, t = got["mnemo"], got["torch"]
                    speed = m["tok_s"] / t["tok_s"]
                    rss = m["peak_rss_kib"] / t["peak_rss_kib"]
                    dl = abs(m["loss1"] - t["loss1"]) / abs(t["loss1"])
                    results[key]["speed"].append(speed)
                    results[key]["rss"].append(rss)
                    save({"pair": pair, "case": case, "batch": b, "speed_ratio": speed, "rss_ratio": rss,
                          "loss1_rel_diff": dl})
                    log("%-9s b%d pair %d: mnemo/torch tokens/s %.2fx, peak RSS %.2fx, step-1 loss rel diff %.1e%s"
                        % (case, b, pair, speed, rss, dl,
                           "  <- NOT the same computation? (model, ids or loss differ)" if dl > 1e-3 else ""))

    load_end = os.getloadavg()
    log("load average at end %.2f %.2f %.2f" % load_end)
    lines = ["| case | batch | mnemo tok/s | torch tok/s | mnemo/torch tok/s | mnemo peak RSS MiB | "
             "torch peak RSS MiB | mnemo/torch RSS | goal: tok/s ≥1.5x / RSS below torch |",
             "|---|---|---|---|---|---|---|---|---|"]
    for (case, b), r in results.items():
        mt = [x["tok_s"] for x in r["mnemo"]]
        tt = [x["tok_s"] for x in r["torch"]]
        mr = [x["peak_rss_kib"] / 1024 for x in r["mnemo"]]
        tr = [x["peak_rss_kib"] / 1024 for x in r["torch"]]
        goal = "—"
        if r["speed"]:
            goal = "%s / %s" % ("met" if statistics.median(r["speed"]) >= 1.5 else "missed",
                                "met" if max(r["rss"]) < 1.0 else "missed")
        lines.append("| %s | %d | %s | %s | %s | %s | %s | %s | %s |" % (
            case, b, fmt_range(mt), fmt_range(tt), fmt_range(r["speed"], "%.2fx"), fmt_range(mr, "%.0f"),
            fmt_range(tr, "%.0f"), fmt_range(r["rss"], "%.2fx"), goal))
        save({"summary": case, "batch": b, "mnemo_tok_s": mt, "torch_tok_s": tt, "speed_ratios": r["speed"],
              "mnemo_rss_mib": mr, "torch_rss_mib": tr, "rss_ratios": r["rss"]})
    save({"loadavg_end": load_end})
    log("")
    log("Median (min–max) over %d pair(s); %d threads, seq_len %d, %d steps of which %d warm-up; torch %s, "
        "attention %s, AdamW %s; load average %.2f at start, %.2f at end." % (
            o.pairs, o.threads, o.seq_len, o.steps, o.warmup, torch_info.get("torch", "—"), o.attn, o.adamw,
            load_start[0], load_end[0]))
    for case in cases:
        log("%s: %s; ~%.2f model GFLOP per trained token at seq_len %d." % (
            case, CASES[case]["what"], flops_per_token(case, o.seq_len) / 1e9, o.seq_len))
    if torch_info:
        log("torch's peak RSS includes %.0f MiB of its own after the imports, before the model." %
            torch_info["rss_import_mib"])
    log("")
    log("\n".join(lines))
    if jsonl:
        jsonl.close()


if __name__ == "__main__":
    main()
