#!/usr/bin/env python3
"""Load benchmark for mnemo-server (loopback only, bounded in count and time, stdlib only).

Starts build/mnemo-server on the tiny fixture model on a free port (or uses --url), then runs --requests requests
from --concurrency client threads: most are streaming completions/chats, a tenth are malformed (must get 4xx with
an OpenAI error body), a tenth disconnect after their first chunk (must free their slot). Prints throughput,
p50/p99 time-to-first-token and inter-token latency, the count of unexpected errors (must be 0, else exit 1), and
the server's RSS before and after.

The client runs on the same machine, so the server gets --threads 1 by default: an OpenMP team that shares its cores
with dozens of busy client threads stalls at every barrier (on a 2-core machine --threads 2 made the same run ~20x
slower). On a dedicated machine give the server its cores (--threads 0) and run the client elsewhere via --url.

    python3 tests/bench/bench_server.py                      # 500 requests, 32 concurrent
    python3 tests/bench/bench_server.py --requests 2000 --concurrency 64 --max-tokens 64 --parallel 8
"""
import argparse
import http.client
import json
import os
import queue
import random
import re
import statistics
import subprocess
import sys
import threading
import time
from urllib.parse import urlparse

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

MALFORMED = [
    ("POST", "/v1/completions", "{not json"),
    ("POST", "/v1/completions", json.dumps({"prompt": "x", "temperature": 9})),
    ("POST", "/v1/completions", json.dumps({"prompt": [1, 99999]})),
    ("POST", "/v1/chat/completions", json.dumps({"messages": [{"role": "wizard", "content": "x"}]})),
    ("POST", "/v1/completions", json.dumps({"prompt": "word " * 400})),
    ("GET", "/v1/completions", None),
    ("POST", "/v1/nothing", "{}"),
    ("POST", "/v1/completions", json.dumps({"model": "gpt-4", "prompt": "x"})),
]
PROMPTS = ["To be, or not to be", "Once upon a time", "The king is dead", "Shall I compare thee",
           "Now is the winter of our discontent", "Friends, Romans, countrymen", "All the world's a stage"]


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.ttft, self.itl = [], []
        self.ok = self.malformed = self.disconnected = 0
        self.tokens = 0
        self.unexpected = []

    def error(self, what):
        with self.lock:
            self.unexpected.append(what)


def one_stream(host, port, body, path, stats, disconnect, timeout):
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    t0 = time.perf_counter()
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        stats.error(f"{path}: HTTP {resp.status} {resp.read()[:200]!r}")
        conn.close()
        return
    first, last, gaps, usage, done = None, None, [], None, False
    for raw in resp:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data: "):
            continue
        payload = line[6:]
        if payload == "[DONE]":
            done = True
            break
        ev = json.loads(payload)
        if "error" in ev:
            stats.error(f"{path}: error event {ev['error']}")
            break
        if ev.get("usage"):
            usage = ev["usage"]
        ch = ev.get("choices") or []
        if not ch:
            continue
        c = ch[0]
        has_text = bool(c.get("text") or (c.get("delta") or {}).get("content"))
        if not has_text:
            continue
        now = time.perf_counter()
        if first is None:
            first = now
            if disconnect:  # leave abruptly after the first token
                conn.sock.close() if conn.sock else None
                conn.close()
                with stats.lock:
                    stats.disconnected += 1
                return
        else:
            gaps.append(now - last)
        last = now
    conn.close()
    if not done or usage is None or first is None:
        stats.error(f"{path}: stream ended without text, usage or [DONE]")
        return
    if usage["completion_tokens"] != body["max_tokens"]:
        stats.error(f"{path}: {usage['completion_tokens']} tokens, wanted {body['max_tokens']}")
    with stats.lock:
        stats.ok += 1
        stats.ttft.append(first - t0)
        stats.itl.extend(gaps)
        stats.tokens += usage["completion_tokens"]


def one_malformed(host, port, req, stats, timeout):
    method, path, body = req
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    conn.request(method, path, body, {"Content-Type": "application/json"} if body else {})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    try:
        err = json.loads(data)["error"]
        shaped = bool(err["message"]) and "type" in err and "param" in err and "code" in err
    except (ValueError, KeyError, TypeError):
        shaped = False
    if not (400 <= resp.status < 500) or not shaped:
        stats.error(f"malformed {method} {path}: HTTP {resp.status} {data[:200]!r}")
        return
    with stats.lock:
        stats.malformed += 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", default=os.path.join(ROOT, "build", "mnemo-server"))
    ap.add_argument("--model", default=os.path.join(ROOT, "tests", "fixtures", "models", "mha"))
    ap.add_argument("--url", help="use a running server (loopback only) instead of starting one")
    ap.add_argument("--requests", type=int, default=500)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--parallel", type=int, default=8, help="server slots (when starting the server)")
    ap.add_argument("--threads", type=int, default=1, help="server compute threads (0 = all cores)")
    ap.add_argument("--malformed", type=float, default=0.1, help="fraction of malformed requests")
    ap.add_argument("--disconnect", type=float, default=0.1, help="fraction that hang up after the first token")
    ap.add_argument("--time-limit", type=float, default=300, help="stop dispatching after this many seconds")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    a.requests = max(1, min(a.requests, 100000))
    a.concurrency = max(1, min(a.concurrency, 512))

    proc = None
    if a.url:
        u = urlparse(a.url)
        host, port = u.hostname, u.port or 80
        if host not in ("127.0.0.1", "localhost", "::1"):
            sys.exit("bench_server: loopback URLs only")
        pid = None
    else:
        cmd = [a.server, "--model", a.model, "--port", "0", "--parallel", str(a.parallel),
               "--queue", str(max(64, a.concurrency * 2)), "--max-conns", str(a.concurrency * 2 + 16),
               "--threads", str(a.threads)]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        host, port = "127.0.0.1", None
        for line in proc.stderr:
            m = re.search(r"listening on http://[^ ]*:(\d+)", line)
            if m:
                port = int(m.group(1))
            if "ready:" in line:
                print(line.strip())
                break
        if port is None:
            sys.exit("bench_server: the server did not start")
        threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
        pid = proc.pid

    def warm():
        conn = http.client.HTTPConnection(host, port, timeout=60)
        conn.request("POST", "/v1/completions", json.dumps({"prompt": "warm up", "max_tokens": 4}),
                     {"Content-Type": "application/json"})
        assert conn.getresponse().read()
        conn.close()

    def metric(text, name):
        m = re.search(r"^" + re.escape(name) + r" (\S+)", text, re.M)
        return float(m.group(1)) if m else 0.0

    def scrape():
        conn = http.client.HTTPConnection(host, port, timeout=10)
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
        conn.close()
        return text

    warm()
    rss_before = rss_kib(pid) if pid else None
    m_before = scrape()

    rng = random.Random(a.seed)
    plan = []
    for i in range(a.requests):
        r = rng.random()
        kind = "malformed" if r < a.malformed else "disconnect" if r < a.malformed + a.disconnect else "ok"
        plan.append((i, kind))
    work = queue.Queue()
    for p in plan:
        work.put(p)
    stats = Stats()
    t_start = time.perf_counter()
    deadline = t_start + a.time_limit

    def client():
        while time.perf_counter() < deadline:
            try:
                i, kind = work.get_nowait()
            except queue.Empty:
                return
            try:
                if kind == "malformed":
                    one_malformed(host, port, MALFORMED[i % len(MALFORMED)], stats, 60)
                    continue
                chat = i % 2 == 1
                body = {"max_tokens": a.max_tokens, "ignore_eos": True, "stream": True,
                        "stream_options": {"include_usage": True}, "temperature": 0.8, "seed": i}
                if chat:
                    body["messages"] = [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}]
                else:
                    body["prompt"] = PROMPTS[i % len(PROMPTS)]
                one_stream(host, port, body, "/v1/chat/completions" if chat else "/v1/completions", stats,
                           kind == "disconnect", 60)
            except Exception as e:  # noqa: BLE001 - every failure is counted and shown
                stats.error(f"request {i} ({kind}): {type(e).__name__}: {e}")

    threads = [threading.Thread(target=client) for _ in range(a.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t_start
    not_run = work.qsize()

    # No slot may stay busy once the clients are gone (the disconnected ones included).
    busy, text = None, ""
    for _ in range(100):
        text = scrape()
        busy = metric(text, "mnemo_requests_running")
        if busy == 0:
            break
        time.sleep(0.05)
    if busy != 0:
        stats.error(f"{busy:.0f} slots still busy after every client finished")
    rss_after = rss_kib(pid) if pid else None

    done = stats.ok + stats.malformed + stats.disconnected
    print(f"requests: {a.requests} planned, {done} done ({stats.ok} streamed to the end, {stats.malformed} malformed "
          f"-> 4xx, {stats.disconnected} disconnected early), {not_run} not run (time limit)")
    print(f"concurrency {a.concurrency}, max_tokens {a.max_tokens}, wall {wall:.2f} s")
    print(f"throughput: {done / wall:.1f} requests/s, {stats.tokens / wall:.0f} generated tokens/s "
          f"(completed streams only)")
    steps = metric(text, "mnemo_batch_steps_total") - metric(m_before, "mnemo_batch_steps_total")
    seqs = metric(text, "mnemo_batch_sequences_total") - metric(m_before, "mnemo_batch_sequences_total")
    if steps:
        print(f"server: {steps:.0f} batched forward passes, {seqs / steps:.2f} sequences per pass on average")
    print(f"time to first token: p50 {pct(stats.ttft, 50) * 1e3:.1f} ms, p99 {pct(stats.ttft, 99) * 1e3:.1f} ms")
    print(f"inter-token latency: p50 {pct(stats.itl, 50) * 1e3:.2f} ms, p99 {pct(stats.itl, 99) * 1e3:.2f} ms")
    if rss_before:
        print(f"server RSS: before {rss_before / 1024:.1f} MiB, after {rss_after / 1024:.1f} MiB")
    print(f"unexpected errors: {len(stats.unexpected)}")
    for e in stats.unexpected[:20]:
        print("  " + e)
    if proc:
        proc.terminate()
        rc = proc.wait(60)
        print(f"server exit status after SIGTERM: {rc}")
        if rc != 0:
            stats.error(f"server exited {rc}")
    return 1 if stats.unexpected or not_run else 0


if __name__ == "__main__":
    sys.exit(main())
