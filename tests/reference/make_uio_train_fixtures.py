#!/usr/bin/env python3
"""Generate mnemo's UIO training fixtures into tests/fixtures/uio_train/.

Run by hand (never in CI), from the repository root:

    build/train-venv/bin/python tests/reference/make_uio_train_fixtures.py [--check]

For each case: a base model and UIO weights already committed for the inference fixtures (tests/fixtures/models,
tests/fixtures/uio/<case>/uio_st: NON-zero LoRA A and B), a 3-segment document of tinyshakespeare ids, and the
gradient of every UIO tensor (float64 reference stored as float32) for several modes: full BPTT, and reservoir
runs with S = 1 from a draw state chosen so that segment 1 evicts segment 0 (seed_evict) or is dropped at once
(seed_drop), with and without the compensation factor. Self-checks (abort on failure): incremental full BPTT ==
one-graph autograd (1e-10); the modes differ from each other where they should; the repeat token gets no gradient.

Files per case: reference.json (ids, C, M, per mode: slots, compensate, state, losses, reservoir log, grad norm)
and grads.safetensors ("<mode>/<mnemo tensor name>", fp32).
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
import uio_reference as U  # noqa: E402
import uio_train_reference as R  # noqa: E402

ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
CORPUS_IDS = "tests/fixtures/uio/%s/reference.json"   # reuse the inference prompt ids (tinyshakespeare, BOS first)

CASES = [
    dict(name="mha_c16_m4", base="mha", n_tokens=2 * 16 + 9),   # last segment short (9)
    dict(name="gqa_c12_m3", base="gqa", n_tokens=3 * 12),       # three full segments
]


def pick_state(T, slots, want_evict):
    """The smallest draw state whose first draw (segment t = slots) evicts (j < slots) or drops."""
    for s in range(1000):
        _, z = R.splitmix64(s)
        if (z % (slots + 1) < slots) == want_evict:
            return s
    raise AssertionError("no state")


def make_case(case, out_dir):
    base = U.BaseModel.from_dir(os.path.join(ROOT, "tests/fixtures/models", case["base"]), torch.float64)
    uio = U.UioWeights.from_dir(os.path.join(ROOT, "tests/fixtures/uio", case["name"], "uio_st"))
    with open(os.path.join(ROOT, CORPUS_IDS % case["name"]), encoding="utf-8") as f:
        ids = json.load(f)["prompt"]["ids"][: case["n_tokens"]]
    assert len(ids) == case["n_tokens"]
    C = uio.config["chunk_size"]
    T = (len(ids) + C - 1) // C
    assert T == 3
    modes = [
        ("full", None, True, 0),
        ("s1_evict", 1, True, pick_state(T, 1, True)),
        ("s1_evict_nofactor", 1, False, pick_state(T, 1, True)),
        ("s1_drop", 1, True, pick_state(T, 1, False)),
    ]
    ref = {"case": case["name"], "base": "tests/fixtures/models/" + case["base"],
           "uio": "tests/fixtures/uio/%s/uio_st" % case["name"], "ids": ids, "chunk_size": C,
           "num_memory": uio.config["num_memory"], "modes": {}}
    tensors, got = {}, {}
    for name, slots, comp, state in modes:
        W, losses, log = R.tbptt_grads(base, uio, ids, slots, comp, state)
        g = R.named_grads(W)
        got[name] = g
        for k, v in g.items():
            tensors["%s/%s" % (name, k)] = v.to(torch.float32).contiguous()
        ref["modes"][name] = {"slots": slots or 0, "compensate": comp, "state": state, "losses": losses,
                              "reservoir": log, "grad_norm": R.grad_norm(W)}
    # self-checks
    Wa = R.full_bptt_autograd(base, uio, ids)
    for k, v in R.named_grads(Wa).items():
        d = (v - got["full"][k]).abs().max().item()
        assert d <= 1e-10 * max(1.0, v.abs().max().item()), "full BPTT: incremental != autograd on %s (%g)" % (k, d)
    assert got["full"]["decoder.repeat_token"].abs().max() == 0
    enc_q = "encoder.layers.0.q_proj.lora_A"
    assert ref["modes"]["s1_evict"]["reservoir"][0].get("evicted") == 0
    assert ref["modes"]["s1_drop"]["reservoir"][0].get("dropped") == 1
    for a, b in [("full", "s1_evict"), ("s1_evict", "s1_evict_nofactor"), ("s1_evict", "s1_drop")]:
        assert not torch.allclose(got[a][enc_q], got[b][enc_q]), "%s and %s should differ" % (a, b)
    # the transfer head's gradient never depends on the reservoir
    tk = "decoder.layers.1.k_proj.lora_B"
    assert torch.allclose(got["full"][tk], got["s1_drop"][tk], rtol=0, atol=1e-12)
    d = os.path.join(out_dir, case["name"])
    os.makedirs(d, exist_ok=True)
    save_file(tensors, os.path.join(d, "grads.safetensors"), metadata={"format": "mnemo-uio-train-fixture/1"})
    with open(os.path.join(d, "reference.json"), "w", encoding="utf-8") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")
    print("%s: %d tokens, modes %s, grad norms %s" % (case["name"], len(ids), [m[0] for m in modes],
                                                      ["%.4g" % ref["modes"][m[0]]["grad_norm"] for m in modes]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true", help="regenerate into a temp dir and compare bytes")
    a = ap.parse_args()
    torch.set_num_threads(1)
    out = os.path.join(ROOT, "tests/fixtures/uio_train")
    target = tempfile.mkdtemp() if a.check else out
    for c in CASES:
        make_case(c, target)
    if a.check:
        bad = []
        for c in CASES:
            for f in ("grads.safetensors", "reference.json"):
                if not filecmp.cmp(os.path.join(target, c["name"], f), os.path.join(out, c["name"], f), shallow=False):
                    bad.append(c["name"] + "/" + f)
        shutil.rmtree(target)
        print("check:", "differs: " + ", ".join(bad) if bad else "identical")
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
