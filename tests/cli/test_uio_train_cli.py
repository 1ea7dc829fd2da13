#!/usr/bin/env python3
"""End-to-end tests of `mnemo train --uio` (stdlib only; run by ctest): a UIO-LLM trained on the GQA fixture model
writes a UIO directory that `mnemo generate --uio` loads and compresses with; the JSON lines' shape; the same
settings write the same bytes; an existing run is not overwritten and --resume under other settings is refused;
--uio-init continues from a trained directory; bad flags refused with one clear message (exit 2), a missing
--uio-init naming its file. (Exact resume is test_uio_train's, through the trainer API.)
"""
import json
import os
import sys
import tempfile

from cli_harness import check, finish, runner

BIN = sys.argv[1]
FIX = sys.argv[2]
MODEL = os.path.join(FIX, "models", "gqa")
DATA = os.path.join(FIX, "train", "data", "train.txt")
COMMON = ["train", "--model", MODEL, "--data", DATA, "--uio-chunk", "12", "--uio-num-memory", "3",
          "--tbptt-slots", "1", "--seq-len", "60", "--batch", "2", "--lr", "5e-3", "--lora-rank", "4",
          "--lora-alpha", "8", "--seed", "7", "--threads", "2", "--json"]


run = runner(BIN)


def read(path):
    with open(path, "rb") as f:
        return f.read()


with tempfile.TemporaryDirectory() as td:
    out = os.path.join(td, "uio")
    rc, so, se = run(*COMMON, "--steps", "6", "--uio", out)
    rows = [json.loads(l) for l in so.splitlines() if l.strip()]
    steps = [r for r in rows if "step" in r]
    done = [r for r in rows if "done" in r]
    check(rc == 0 and len(steps) == 6, f"train --uio: exit {rc}, {se!r}")
    check(all({"loss", "grad_norm", "lr", "tokens"} <= set(r) for r in steps), "step lines' keys")
    check(done and done[0].get("method") == "uio" and done[0].get("uio") == out, f"last line {done!r}")
    for f in ("uio_config.json", "uio.safetensors", "train_state.mnemo"):
        check(os.path.exists(os.path.join(out, f)), f"{f} written")
    cfg = json.load(open(os.path.join(out, "uio_config.json")))
    check(cfg == {"num_memory": 3, "lora_rank": 4, "lora_alpha": 8, "lora_dropout": 0.0, "chunk_size": 12},
          f"uio_config.json {cfg}")
    # the product serves: the prompt is long enough to compress segments
    rc, so, se = run("generate", "--model", MODEL, "--uio", out, "--prompt", "To be, or not to be, that is the "
                     "question: whether 'tis nobler in the mind to suffer", "-n", "4", "--temp", "0", "-v")
    check(rc == 0 and "<mem> entries" in se, f"generate --uio on the trained directory: exit {rc}, {se[-400:]!r}")
    # resume: 3 steps, then 3 more, equals 6 straight
    half = os.path.join(td, "half")
    rc1, _, se1 = run(*COMMON, "--steps", "6", "--uio", half, "--checkpoint-every", "3")
    check(rc1 == 0 and read(os.path.join(half, "uio.safetensors")) == read(os.path.join(out, "uio.safetensors")),
          "two runs with the same settings write the same bytes")
    # bad input
    for args, what in [(["--uio", out + "2"], "chunk"),
                       (["--uio", out + "2", "--uio-chunk", "10", "--uio-num-memory", "3"], "multiple"),
                       (["--uio", out + "2", "--uio-chunk", "12", "--uio-num-memory", "3", "--full"], "exclude"),
                       (["--out", out + "2", "--uio-chunk", "12"], "--uio"),
                       (["--uio", out + "2", "--uio-chunk", "12", "--uio-num-memory", "3", "--tbptt-slots", "-1"],
                        "tbptt-slots")]:
        base = [a for a in COMMON if a not in ("--uio-chunk", "12", "--uio-num-memory", "3")]
        rc, so, se = run(*base, *args)
        check(rc == 2 and what in se and se.count("\n") == 1, f"{args}: exit {rc}, {se!r}")
    plain = COMMON[:COMMON.index("--uio-chunk")] + COMMON[COMMON.index("--seq-len"):COMMON.index("--lora-rank")] + \
        COMMON[COMMON.index("--seed"):]
    rc, so, se = run(*plain, "--uio", out + "3", "--uio-init", os.path.join(td, "nothing"))
    check(rc in (1, 2) and "nothing/uio_config.json" in se, f"missing --uio-init: exit {rc}, {se!r}")
    rc, so, se = run(*COMMON[:COMMON.index("--seq-len")], "--seq-len", "12", *COMMON[COMMON.index("--batch"):],
                     "--uio", out + "4")
    check(rc == 2 and "one segment" in se, f"documents of one segment: exit {rc}, {se!r}")
    rc, so, se = run(*plain, "--steps", "2", "--uio", os.path.join(td, "from_pth"), "--uio-init",
                     os.path.join(FIX, "uio", "gqa_c12_m3", "uio_pth"))
    check(rc == 0, f"--uio-init from the reference's uio.pth: exit {rc}, {se!r}")
    rc, so, se = run(*COMMON, "--steps", "2", "--uio", out)
    check(rc == 2 and "--resume" in se, f"an existing run not overwritten: exit {rc}, {se!r}")
    rc, so, se = run(*COMMON, "--steps", "8", "--uio", out, "--resume")
    check(rc != 0 and "resume" in se, f"--resume with other settings: exit {rc}, {se!r}")
    rc, so, se = run(*plain, "--steps", "8", "--uio", os.path.join(td, "cont"), "--uio-init", out)
    check(rc == 0 and len([l for l in so.splitlines() if '"step"' in l]) == 8, f"--uio-init {out}: exit {rc}, {se!r}")

finish()
