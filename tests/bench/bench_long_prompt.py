#!/usr/bin/env python3
"""What one long prompt costs over HTTP, the way a user meets it: start mnemo-server, send one /v1/completions
request with a prompt of --tokens tokens, time it. Several configurations run alternately (A B A B ...) in the
same run, optionally beside CPU-bound competitor processes (--compete N: N busy loops, like another job on the
machine), so defaults and thread policies are compared under the same conditions.

  python3 tests/bench/bench_long_prompt.py --model tests/fixtures/longllama/basic --tokens 93000 \\
      --config "dense=--mem-knn 0" --config "default=" --reps 2 [--compete 1] [--json]

--config NAME=ARGS: extra mnemo-server arguments (shell words) for one configuration, leading VAR=VALUE words
setting its environment (e.g. "passive=OMP_WAIT_POLICY=passive --threads 2"); NAME=ARGS@BIN runs another
binary (e.g. a build from before a change). Prints one line per run and a summary (median seconds per config).
Stdlib only; the prompt is seeded random words, so every configuration sees the same tokens.
"""
import argparse
import http.client
import json
import multiprocessing
import os
import random
import re
import shlex
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
WORDS = ("the of and to in is was that for on with as by at from his her they this which but not are had have "
         "were one all their there been has when who will more no if out so said what up its about into than "
         "them can only other new some could time these two may then do first any my now such like our over "
         "man me even most made after also did many before must through back years where much your way well "
         "down should because each just those people mr how too little state good very make world still own").split()


def burn():
    while True:
        pass


class Server:
    def __init__(self, binary, model, args):
        env = dict(os.environ)
        while args and re.match(r"^[A-Z_][A-Z0-9_]*=", args[0]):
            k, _, v = args[0].partition("=")
            env[k] = v
            args = args[1:]
        cmd = [binary, "--model", model, "--port", "0", "--parallel", "1", "--timeout", "0", *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        self.port, seen = None, threading.Event()

        def read():
            for line in self.proc.stderr:
                m = re.search(r"listening on http://[^ ]*:(\d+)", line)
                if m and self.port is None:
                    self.port = int(m.group(1))
                    seen.set()
            seen.set()
        threading.Thread(target=read, daemon=True).start()
        seen.wait(120)
        if self.port is None:
            raise SystemExit(f"server {cmd} did not start")
        for _ in range(600):
            try:
                if self.call("GET", "/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise SystemExit("server not ready")

    def call(self, method, path, body=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=7200)
        c.request(method, path, json.dumps(body) if body is not None else None,
                  {"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, json.loads(data) if data else None

    def stop(self):
        self.proc.terminate()
        self.proc.wait(60)


def make_prompt(server, tokens, seed):
    rng = random.Random(seed)
    words = []
    while True:  # grow by estimate, then check with the server's own tokenizer
        words += [rng.choice(WORDS) for _ in range(max(1000, tokens // 2))]
        st, r = server.call("POST", "/tokenize", {"content": " ".join(words)})
        if st == 200 and len(r["tokens"]) >= tokens:
            lo, hi = 0, len(words)  # trim to the first prefix of >= tokens tokens
            while lo < hi:
                mid = (lo + hi) // 2
                st, r = server.call("POST", "/tokenize", {"content": " ".join(words[:mid])})
                if len(r["tokens"]) >= tokens:
                    hi = mid
                else:
                    lo = mid + 1
            return " ".join(words[:lo])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", default=os.path.join(ROOT, "build", "mnemo-server"))
    ap.add_argument("--model", default=os.path.join(ROOT, "tests", "fixtures", "longllama", "basic"))
    ap.add_argument("--tokens", type=int, default=93000)
    ap.add_argument("--config", action="append", default=[], help="NAME=ARGS[@BIN] (repeatable)")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--compete", type=int, default=0, help="CPU-bound competitor processes during the runs")
    ap.add_argument("--max-tokens", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    o = ap.parse_args()
    configs = []
    for c in o.config or ["default="]:
        name, _, rest = c.partition("=")
        args, _, binary = rest.partition("@")
        configs.append((name, shlex.split(args), binary or o.server))
    s = Server(configs[0][2], o.model, configs[0][1])
    prompt = make_prompt(s, o.tokens, o.seed)
    s.stop()
    burners = [multiprocessing.Process(target=burn, daemon=True) for _ in range(o.compete)]
    for b in burners:
        b.start()
    times = {name: [] for name, _, _ in configs}
    try:
        for rep in range(o.reps):
            for name, args, binary in configs:
                s = Server(binary, o.model, args)
                t0 = time.time()
                st, r = s.call("POST", "/v1/completions", {"prompt": prompt, "max_tokens": o.max_tokens,
                                                           "temperature": 0})
                dt = time.time() - t0
                s.stop()
                if st != 200:
                    raise SystemExit(f"{name}: HTTP {st}: {r}")
                times[name].append(dt)
                line = {"config": name, "args": args, "binary": binary, "rep": rep, "compete": o.compete,
                        "prompt_tokens": r["usage"]["prompt_tokens"], "seconds": round(dt, 3),
                        "loadavg": os.getloadavg()[0]}
                print(json.dumps(line) if o.json else
                      f"{name:>12} rep {rep}: {dt:8.2f} s  {r['usage']['prompt_tokens']} tokens  "
                      f"compete {o.compete}  load {line['loadavg']:.2f}", flush=True)
    finally:
        for b in burners:
            b.terminate()
    for name in times:
        med = statistics.median(times[name])
        summary = {"summary": name, "median_s": round(med, 3), "runs": times[name], "compete": o.compete}
        print(json.dumps(summary) if o.json else f"{name:>12}: median {med:.2f} s over {len(times[name])} runs",
              flush=True)


if __name__ == "__main__":
    main()
