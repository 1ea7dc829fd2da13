"""The state layer of several nodes, measured: session snapshot save / restore through PostgreSQL (--state) against
the local disk (--session-dir), for sessions holding 8K and 100K tokens of LongLLaMA memory; and requests/s of 1, 2
and 3 nodes (each --threads 1 --parallel 1) over one database behind a loopback round-robin client.

Runs a throw-away PostgreSQL cluster like tests/server/test_state_postgres.py (initdb / pg_ctl in a temp dir).

    build/server-venv/bin/python tests/bench/bench_state_postgres.py [--bin build/mnemo-server] [--reps 5]
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "server"))
os.environ.setdefault("MNEMO_FIXTURES", os.path.join(HERE, "..", "fixtures"))

ap = argparse.ArgumentParser()
ap.add_argument("--bin", default=os.path.join(HERE, "..", "..", "build", "mnemo-server"))
ap.add_argument("--reps", type=int, default=5)
ap.add_argument("--sizes", default="8192,102400", help="tokens of memory per snapshot")
ap.add_argument("--rps-seconds", type=float, default=8)
ap.add_argument("--clients", type=int, default=6)
ap.add_argument("--only", choices=["snapshots", "rps"], help="one of the two measurements")
args = ap.parse_args()
os.environ["MNEMO_SERVER_BIN"] = args.bin

import conftest  # noqa: E402  (after MNEMO_SERVER_BIN)
from conftest import Server  # noqa: E402
from test_state_postgres import LONGLLAMA, MHA, Cluster, pg_bindir  # noqa: E402

conftest.BIN = args.bin


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def ingest(s, sid, tokens):
    """A session holding about `tokens` tokens (text of the tiny model's byte-level vocabulary)."""
    assert s.post("/v1/sessions", {"id": sid})[0] == 201
    text = "The treaty was signed in Vienna by the two envoys; the archive keeps both copies.\n"
    n_tok = len(s.post("/tokenize", {"content": text})[1]["tokens"])
    body = text * max(1, tokens // n_tok)
    st, out = s.post("/v1/completions", {"prompt": body, "max_tokens": 0, "session": sid})
    assert st == 200, out
    return s.get_json(f"/v1/sessions/{sid}")[1]["tokens"]


def snapshot_figures(bindir, sizes, reps):
    pg = Cluster(bindir)
    rows = []
    try:
        url = pg.createdb("bench")
        sdir = tempfile.mkdtemp(prefix="mnemo-bench-snap-")
        local = Server("--session-dir", sdir, "--parallel", "1", model=LONGLLAMA)
        a = Server("--state", url, "--node-id", "a", "--parallel", "1", model=LONGLLAMA)
        bdir = tempfile.mkdtemp(prefix="mnemo-bench-node-b-")
        b = Server("--state", url, "--node-id", "b", "--parallel", "1", "--jobs-dir", bdir, model=LONGLLAMA)
        bcache = os.path.join(bdir, "snapshots")
        try:
            for size in sizes:
                for name, s in (("local", local), ("postgres", a)):
                    sid = f"s{size}"
                    held = ingest(s, sid, size)
                    saves, same, other = [], [], []
                    for r in range(reps):
                        dt, (st, out) = timed(lambda: s.post(f"/v1/sessions/{sid}/save", {"name": f"n{size}"}))
                        assert st == 200, out
                        saves.append(dt)
                        nbytes = out["bytes"]
                        rid = f"r{size}_{r}"
                        dt, (st, _) = timed(lambda: s.post("/v1/sessions", {"id": rid, "restore": f"n{size}"}))
                        assert st == 201
                        same.append(dt)
                        s.request("DELETE", f"/v1/sessions/{rid}")
                        if name == "postgres":  # node b: nothing cached, every byte from the database
                            for f in os.listdir(bcache):
                                os.unlink(os.path.join(bcache, f))
                            dt, (st, _) = timed(lambda: b.post("/v1/sessions", {"id": rid, "restore": f"n{size}"}))
                            assert st == 201
                            other.append(dt)
                            b.request("DELETE", f"/v1/sessions/{rid}")
                    s.request("DELETE", f"/v1/sessions/{sid}")
                    med = statistics.median
                    rows.append({"backend": name, "tokens": held, "bytes": nbytes, "save_s": med(saves),
                                 "restore_same_node_s": med(same),
                                 "restore_other_node_s": med(other) if other else None})
                    print(json.dumps(rows[-1]), flush=True)
        finally:
            for s in (local, a, b):
                s.stop()
    finally:
        pg.destroy()
    return rows


def cpu_s(pids):
    """CPU seconds (user + system) used so far by these processes."""
    tick, total = os.sysconf("SC_CLK_TCK"), 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
        except OSError:
            pass
    return total


def db_pids(pg):
    """The postmaster and its children (backends, writers)."""
    with open(os.path.join(pg.data, "postmaster.pid")) as f:
        root = int(f.readline())
    out = [root]
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == root:
                        out.append(int(d))
            except OSError:
                pass
    return out


def rps_figures(bindir, seconds, clients):
    pg = Cluster(bindir)
    rows = []
    try:
        for n in (1, 2, 3):
            url = pg.createdb(f"rps{n}")
            nodes = [Server("--state", url, "--node-id", f"n{i}", "--parallel", "1", model=MHA) for i in range(n)]
            try:
                # each request: a short completion plus a read of the shared state (the files list)
                count, errors, lock, stop = [0], [0], threading.Lock(), threading.Event()
                rr = [0]

                def client():
                    while not stop.is_set():
                        with lock:
                            s = nodes[rr[0] % n]
                            rr[0] += 1
                        st1, _ = s.post("/v1/completions", {"prompt": "To be", "max_tokens": 8, "temperature": 0})
                        st2, _, _ = s.request("GET", "/v1/files")
                        with lock:
                            count[0] += 1
                            errors[0] += (st1, st2) != (200, 200)

                ts = [threading.Thread(target=client) for _ in range(clients)]
                dbp, nodep = db_pids(pg), [s.proc.pid for s in nodes]
                db0, node0 = cpu_s(dbp), cpu_s(nodep)
                t0 = time.perf_counter()
                [t.start() for t in ts]
                time.sleep(seconds)
                stop.set()
                [t.join() for t in ts]
                dt = time.perf_counter() - t0
                rows.append({"nodes": n, "requests_per_s": count[0] / dt, "errors": errors[0],
                             "db_cores": (cpu_s(db_pids(pg)) - db0) / dt, "node_cores": (cpu_s(nodep) - node0) / dt})
                print(json.dumps(rows[-1]), flush=True)
            finally:
                for s in nodes:
                    s.stop()
    finally:
        pg.destroy()
    return rows


def main():
    bindir = pg_bindir()
    if not bindir:
        sys.exit("no PostgreSQL server binaries (apt-get install postgresql)")
    sizes = [int(x) for x in args.sizes.split(",")]
    if args.only != "rps":
        snapshot_figures(bindir, sizes, args.reps)
    if args.only != "snapshots":
        rps_figures(bindir, args.rps_seconds, args.clients)


if __name__ == "__main__":
    main()
