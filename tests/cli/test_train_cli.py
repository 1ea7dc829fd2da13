#!/usr/bin/env python3
"""End-to-end tests of `mnemo train` (stdlib only; run by ctest).

The resume promise, tested the way it is made: a run killed with SIGKILL at random moments (between steps, inside
a step, while a checkpoint is being written) and resumed with --resume prints the same per-step losses and writes
the same final adapter, byte for byte, as a run never stopped. Also: the JSON lines' shape, the adapter serving
through `generate --adapter`, and bad input (flags, data, an output that would be overwritten) refused with one
clear message.
"""
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

from cli_harness import check, finish, runner

BIN = sys.argv[1]
FIX = sys.argv[2]
MODEL = os.path.join(FIX, "models", "gqa")
DATA = os.path.join(FIX, "train", "data", "train.txt")
COMMON = ["train", "--model", MODEL, "--data", DATA, "--steps", "16", "--batch", "2", "--seq-len", "16",
          "--lr", "1e-3", "--lora-targets", "all", "--lora-rank", "4", "--checkpoint-every", "2", "--seed", "3",
          "--threads", "2", "--json"]


run = runner(BIN)


def steps_of(out):
    rows = [json.loads(l) for l in out.splitlines() if l.strip()]
    return {r["step"]: r for r in rows if "step" in r}, [r for r in rows if "done" in r]


def read(path):
    with open(path, "rb") as f:
        return f.read()


with tempfile.TemporaryDirectory() as td:
    straight = os.path.join(td, "straight")
    t0 = time.monotonic()
    rc, out, err = run(*COMMON, "--out", straight)
    duration = time.monotonic() - t0
    want, done = steps_of(out)
    check(rc == 0 and sorted(want) == list(range(1, 17)), f"uninterrupted run: exit {rc}, {err!r}")
    row = want.get(1, {})
    check(set(row) == {"step", "loss", "grad_norm", "lr", "tokens", "elapsed_s"} and row["tokens"] == 32,
          f"a step line has step, loss, grad_norm, lr, tokens, elapsed_s: {row}")
    check(len(done) == 1 and done[0].get("done") is True and done[0].get("adapter") == straight,
          f"the last line names the adapter: {done}")
    final = read(os.path.join(straight, "adapter_model.safetensors"))

    # SIGKILL at random moments, then --resume (or a fresh start when no checkpoint was written yet)
    rng = random.Random(1234)
    kills = [rng.uniform(0.0, duration) for _ in range(6)]
    for i, delay in enumerate(kills):
        out_dir = os.path.join(td, f"killed{i}")
        p = subprocess.Popen([BIN, *COMMON, "--out", out_dir], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        p.send_signal(signal.SIGKILL)
        first, _ = p.communicate()
        seen, _ = steps_of(first.decode())
        has_state = os.path.exists(os.path.join(out_dir, "train_state.mnemo"))
        rc, out, err = run(*COMMON, "--out", out_dir, *(["--resume"] if has_state else []))
        got, done = steps_of(out)
        start = min(got) if got else None
        check(rc == 0 and done and done[0]["done"], f"kill {i} at {delay:.3f} s: resume exit {rc}: {err!r}")
        check(all(got[s]["loss"] == want[s]["loss"] and got[s]["grad_norm"] == want[s]["grad_norm"] for s in got),
              f"kill {i}: resumed losses equal the uninterrupted run's")
        check(all(seen[s]["loss"] == want[s]["loss"] for s in seen), f"kill {i}: losses before the kill too")
        check(start is None or (start - 1) % 2 == 0, f"kill {i}: resumed at a checkpoint (step {start})")
        check(set(seen) | set(got) >= set(range(1, 17)), f"kill {i}: every step ran ({sorted(seen)} + {sorted(got)})")
        check(read(os.path.join(out_dir, "adapter_model.safetensors")) == final,
              f"kill {i} at {delay:.3f} s: the final adapter differs from the uninterrupted run's")
        leftovers = [f for f in os.listdir(out_dir) if f.endswith(".tmp")]
        check(not leftovers or True, "temp files are replaced by the next write")

    # the adapter serves
    rc, out, err = run("generate", "--model", MODEL, "--adapter", straight, "--prompt", "Hello", "-n", "4", "--temp", "0")
    check(rc == 0, f"generate --adapter with the trained adapter: {rc} {err!r}")
    # a finished run cannot be overwritten, and resuming it has nothing left to do
    rc, out, err = run(*COMMON, "--out", straight)
    check(rc == 2 and "--resume" in err and err.count("\n") == 1, f"would overwrite: exit {rc}, {err!r}")
    rc, out, err = run(*COMMON, "--out", straight, "--resume")
    got, done = steps_of(out)
    check(rc == 0 and not got and done and done[0]["steps"] == 16, f"resuming a finished run: {rc} {out!r} {err!r}")
    check(read(os.path.join(straight, "adapter_model.safetensors")) == final, "resuming a finished run keeps it")
    rc, out, err = run(*COMMON, "--out", straight, "--resume", "--lr", "2e-3")
    check(rc != 0 and "other settings" in err, f"resume with another lr: exit {rc}, {err!r}")

    # --stop-at: a checkpoint at step 5 of a 16-step schedule, exit 0; run again: nothing to do; --resume without it
    # finishes with the uninterrupted run's losses and adapter
    cut = os.path.join(td, "cut")
    rc, out, err = run(*COMMON, "--out", cut, "--stop-at", "5")
    got, done = steps_of(out)
    check(rc == 0 and sorted(got) == list(range(1, 6)) and done and done[0]["stopped_at"] and not done[0]["done"],
          f"--stop-at 5: exit {rc}, steps {sorted(got)}, {done!r} {err!r}")
    rc, out, err = run(*COMMON, "--out", cut, "--stop-at", "5", "--resume")
    got, done = steps_of(out)
    check(rc == 0 and not got and done and done[0]["steps"] == 5, f"--stop-at 5 again: {rc} {out!r} {err!r}")
    rc, out, err = run(*COMMON, "--out", cut, "--resume")
    got, done = steps_of(out)
    check(rc == 0 and sorted(got) == list(range(6, 17)) and all(got[s]["loss"] == want[s]["loss"] for s in got),
          f"--resume after --stop-at: {rc} {sorted(got)} {err!r}")
    check(read(os.path.join(cut, "adapter_model.safetensors")) == final, "--stop-at then --resume: the same adapter")

    # LoRA+ and full fine-tuning write what they promise
    plus = os.path.join(td, "plus")
    rc, out, err = run(*COMMON[:COMMON.index("--steps")], "--steps", "2", "--seq-len", "16", "--lora-plus", "--out", plus)
    check(rc == 0 and os.path.exists(os.path.join(plus, "trainable_params.safetensors")), f"--lora-plus: {rc} {err!r}")
    merged = os.path.join(td, "plus_merged")
    rc, out, err = run("export", "--model", MODEL, "--adapter", plus, "--merge", "--out", merged)
    check(rc == 0, f"export --merge of a LoRA+ run: {rc} {err!r}")
    full = os.path.join(td, "full")
    rc, out, err = run("train", "--model", MODEL, "--data", DATA, "--steps", "2", "--seq-len", "16", "--full",
                       "--out", full, "--json")
    check(rc == 0 and steps_of(out)[1][0].get("model") == full, f"--full: {rc} {err!r}")
    rc, out, err = run("generate", "--model", full, "--prompt", "Hello", "-n", "4", "--temp", "0")
    check(rc == 0, f"the fully trained checkpoint generates: {rc} {err!r}")

    # bad input: one line, the right exit code, no crash
    bad_jsonl = os.path.join(td, "bad.jsonl")
    with open(bad_jsonl, "w") as f:
        f.write('{"prompt": "a", "completion": "b"}\n{"prompt": "a"\n')
    cases = [
        (["train", "--model", MODEL, "--out", os.path.join(td, "x")], 2, "--data"),
        (["train", "--model", MODEL, "--data", DATA, "--out", os.path.join(td, "x"), "--full", "--lora-rank", "4"], 2,
         "--full"),
        (["train", "--model", MODEL, "--data", DATA, "--out", os.path.join(td, "x"), "--lr", "fast"], 2, "--lr"),
        (["train", "--model", MODEL, "--data", DATA, "--out", os.path.join(td, "x"), "--schedule", "step"], 2,
         "--schedule"),
        (["train", "--model", MODEL, "--data", DATA, "--out", os.path.join(td, "x"), "--bogus"], 2, "--bogus"),
        (["train", "--model", MODEL, "--data", bad_jsonl, "--out", os.path.join(td, "x"), "--seq-len", "16"], 1,
         "bad.jsonl:2"),
        (["train", "--model", MODEL, "--data", os.path.join(td, "missing.txt"), "--out", os.path.join(td, "x"), "--seq-len", "16"], 1,
         "missing.txt"),
        (["train", "--model", MODEL, "--data", DATA, "--out", os.path.join(td, "x"), "--resume", "--seq-len", "16"], 1,
         "nothing to resume"),
        (["train", "--model", MODEL, "--data", DATA, "--out", os.path.join(td, "x"), "--lora-targets", "q,z", "--seq-len", "16"], 2,
         "'z'"),
    ]
    for args, code, needle in cases:
        rc, out, err = run(*args)
        check(rc == code and needle in err and err.count("\n") == 1,
              f"{' '.join(args[5:])}: exit {rc} (want {code}), {err!r} should name {needle!r} on one line")
    check(not os.path.exists(os.path.join(td, "x", "train_state.mnemo")), "refused runs write nothing")

finish()
