#!/usr/bin/env python3
"""End-to-end tests of `mnemo eval` (stdlib only; run by ctest): every task on the fixtures' tiny models with
--json (shapes and the values they must take), the text tables, bad input refused with one message, and
scripts/plot_eval.py drawing each task's JSON as a PNG (with Debian's matplotlib, which scripts/install-deps.sh
installs; skipped with a note where it is missing). The metrics' arithmetic on known answers: tests/unit/test_eval.c.
"""
import json
import os
import subprocess
import sys
import tempfile

from cli_harness import check, finish, runner

BIN, FIX, SRC = sys.argv[1], sys.argv[2], sys.argv[3]
MHA = os.path.join(FIX, "models", "mha")          # plain LLaMA, 128 positions, vocab 512
LL = os.path.join(FIX, "longllama", "basic")      # LongLLaMA, window 64, memory layers 1 and 3
GQA = os.path.join(FIX, "models", "gqa")
UIO = os.path.join(FIX, "uio", "gqa_c12_m3", "uio_st")
TEXT = os.path.join(FIX, "train", "data", "train.txt")


run = runner(BIN, "eval")


def lines(out):
    return [json.loads(l) for l in out.splitlines() if l.startswith("{")]


with tempfile.TemporaryDirectory() as td:
    results = {}
    # perplexity: windows on a plain model; memory on vs off on LongLLaMA and UIO
    rc, out, err = run("perplexity", "--model", MHA, "--data", TEXT, "--max-tokens", "400", "--json")
    r = lines(out)
    check(rc == 0 and len(r) == 1 and r[0]["tokens"] == 399 and r[0]["window"] == 128 and r[0]["stride"] == 64
          and not r[0]["memory"] and r[0]["perplexity"] > 1, f"perplexity windows: {rc} {out!r} {err!r}")
    results["perplexity"] = out
    for model, extra in ((LL, []), (GQA, ["--uio", UIO])):
        on = lines(run("perplexity", "--model", model, *extra, "--data", TEXT, "--max-tokens", "300", "--json")[1])
        off = lines(run("perplexity", "--model", model, *extra, "--data", TEXT, "--max-tokens", "300", "--memory",
                        "off", "--json")[1])
        check(on and off and on[0]["memory"] and not off[0]["memory"] and on[0]["tokens"] == off[0]["tokens"] == 299
              and on[0]["perplexity"] != off[0]["perplexity"], f"memory on/off {model} {extra}: {on} {off}")
    rc, out, err = run("perplexity", "--model", MHA, "--data", TEXT, "--max-tokens", "300")
    check(rc == 0 and "perplexity" in out and "windows of 128 moving by 64" in out, f"perplexity table: {out!r}")
    # retrieval memory (sinks 4 + window 24 cache rows): inputs past the cache go to memory, never cut; a cut would
    # count the cut tokens as wrong (perplexity infinite, no JSON row) and mark the forgetting curve truncated
    ret = ["--memory", "retrieval", "--ret-sinks", "4", "--ret-window", "24", "--ret-block", "4", "--ret-topk", "3",
           "--ret-reps", "2"]
    rc, out, err = run("perplexity", "--model", GQA, *ret, "--data", TEXT, "--max-tokens", "120", "--json")
    r = lines(out)
    check(rc == 0 and len(r) == 1 and r[0]["memory"] and r[0]["tokens"] == 119 and 1 < r[0]["perplexity"] < 1e6,
          f"perplexity with retrieval memory past sinks + window: {rc} {out!r} {err!r}")
    rc, out, err = run("forgetting-curve", "--model", GQA, *ret, "--data", TEXT, "--lengths", "16,64,120",
                       "--samples", "2", "--json")
    pts = [x for x in lines(out) if "length" in x]
    check(rc == 0 and len(pts) == 3 and not any(p["truncated"] for p in pts),
          f"forgetting curve with retrieval memory: nothing truncated: {rc} {out!r} {err!r}")

    # forgetting curve: lengths, two curves, the memory lengths; lengths past a plain model's context are cut
    rc, out, err = run("forgetting-curve", "--model", MHA, "--data", TEXT, "--lengths", "32,64,128,256",
                       "--samples", "3", "--json")
    r = lines(out)
    pts = [x for x in r if "length" in x]
    check(rc == 0 and [p["length"] for p in pts] == [32, 64, 128, 256] and all(
        0 <= p["copy"] <= 1 and 0 <= p["lm"] <= 1 and p["samples"] == 3 for p in pts) and "fine_length" in r[-1]
          and pts[-1]["truncated"] and not pts[0]["truncated"], f"forgetting-curve json: {rc} {out!r} {err!r}")
    results["forgetting-curve"] = out
    rc, out2, err = run("forgetting-curve", "--model", MHA, "--data", TEXT, "--lengths", "32,64,128,256",
                        "--samples", "3", "--json")
    check(out2 == out, "the same seed draws the same spans")
    rc, out, err = run("forgetting-curve", "--model", LL, "--data", TEXT, "--max-length", "256", "--points", "2",
                       "--samples", "2")
    check(rc == 0 and "coarse-grained memory length" in out and " 128 " in out and " 256 " in out,
          f"forgetting-curve table on LongLLaMA: {rc} {out!r} {err!r}")

    # dictionary lookup: accuracies in [0, 1], min <= mean <= max
    rc, out, err = run("dict-lookup", "--model", LL, "--lengths", "512,1K", "--samples", "2", "--json")
    r = lines(out)
    check(rc == 0 and [x["length"] for x in r] == [512, 1024] and all(
        x["accuracy_min"] <= x["accuracy"] <= x["accuracy_max"] <= 1 for x in r), f"dict-lookup: {rc} {out!r} {err!r}")
    check(rc == 0 and all(len(x["value_accuracy"]) == 4 and abs(sum(x["value_accuracy"]) / 4 - x["accuracy"]) < 1e-9
                          for x in r), f"dict-lookup value_accuracy: v1..v4, their mean the accuracy: {out!r}")
    results["dict-lookup"] = out
    # the split by the local window's rows (64 tokens here): the four values sit 6-9 tokens after their keys' first,
    # so a row boundary cuts ~6.5 / 64 of them; the queries (last 30 tokens of 512) lie in one row, so the whole
    # and the cut values make up the accuracy
    rc, out, err = run("dict-lookup", "--model", LL, "--lengths", "512", "--query-tokens", "30", "--samples", "4",
                       "--json")
    b = lines(out)[0].get("by_row_boundary", {}) if rc == 0 else {}
    w, d, q = (b.get(k, {}) for k in ("whole", "definition_cut", "query_cut"))
    check(b.get("row_tokens") == 64 and q.get("share") == 0 and abs(w["share"] + d["share"] - 1) < 1e-9
          and abs(w["share"] * (w["accuracy"] or 0) + d["share"] * (d["accuracy"] or 0) - lines(out)[0]["accuracy"])
          < 1e-9, f"dict-lookup by_row_boundary: {rc} {out!r} {err!r}")
    rc, out, err = run("dict-lookup", "--model", LL, "--lengths", "2K", "--samples", "2", "--json")
    b = lines(out)[0].get("by_row_boundary", {}) if rc == 0 else {}
    check(0.04 < b.get("definition_cut", {}).get("share", 0) < 0.2 and 0 < b.get("query_cut", {}).get("share", 0)
          < 0.2 and b["whole"]["share"] <= 1 - max(b["definition_cut"]["share"], b["query_cut"]["share"]),
          f"dict-lookup by_row_boundary shares (~0.1 each): {b}")
    rc, out, err = run("dict-lookup", "--model", MHA, "--lengths", "1K", "--samples", "1", "--json")
    check(rc == 0 and lines(out)[0]["truncated"] and "by_row_boundary" not in lines(out)[0],
          "dict-lookup past a plain model's context is marked truncated (and has no rows to split by)")
    # --first-sample shards a run: one document at a time, documents 0..2 are the whole run's three
    whole = lines(run("dict-lookup", "--model", LL, "--lengths", "512", "--samples", "3", "--json")[1])
    shards = [lines(run("dict-lookup", "--model", LL, "--lengths", "512", "--samples", "1", "--first-sample", str(k),
                        "--json")[1]) for k in range(3)]
    accs = [s[0]["accuracy"] for s in shards if s]
    check(len(whole) == 1 and len(accs) == 3 and len(set(accs)) > 1 and [s[0]["first_sample"] for s in shards] ==
          [0, 1, 2] and abs(sum(accs) / 3 - whole[0]["accuracy"]) < 1e-9 and min(accs) == whole[0]["accuracy_min"]
          and max(accs) == whole[0]["accuracy_max"], f"--first-sample shards: {accs} {whole}")
    rc, out, err = run("dict-lookup", "--write-data", os.path.join(td, "x.jsonl"), "--first-sample", "1")
    check(rc == 2 and "not with --write-data" in err, f"--first-sample with --write-data: {rc} {err!r}")

    # training documents for the task: the loss on the queried values only; mnemo train reads them
    data = os.path.join(td, "dict.jsonl")
    rc, out, err = run("dict-lookup", "--write-data", data, "--lengths", "128", "--query-tokens", "64",
                       "--samples", "4")
    docs = [json.loads(l) for l in open(data)] if rc == 0 else []
    check(len(docs) == 4 and all(len(d["tokens"]) == 128 and len(d["loss"]) == 128 and sum(d["loss"]) == 24
                                 and d["tokens"][0] == 1 and max(d["tokens"]) < 64 for d in docs),
          f"--write-data: {rc} {err!r}")
    # --loss-on-keys: the same documents, the loss also on each query's k2..k4 (after <q> k1) and nowhere else
    data_k = os.path.join(td, "dict_keys.jsonl")
    rc, out, err = run("dict-lookup", "--write-data", data_k, "--lengths", "128", "--query-tokens", "64",
                       "--samples", "4", "--loss-on-keys")
    docs_k = [json.loads(l) for l in open(data_k)] if rc == 0 else []
    keys_ok = len(docs_k) == 4
    for d, k in zip(docs, docs_k):
        want = list(d["loss"])
        for t, tok in enumerate(d["tokens"]):
            if tok == 5:  # <q>
                want[t + 2] = want[t + 3] = want[t + 4] = 1
        keys_ok &= k["tokens"] == d["tokens"] and k["loss"] == want and sum(k["loss"]) == 24 + 18
    check(keys_ok, f"--loss-on-keys: {rc} {err!r}")
    rc, out, err = run("dict-lookup", "--model", MHA, "--lengths", "128", "--loss-on-keys")
    check(rc == 2 and "needs --write-data" in err, f"--loss-on-keys without --write-data: {rc} {err!r}")
    rc, out, err = run("dict-lookup", "--model", MHA, "--lengths", "128", "--samples", "20000")
    check(rc == 2 and "more only with --write-data" in err, f"20000 scored documents: {rc} {err!r}")
    rc, out, err = run("dict-lookup", "--write-data", os.path.join(td, "conf.jsonl"), "--lengths", "257",
                       "--query-tokens", "128", "--samples", "3", "--confusable", "100")
    conf = [json.loads(l)["tokens"] for l in open(os.path.join(td, "conf.jsonl"))] if rc == 0 else []
    def near_misses(t):  # definitions sharing 2+ key symbols with another; every query still answered
        defs = {tuple(t[i + 1:i + 5]): tuple(t[i + 6:i + 10]) for i in range(len(t) - 9) if t[i] == 3}
        keys = list(defs)
        answered = all(defs.get(tuple(t[i + 1:i + 5])) == tuple(t[i + 6:i + 10]) for i in range(len(t) - 9) if t[i] == 5)
        return answered and sum(sum(a == b for a, b in zip(k, o)) >= 2 for k in keys for o in keys if k != o)
    check(len(conf) == 3 and all(near_misses(t) >= 10 for t in conf), f"--confusable 100: {rc} {err!r}")
    rc, out, err = run("dict-lookup", "--model", MHA, "--lengths", "128", "--confusable", "10")
    check(rc == 2 and "--confusable shapes training data" in err, f"--confusable without --write-data: {rc} {err!r}")
    p = subprocess.run([BIN, "train", "--model", MHA, "--data", data, "--seq-len", "127", "--steps", "1",
                        "--batch", "2", "--out", os.path.join(td, "dict_lora")], capture_output=True, timeout=300)
    check(p.returncode == 0, f"mnemo train reads the task's documents: {p.stderr.decode()[-300:]}")
    eval_doc = lines(run("dict-lookup", "--model", MHA, "--lengths", "128", "--query-tokens", "64", "--samples", "1",
                         "--json")[1])
    check(eval_doc and eval_doc[0]["length"] == 128, "the same length evaluates")

    # passkey through eval
    rc, out, err = run("passkey", "--model", LL, "--lengths", "256", "--depths", "0.5", "--trials", "1", "--json")
    r = [x for x in lines(out) if x.get("eval") == "passkey"]
    check(rc == 0 and len(r) == 1 and r[0]["length"] == 256, f"eval passkey: {rc} {out!r} {err!r}")
    results["passkey"] = out

    # bad input: one clear message, exit 2
    for args, want in ((["perplexity", "--model", MHA], "--data FILE is required"),
                       (["perplexity", "--model", MHA, "--data", TEXT, "--window", "64", "--stride", "64"],
                        "must be below --window"),
                       (["perplexity", "--model", MHA, "--data", TEXT, "--memory", "on"], "needs a model with memory"),
                       (["forgetting-curve", "--model", MHA, "--data", TEXT, "--lengths", "64,32"], "must increase"),
                       (["forgetting-curve", "--model", MHA, "--data", TEXT, "--lengths", "4K", "--max-length", "9"],
                        "not both"),
                       (["dict-lookup", "--lengths", "12x"], "expects comma-separated integers"),
                       (["dict-lookup", "--lengths", "100"], "cannot hold a definition"),
                       (["nonsense"], "unknown task")):
        rc, out, err = run(*args)
        check(rc == 2 and want in err and err.count("\n") == 1, f"{args}: exit {rc}, {err!r}")
    rc, out, err = run("forgetting-curve", "--model", MHA, "--data", TEXT, "--lengths", "100000")
    check(rc == 1 and "two disjoint spans" in err, f"text too short for the length: {rc} {err!r}")
    rc, out, err = run("dict-lookup", "--model", MHA, "--data", TEXT)
    check(rc == 2 and "unknown option '--data'" in err, f"dict-lookup takes no data: {err!r}")

    # plots: one PNG per task
    py = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    if subprocess.run([py, "-c", "import matplotlib"], capture_output=True).returncode != 0:
        print("note: matplotlib missing (scripts/install-deps.sh installs python3-matplotlib); plots not checked")
    else:
        for task, out in results.items():
            src, png = os.path.join(td, task + ".jsonl"), os.path.join(td, task + ".png")
            with open(src, "w") as f:
                f.write(out)
            p = subprocess.run([py, os.path.join(SRC, "scripts", "plot_eval.py"), src, "-o", png],
                               capture_output=True, timeout=120)
            with open(png, "rb") if os.path.exists(png) else open(os.devnull, "rb") as f:
                head = f.read(8)
            check(p.returncode == 0 and head == b"\x89PNG\r\n\x1a\n", f"plot {task}: {p.stderr.decode()[-300:]}")
        p = subprocess.run([py, os.path.join(SRC, "scripts", "plot_eval.py"), TEXT, "-o", os.path.join(td, "x.png")],
                           capture_output=True, timeout=120)
        check(p.returncode != 0 and b"no 'mnemo eval --json' lines" in p.stderr, "plot of a file that is not results")

        # the proof script end to end on 2-step stages (its figures are a benchmark's; this checks it still runs:
        # data, every training stage, the evaluation copies, four result files, the table, the plot), then again:
        # every stage is found done and nothing retrains
        work = os.path.join(td, "proof")
        env = dict(os.environ, BUILD=os.path.dirname(BIN), DOCS="40", SAMPLES="1", LENGTHS="65,256",
                   STEPS_C65="2", STEPS_D1="2", STEPS_NEG="2", STEPS_257="2", STEPS_513="2", STEPS_LAST="2",
                   STEPS_513B="2", STEPS_1025="2", STEPS_2049="2", SCALE="qk", STEPS_Q65="3", STOP_Q65="2",
                   STEPS_QD1="2", STEPS_QNEG="2", STEPS_Q257="2", STEPS_Q513="2", STEPS_QD64="3",
                   STOP_QD64="2", STEPS_QCONF="2", STEPS_QC513="2",
                   STEPS_QC513M="2", STEPS_QR64="2")
        script = os.path.join(SRC, "tests", "bench", "proof_dict_lookup.sh")
        p = subprocess.run(["bash", script, work], capture_output=True, timeout=300, env=env)
        table = [l for l in p.stdout.decode().splitlines() if l.startswith("qk_")]
        check(p.returncode == 0 and len(table) == 4 and all(" 65 " in l and " 256 " in l for l in table)
              and os.path.exists(os.path.join(work, "results", "qk.png")),
              f"proof_dict_lookup.sh: {p.returncode} {table} {p.stderr.decode()[-400:]}")
        p = subprocess.run(["bash", script, work], capture_output=True, timeout=300, env=env)
        check(p.returncode == 0 and b'"step"' not in p.stdout and len(
            [l for l in p.stdout.decode().splitlines() if l.startswith("qk_")]) == 4,
              f"proof_dict_lookup.sh again: nothing retrains ({p.returncode})")

finish()
