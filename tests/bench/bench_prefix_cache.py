#!/usr/bin/env python3
"""Prefix reuse over HTTP: a long document asked one question, then another. The second request's time to first
token (max_tokens 1) with the slot's cache kept (default --cache-ram) against the cache released (--cache-ram 0, the
behaviour before prefix reuse: the whole prompt prefilled again), alternated in one run.

  python3 tests/bench/bench_prefix_cache.py [--model DIR] [--tokens 100000] [--reps 2] [--json]

Prints one line per run and the ratio. Stdlib only; the document is seeded random words.
"""
import argparse
import http.client
import json
import os
import random
import re
import subprocess
import threading
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
WORDS = ("the of and to in is was that for on with as by at from his her they this which but not are had have "
         "were one all their there been has when who will more no if out so said what up its about into than").split()


def start(binary, model, extra):
    cmd = [binary, "--port", "0", "--parallel", "1", "--timeout", "0", "--max-body", str(64 << 20), *extra]
    if model:
        cmd[1:1] = ["--model", model]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    port, seen = [None], threading.Event()

    def read():
        for line in proc.stderr:
            m = re.search(r"listening on http://[^ ]*:(\d+)", line)
            if m and port[0] is None:
                port[0] = int(m.group(1))
                seen.set()
        seen.set()
    threading.Thread(target=read, daemon=True).start()
    seen.wait(120)
    return proc, port[0]


def ask(port, prompt):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    t = time.time()
    conn.request("POST", "/v1/completions", json.dumps({"prompt": prompt, "max_tokens": 1, "temperature": 0}),
                 {"Content-Type": "application/json"})
    r = json.loads(conn.getresponse().read())
    return time.time() - t, r["usage"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None, help="checkpoint (default: the server's default model)")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "mnemo-server"))
    ap.add_argument("--tokens", type=int, default=100000, help="about this many words of document")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rng = random.Random(7)
    doc = " ".join(rng.choice(WORDS) for _ in range(a.tokens))
    rows = []
    for rep in range(a.reps):
        for name, extra in (("kept", []), ("released", ["--cache-ram", "0"])):
            proc, port = start(a.bin, a.model, extra)
            try:
                first, u1 = ask(port, doc + "\nQuestion: who was there?\nAnswer:")
                second, u2 = ask(port, doc + "\nQuestion: what did they say?\nAnswer:")
            finally:
                proc.terminate()
                proc.wait()
            row = {"config": name, "rep": rep, "prompt_tokens": u2["prompt_tokens"],
                   "cached_tokens": u2["prompt_tokens_details"]["cached_tokens"], "first_s": round(first, 3),
                   "second_s": round(second, 3)}
            rows.append(row)
            print(json.dumps(row) if a.json else
                  f"{name:9s} rep {rep}: {row['prompt_tokens']} tokens, first {first:.2f} s, second {second:.3f} s "
                  f"({row['cached_tokens']} cached)", flush=True)
    med = {c: sorted(r["second_s"] for r in rows if r["config"] == c)[len(rows) // 4] for c in ("kept", "released")}
    print(f"second request, time to first token: kept {med['kept']:.3f} s, released {med['released']:.3f} s, "
          f"{med['released'] / med['kept']:.0f}x faster with the prefix kept")


if __name__ == "__main__":
    main()
