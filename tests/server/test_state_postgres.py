"""Several mnemo-server nodes over one PostgreSQL database (--state postgresql://...), on real parts: a throw-away
cluster made with initdb / pg_ctl in a temp dir (as the `postgres` user when the tests run as root), real servers on
loopback ports. A session saved on node A restores on node B and continues the same; concurrent saves of one snapshot
from two nodes (one 409); a fine-tuning job whose node is killed with SIGKILL is resumed by another node from the
checkpoint in the database and ends with the same adapter bytes as a run never interrupted, served by every node;
the database restarted under load (503 with Retry-After, then served again without a node restart); an unreachable
database at start (exit 1, or --state-wait); the schema's version row, and a newer schema refused.

Skips (loudly) only when no PostgreSQL server binaries are installed (Debian: apt-get install postgresql).
"""
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from conftest import BIN, FIXTURES, Server

LONGLLAMA = os.path.join(FIXTURES, "longllama", "basic")
MHA = os.path.join(FIXTURES, "models", "mha")
EXAMPLES = [{"prompt": f"Question {i}: what is the colour of the sky?", "completion": " Blue, always blue."}
            for i in range(16)]
# Long enough that a checkpoint lands in the database before the node is killed, short enough for 2 cores.
JOB = {"model": "mha", "suffix": "n", "seed": 7,
       "hyperparameters": {"n_epochs": 1, "batch_size": 2, "learning_rate_multiplier": 10},
       "extra": {"steps": 400, "seq_len": 48, "checkpoint_every": 40}}


def pg_bindir():
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
    if found:
        return os.path.dirname(found[-1])
    ctl = shutil.which("pg_ctl")
    return os.path.dirname(ctl) if ctl and shutil.which("initdb") else None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """A throw-away PostgreSQL cluster: trust authentication on 127.0.0.1 only, fsync off (a test's data)."""

    def __init__(self, bindir):
        self.bindir = bindir
        self.root = tempfile.mkdtemp(prefix="mnemo-pg-")
        self.data = os.path.join(self.root, "data")
        self.port = free_port()
        self.as_postgres = os.geteuid() == 0  # initdb refuses root
        if self.as_postgres:
            shutil.chown(self.root, "postgres")
        self.run("initdb", "-D", self.data, "-A", "trust", "-U", "mnemo", "--no-sync")
        self.start()

    def run(self, tool, *args, check=True):
        cmd = [os.path.join(self.bindir, tool), *args]
        if self.as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if check and out.returncode != 0:
            raise RuntimeError(f"{tool} failed: {out.stdout}{out.stderr}")
        return out

    def start(self):
        opts = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off"
        self.run("pg_ctl", "-D", self.data, "-o", opts, "-l", os.path.join(self.root, "log"), "-w", "start")

    def stop(self):
        self.run("pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop", check=False)

    def createdb(self, name):
        self.run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "mnemo", name)
        return f"postgresql://mnemo@127.0.0.1:{self.port}/{name}"

    def sql(self, db, query):
        return self.run("psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "mnemo", "-d", db, "-At", "-c",
                        query).stdout.strip()

    def destroy(self):
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="module")
def pg():
    bindir = pg_bindir()
    if not bindir:
        msg = ("\n*** test_state_postgres SKIPPED: no PostgreSQL server binaries (initdb, pg_ctl) found under "
               "/usr/lib/postgresql/*/bin or on PATH; install Debian's postgresql (scripts/install-deps.sh does) ***\n")
        sys.stderr.write(msg)
        pytest.skip(msg.strip())
    c = Cluster(bindir)
    yield c
    c.destroy()


_db_seq = [0]


@pytest.fixture
def db(pg):
    _db_seq[0] += 1
    return pg.createdb(f"t{os.getpid()}_{_db_seq[0]}")


def node(url, *args, model=LONGLLAMA, name="a"):
    return Server("--state", url, "--node-id", name, "--lease", "2", "--parallel", "2", *args, model=model)


def post(s, path, body):
    return s.post(path, body)


def text_of(s, session, prompt, n=12):
    st, out = post(s, "/v1/completions", {"prompt": prompt, "max_tokens": n, "temperature": 0, "session": session})
    assert st == 200, out
    return out["choices"][0]["text"]


DOC = "The treaty was signed in Vienna by the two envoys; the archive keeps both copies. " * 6


def test_session_saved_on_a_restores_on_b(db):
    a, b = node(db, name="a"), node(db, name="b")
    try:
        assert post(a, "/v1/sessions", {"id": "doc"})[0] == 201
        assert post(a, "/v1/completions", {"prompt": DOC, "max_tokens": 0, "session": "doc"})[0] == 200
        st, saved = post(a, "/v1/sessions/doc/save", {"name": "doc.v1"})
        assert st == 200 and saved["version"] == 1 and saved["bytes"] > 0, saved
        # B has never seen the document: it restores the snapshot from the database
        st, restored = post(b, "/v1/sessions", {"id": "doc", "restore": "doc.v1"})
        assert st == 201 and restored["tokens"] > 0, restored
        st, listed = b.get_json("/v1/snapshots")
        assert [(x["name"], x["version"], x["bytes"]) for x in listed["data"]] == [("doc.v1", 1, saved["bytes"])]
        q = " Q: where was it signed? A:"
        assert text_of(a, "doc", q) == text_of(b, "doc", q)
        # a snapshot deleted on A is gone on B
        assert a.request("DELETE", "/v1/snapshots/doc.v1")[0] == 200
        assert post(b, "/v1/sessions", {"id": "again", "restore": "doc.v1"})[0] == 404
    finally:
        a.stop(), b.stop()


def test_concurrent_saves_one_wins(db):
    a, b = node(db, name="a"), node(db, name="b")
    try:
        post(a, "/v1/sessions", {"id": "s"})
        post(a, "/v1/completions", {"prompt": DOC, "max_tokens": 0, "session": "s"})
        assert post(a, "/v1/sessions/s/save", {"name": "shared"})[1]["version"] == 1
        assert post(b, "/v1/sessions", {"id": "s", "restore": "shared"})[0] == 201
        # both continue version 1, then both save it at once: one compare-and-swap wins
        for s, extra in ((a, " more from a"), (b, " more from b")):
            assert post(s, "/v1/completions", {"prompt": extra, "max_tokens": 2, "session": "s"})[0] == 200
        results = {}
        go = threading.Barrier(2)

        def save(tag, s):
            go.wait()
            results[tag] = post(s, "/v1/sessions/s/save", {"name": "shared"})

        ts = [threading.Thread(target=save, args=(t, s)) for t, s in (("a", a), ("b", b))]
        [t.start() for t in ts]
        [t.join() for t in ts]
        codes = sorted(r[0] for r in results.values())
        assert codes == [200, 409], results
        lost = next(r[1] for r in results.values() if r[0] == 409)
        assert lost["error"]["code"] == "snapshot_version_conflict", lost
        assert a.get_json("/v1/snapshots")[1]["data"][0]["version"] == 2
        # the loser restores the winner's version and can save again; an explicit stale if_version is refused
        loser = a if results["a"][0] == 409 else b
        assert post(loser, "/v1/sessions/s/restore", {"name": "shared"})[0] == 200
        assert post(loser, "/v1/sessions/s/save", {"name": "shared"})[1]["version"] == 3
        assert post(loser, "/v1/sessions/s/save", {"name": "shared", "if_version": 2})[0] == 409
        assert post(loser, "/v1/sessions/s/save", {"name": "fresh", "if_version": 0})[1]["version"] == 1
        assert post(loser, "/v1/sessions/s/save", {"name": "fresh", "if_version": 0})[0] == 409
    finally:
        a.stop(), b.stop()


def upload(s):
    rows = "".join(json.dumps(r) + "\n" for r in EXAMPLES)
    bd = "mnemoboundary"
    body = (f"--{bd}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nfine-tune\r\n--{bd}\r\n"
            f"Content-Disposition: form-data; name=\"file\"; filename=\"t.jsonl\"\r\n\r\n{rows}\r\n--{bd}--\r\n")
    st, _, data = s.request("POST", "/v1/files", body, {"Content-Type": f"multipart/form-data; boundary={bd}"})
    assert st == 200, data
    return json.loads(data)["id"]


def wait_job(s, job_id, pred, timeout=180):
    end = time.time() + timeout
    while time.time() < end:
        st, j = s.get_json(f"/v1/fine_tuning/jobs/{job_id}")
        if st == 200 and pred(j):
            return j
        time.sleep(0.1)
    raise AssertionError(f"job {job_id}: {j}")


def adapter(work, job_id):
    with open(os.path.join(work, "jobs", job_id, "out", "adapter_model.safetensors"), "rb") as f:
        return f.read()


def test_job_resumed_on_another_node_after_sigkill(pg, tmp_path):
    # the run never interrupted, on a database of its own
    ref_dir = str(tmp_path / "ref")
    ref = node(pg.createdb(f"ref{os.getpid()}"), "--jobs-dir", ref_dir, model=MHA, name="ref")
    try:
        jr = post(ref, "/v1/fine_tuning/jobs", dict(JOB, training_file=upload(ref)))[1]
        wait_job(ref, jr["id"], lambda j: j["status"] == "succeeded")
        want = adapter(ref_dir, jr["id"])
    finally:
        ref.stop()

    url = pg.createdb(f"kill{os.getpid()}")
    dirs = {n: str(tmp_path / n) for n in "abc"}
    a = node(url, "--jobs-dir", dirs["a"], model=MHA, name="a")
    b = c = None
    try:
        job = post(a, "/v1/fine_tuning/jobs", dict(JOB, training_file=upload(a)))[1]
        wait_job(a, job["id"], lambda j: j["status"] == "running")
        end = time.time() + 120
        while not a.get_json(f"/v1/fine_tuning/jobs/{job['id']}/checkpoints")[1]["data"]:
            assert time.time() < end
            time.sleep(0.05)
        # B trains, C only serves; both start while A holds the job's lease
        b = node(url, "--jobs-dir", dirs["b"], model=MHA, name="b")
        c = node(url, "--jobs-dir", dirs["c"], "--max-jobs", "0", model=MHA, name="c")
        a.proc.kill()
        a.proc.wait()
        done = wait_job(b, job["id"], lambda j: j["status"] in ("succeeded", "failed", "cancelled"))
        assert done["status"] == "succeeded", done
        events = [e["message"] for e in c.get_json(f"/v1/fine_tuning/jobs/{job['id']}/events?limit=1000")[1]["data"]]
        assert any("Node a stopped renewing its lease; node b resumes the job from the checkpoint" in m
                   for m in events), events
        assert adapter(dirs["b"], job["id"]) == want  # bit for bit, as the run never interrupted
        # stored once, served by every node, the one that never trained it too
        name = done["fine_tuned_model"]
        assert pg.sql(url.rsplit("/", 1)[1], "SELECT count(*) FROM mnemo_adapters") == "1"
        assert name in [m["id"] for m in c.get_json("/v1/models")[1]["data"]]
        outs = [post(s, "/v1/completions", {"model": name, "prompt": "Question 3: what is the colour of the sky?",
                                            "max_tokens": 6, "temperature": 0}) for s in (b, c)]
        assert outs[0][0] == outs[1][0] == 200 and outs[0][1]["choices"] == outs[1][1]["choices"], outs
    finally:
        for s in (b, c):
            if s:
                s.stop()


def test_database_restart_under_load(pg, db):
    a = node(db, name="a")
    try:
        post(a, "/v1/sessions", {"id": "s"})
        post(a, "/v1/completions", {"prompt": DOC, "max_tokens": 0, "session": "s"})
        assert post(a, "/v1/sessions/s/save", {"name": "snap"})[0] == 200
        seen, stop = [], threading.Event()

        def load():
            while not stop.is_set():
                st, hdrs, body = a.request("GET", "/v1/snapshots")
                seen.append((st, hdrs.get("retry-after"), body[:200]))

        threads = [threading.Thread(target=load) for _ in range(2)]
        [t.start() for t in threads]
        time.sleep(0.3)
        pg.stop()
        time.sleep(0.5)
        down = a.request("POST", "/v1/sessions/s/save", {"name": "snap"})
        pg.start()
        time.sleep(0.5)
        stop.set()
        [t.join() for t in threads]
        assert down[0] == 503 and down[1].get("retry-after") == "1", down
        assert b"state database is unavailable" in down[2], down
        codes = {s for s, _, _ in seen}
        assert codes <= {200, 503}, seen
        assert 503 in codes and all(r == "1" for s, r, _ in seen if s == 503), seen
        # reconnected by itself: served again, and nothing half-written by the failed save
        st, listed = a.get_json("/v1/snapshots")
        assert st == 200 and [x["version"] for x in listed["data"]] == [1], listed
        assert post(a, "/v1/sessions/s/save", {"name": "snap"})[1]["version"] == 2
        assert a.proc.poll() is None
    finally:
        a.stop()


def test_unreachable_database_and_schema(pg, db):
    closed = f"postgresql://mnemo@127.0.0.1:{free_port()}/x"
    t0 = time.time()
    out = subprocess.run([BIN, "--model", MHA, "--port", "0", "--state", closed, "--state-wait", "1"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "cannot reach the state database" in out.stderr, out.stderr
    assert time.time() - t0 >= 1
    out = subprocess.run([BIN, "--model", MHA, "--port", "0", "--state", "not a conninfo"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 1 and "--state" in out.stderr, out.stderr
    # --state-wait: the node waits for a database that comes up
    pg.stop()
    s = None
    try:
        starter = threading.Timer(1.0, pg.start)
        starter.start()
        s = Server("--state", db, "--state-wait", "30", model=MHA)
        starter.join()
        assert s.get_json("/v1/files")[0] == 200
    finally:
        if s:
            s.stop()
    name = db.rsplit("/", 1)[1]
    assert pg.sql(name, "SELECT version FROM mnemo_schema") == "1"
    pg.sql(name, "UPDATE mnemo_schema SET version = 99")
    out = subprocess.run([BIN, "--model", MHA, "--port", "0", "--state", db], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 1 and "newer than this mnemo-server knows" in out.stderr, out.stderr
