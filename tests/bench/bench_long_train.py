#!/usr/bin/env python3
"""Long-context training on the CPU: peak RSS of each method with and without --recompute,
and training tokens/s of each method against the plain step and against PyTorch doing the same step.

  python3 tests/bench/bench_long_train.py rss   [--lens 2048,8192,32768] [--methods s2] [--case s2small] [--threads 2]
  python3 tests/bench/bench_long_train.py speed [--seq-len 2048] [--steps 4] [--pairs 2] [--threads 2]
      [--mnemo build/mnemo] [--venv build/train-venv] [--workdir ~/.cache/mnemo-bench-long-train] [--jsonl FILE]

The model ("s2small": hidden 256, ffn 688, 4 heads x 64, 4 layers, vocab 8000, max_position_embeddings 32768,
random fp32, 5.2M parameters) and the corpus/tokenizer come from bench_train.py's prepare() in --workdir. Training
is LongLoRA's LoRA+ (r 8, alpha 16 on q,k,v,o; embeddings and norms trained), batch 1, AdamW, clip 1.
  rss    one `mnemo train` step per (method, seq_len, recompute), each its own child; peak RSS = ru_maxrss (wait4).
         --case rsstiny (hidden 64, ffn 172, 2 heads x 32, 2 layers, vocab 8000) keeps the 32K full-attention steps
         of plain and SMT to minutes on two cores.
  speed  for plain (full attention), --s2-attn and --smt (M = 4 x seq_len, n = seq_len / 2, beta 1) in turn: mnemo
         then torch (tests/bench/torch_long_train_worker.py), --pairs times, alternating. tokens/s = positions
         trained per second after the first step (SMT with beta 1 trains two passes of seq_len per step).
Prints the load average at start and end of each run and a markdown table for tests/bench/RESULTS.md.
"""
import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_train as bt  # noqa: E402

WORKER = os.path.join(HERE, "torch_long_train_worker.py")
bt.CASES["s2small"] = dict(
    what="hidden 256, ffn 688, 4 heads x 64, 4 layers, vocab 8000",
    config=dict(hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=4,
                num_key_value_heads=4, head_dim=64, vocab_size=bt.VOCAB, max_position_embeddings=32768,
                rms_norm_eps=1e-5),
    train=[])
bt.CASES["rsstiny"] = dict(
    what="hidden 64, ffn 172, 2 heads x 32, 2 layers, vocab 8000",
    config=dict(hidden_size=64, intermediate_size=172, num_hidden_layers=2, num_attention_heads=2,
                num_key_value_heads=2, head_dim=32, vocab_size=bt.VOCAB, max_position_embeddings=32768,
                rms_norm_eps=1e-5),
    train=[])
LORA_PLUS = ["--lora-plus", "--lora-rank", "8", "--lora-alpha", "16", "--lora-targets", "q,k,v,o"]
METHODS = {"plain": [], "s2": ["--s2-attn"], "smt": ["--smt"]}


def load():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def rate(steps):
    if len(steps) < 2:
        return None
    dt = steps[-1]["elapsed_s"] - steps[0]["elapsed_s"]
    return (steps[-1]["tokens"] - steps[0]["tokens"]) / dt if dt > 0 else None


def mnemo_cmd(o, model, corpus, extra, seq_len, steps, out):
    return [o.mnemo, "train", "--model", model, "--data", corpus, "--out", out, "--steps", str(steps), "--batch", "1",
            "--seq-len", str(seq_len), "--shuffle", "0", "--seed", "1", "--threads", str(o.threads), "--json",
            *LORA_PLUS, *extra]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["rss", "speed"])
    ap.add_argument("--lens", default="2048,8192,32768")
    ap.add_argument("--methods", default="s2", help="rss: comma list of " + ", ".join(METHODS))
    ap.add_argument("--case", default="s2small", choices=["s2small", "rsstiny"])
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--mnemo", default=os.path.join(bt.ROOT, "build", "mnemo"))
    ap.add_argument("--venv", default=os.path.join(bt.ROOT, "build", "train-venv"))
    ap.add_argument("--workdir", default=os.path.expanduser("~/.cache/mnemo-bench-long-train"))
    ap.add_argument("--jsonl")
    o = ap.parse_args()
    py = os.path.join(o.venv, "bin", "python")
    corpus, dirs = bt.prepare(o, py if os.path.exists(py) else None, [o.case])
    model = dirs[o.case]
    rows = []
    tmp = os.path.join(o.workdir, "runs")
    os.makedirs(tmp, exist_ok=True)

    def record(row):
        rows.append(row)
        print(json.dumps(row), flush=True)
        if o.jsonl:
            with open(o.jsonl, "a") as f:
                f.write(json.dumps(row) + "\n")

    if o.mode == "rss":
        methods = o.methods.split(",")
        lens = [int(x) for x in o.lens.split(",")]
        for meth in methods:
            for L in lens:
                for rc_flag in ([], ["--recompute"]):
                    out = os.path.join(tmp, "rss_%s_%d_%d" % (meth, L, bool(rc_flag)))
                    os.system("rm -rf '%s'" % out)
                    l0 = load()
                    steps, final, rc, rss, wall = bt.run_child(
                        mnemo_cmd(o, model, corpus, [*METHODS[meth], *rc_flag], L, 1, out), o.threads, 3600,
                        out + ".log")
                    record({"mode": "rss", "case": o.case, "method": meth, "seq_len": L, "recompute": bool(rc_flag),
                            "rc": rc, "peak_rss_mib": round(rss / 1024, 1),
                            "step_s": steps[-1]["elapsed_s"] if steps else None,
                            "loss": steps[-1]["loss"] if steps else None, "load_start": l0, "load_end": load()})
        print("\n| method | seq_len | peak RSS (MiB) | with --recompute (MiB) | step s (without / with) |")
        print("|---|---|---|---|---|")
        for meth in methods:
            for L in lens:
                a, b = [[r for r in rows if r["method"] == meth and r["seq_len"] == L and r["recompute"] == k][0]
                        for k in (False, True)]
                print("| %s | %d | %.0f | %.0f | %.1f / %.1f |" % (meth, L, a["peak_rss_mib"], b["peak_rss_mib"],
                                                                  a["step_s"] or 0, b["step_s"] or 0))
        return
    T = o.seq_len
    for p in range(o.pairs):
        for meth, extra in METHODS.items():
            for side in ("mnemo", "torch"):
                out = os.path.join(tmp, "speed_%s_%s" % (meth, side))
                os.system("rm -rf '%s'" % out)
                if side == "mnemo":
                    cmd = mnemo_cmd(o, model, corpus, extra, T, o.steps, out)
                else:
                    cmd = [py, WORKER, "--model", model, "--data", corpus, "--method", meth, "--steps", str(o.steps),
                           "--seq-len", str(T), "--threads", str(o.threads), "--seed", "1"]
                l0 = load()
                steps, final, rc, rss, wall = bt.run_child(cmd, o.threads, 3600, out + ".log")
                record({"mode": "speed", "pair": p, "method": meth, "side": side, "seq_len": T, "rc": rc,
                        "tok_s": rate(steps), "loss1": steps[0]["loss"] if steps else None,
                        "peak_rss_mib": round(rss / 1024, 1), "load_start": l0, "load_end": load()})
    print("\n| method (seq_len %d) | mnemo tok/s | torch tok/s | mnemo / torch | mnemo vs plain | step-1 loss "
          "mnemo / torch |" % T)
    print("|---|---|---|---|---|---|")
    med = {}
    for meth in METHODS:
        for side in ("mnemo", "torch"):
            med[meth, side] = statistics.median([r["tok_s"] for r in rows if r["method"] == meth and
                                                 r["side"] == side and r["tok_s"]] or [0])
    for meth in METHODS:
        r1 = [r for r in rows if r["method"] == meth]
        l1 = {s: next((r["loss1"] for r in r1 if r["side"] == s), None) for s in ("mnemo", "torch")}
        print("| %s | %.0f | %.0f | %.2f | %.2fx | %.5f / %.5f |" % (
            meth, med[meth, "mnemo"], med[meth, "torch"], med[meth, "mnemo"] / max(med[meth, "torch"], 1e-9),
            med[meth, "mnemo"] / max(med["plain", "mnemo"], 1e-9), l1["mnemo"] or 0, l1["torch"] or 0))


if __name__ == "__main__":
    main()
