#!/usr/bin/env python3
"""Generate the fixture of mnemo's UIO option (b) — compressed memory past a budget in a kNN store — into
tests/fixtures/uio_knn/. The semantics are the extended statement in uio_reference.py (its
docstring, "Beyond the reference"): store slots at RoPE position 0, the rest of [memory | raw | new] at 0..N-1.

One case over an existing UIO fixture (tests/fixtures/uio/gqa_c12_m3: GQA base, chunk_size 12, 3 <mem> slots per
segment; its prompt of 6+ segments and its uio.safetensors), with budget 7 — not a multiple of 3, so a segment's
slots are split between the cache and the store — fed in one call, as generate() does, fp64 rounded to fp32:
  logits.bin      MNFXLGT1, one record: logits after every fed token (prompt + greedy[:-1])
  other_budgets.bin  MNFXLGT1, one record per budget in OTHER_BUDGETS (1, 3): the same feed's logits, every 5th row
  reference.json  budget, prompt ids, greedy ids (generate() under the budget), the sizes after every compression
                  (mem_slots in the cache, store_slots), the checks below
Checks (asserted here, recorded in reference.json):
  * a budget at least the number of slots ever made gives the reference's own logits (exactly, fp64);
  * fp32 within 5e-5 of fp64; one call == token by token;
  * the budget changes the logits (so a build that ignored it would fail mnemo's test).
Run with the train venv: build/train-venv/bin/python tests/reference/make_uio_knn_fixtures.py [--check]
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_uio_fixtures as F  # noqa: E402  (dump_json, write_logits, maxdiff, same_tree)
import uio_reference as U  # noqa: E402

ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
SOURCE = "tests/fixtures/uio/gqa_c12_m3"
CASE = "gqa_c12_m3_b7"
BUDGET = 7
OTHER_BUDGETS = (1, 3)  # below num_memory (a segment's entries leave at once), and equal to it
SPARSE = 5              # other_budgets.bin keeps the rows t with t % SPARSE == SPARSE - 1 (fixture size)


def generate(out):
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.chdir(ROOT)
    with open(os.path.join(SOURCE, "reference.json"), encoding="utf-8") as f:
        src = json.load(f)
    base_dir, uio_dir = src["base"], os.path.join(SOURCE, src["uio_dirs"]["safetensors"])
    uio = U.UioWeights.from_dir(uio_dir)
    m64 = U.UioRef(U.BaseModel.from_dir(base_dir, torch.float64), uio)
    m32 = U.UioRef(U.BaseModel.from_dir(base_dir, torch.float32), uio)
    prompt = src["prompt"]["ids"]
    n_new = len(src["greedy"])
    new, _, _ = m64.generate(prompt, n_new, budget=BUDGET)
    seq = prompt + new[:-1]
    s64 = m64.session(BUDGET)
    lg64 = s64.feed(seq)
    assert s64.store_slots > 0 and len(s64.events) >= 6
    # a budget no compression passes is the reference itself
    big = m64.session(10 ** 6).feed(seq)
    ref = m64.session().feed(seq)
    d_big = F.maxdiff(big, ref)
    assert d_big == 0.0, d_big
    d_f32 = F.maxdiff(m32.session(BUDGET).feed(seq), lg64)
    assert d_f32 < F.TOL_F32, d_f32
    tok = m64.session(BUDGET)
    d_tok = F.maxdiff(torch.cat([tok.feed([t]) for t in seq]), lg64)
    assert d_tok < 1e-10, d_tok
    d_vs_ref = F.maxdiff(lg64, ref)
    assert d_vs_ref > 1e-2, d_vs_ref

    others = [m64.session(b).feed(seq)[SPARSE - 1::SPARSE] for b in OTHER_BUDGETS]
    case = os.path.join(out, CASE)
    os.makedirs(case)
    F.write_logits(os.path.join(case, "logits.bin"), [lg64])
    F.write_logits(os.path.join(case, "other_budgets.bin"), others)
    F.dump_json({
        "format": "mnemo-uio-knn-fixture", "version": 1, "name": CASE,
        "source": SOURCE, "base": base_dir, "uio_dir": uio_dir, "uio_config": uio.config,
        "budget": BUDGET, "store_positions": "every store slot at RoPE position 0 (unrotated)",
        "prompt": {"ids": prompt}, "greedy": new,
        "fed": "ids = prompt + greedy[:-1] in one call; logits.bin row t = logits after fed token t",
        "n_rows": len(seq), "compressions": s64.events, "final_state": s64.state(),
        "other_budgets": list(OTHER_BUDGETS), "other_budgets_rows": "t %% %d == %d" % (SPARSE, SPARSE - 1),
        "checks": {"budget_never_reached_vs_reference_fp64": d_big, "fp32_vs_fp64_max_abs": d_f32,
                   "token_by_token_vs_one_call_fp64": d_tok, "sensitivity_vs_no_budget_max_abs": d_vs_ref},
        "versions": F.versions(),
    }, os.path.join(case, "reference.json"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "uio_knn"))
    ap.add_argument("--check", action="store_true", help="regenerate into a temp dir and compare bytes")
    args = ap.parse_args()
    out = os.path.abspath(args.out)
    tmp = tempfile.mkdtemp(prefix="mnemo-uio-knn-fix-")
    try:
        gen = os.path.join(tmp, "uio_knn")
        os.makedirs(gen)
        generate(gen)
        if args.check:
            bad = [f for f in F.same_tree(gen, out) if f != "README.md"]  # README is hand-written
            print("identical" if not bad else "DIFFERENT: " + ", ".join(bad))
            return 1 if bad else 0
        os.makedirs(out, exist_ok=True)
        shutil.rmtree(os.path.join(out, CASE), ignore_errors=True)
        shutil.copytree(os.path.join(gen, CASE), os.path.join(out, CASE))
        print("wrote", os.path.relpath(out, ROOT))
        return 0
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    sys.exit(main())
