"""Fine-tuning over HTTP against the real server: the official openai client uploads a file, creates a
job, follows it and uses the fine-tuned model; cancel, list and pagination; malformed requests; the worker and the
server killed with SIGKILL mid-job, restarted, and the job finishing from its last checkpoint with the same adapter,
bit for bit, as a run never interrupted; inference served while a job trains; --train-device.
"""
import json
import os
import signal
import statistics
import subprocess
import tempfile
import time

import pytest
from openai import OpenAI

from conftest import BIN, MODEL, Server

CLI = os.environ.get("MNEMO_CLI_BIN")
# Tiny data the model can learn in a few steps: a fixed answer to a fixed question.
EXAMPLES = [{"prompt": f"Question {i}: what is the colour of the sky?", "completion": " Blue, always blue."}
            for i in range(16)]
EXTRA = {"steps": 12, "seq_len": 48, "checkpoint_every": 3}
HYPER = {"n_epochs": 1, "batch_size": 2, "learning_rate_multiplier": 10}
# Long enough (a few seconds) that a worker can be caught alive between its checkpoints and killed.
LONG = {"steps": 3000, "seq_len": 48, "checkpoint_every": 100}


def write_jsonl(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def start(jobs_dir, *args):
    return Server("--jobs-dir", jobs_dir, "--parallel", "2", "--train-threads", "1", *args)


def client_of(s):
    return OpenAI(base_url=s.base + "/v1", api_key="unused", max_retries=0, timeout=60)


def upload(client, tmp, rows=EXAMPLES, name="train.jsonl"):
    path = os.path.join(tmp, name)
    write_jsonl(path, rows)
    with open(path, "rb") as f:
        return client.files.create(file=f, purpose="fine-tune")


def create(client, file_id, suffix="t", extra=EXTRA, hyper=HYPER, seed=7):
    return client.fine_tuning.jobs.create(model="mha", training_file=file_id, suffix=suffix, seed=seed,
                                          hyperparameters=hyper, extra_body={"extra": extra})


def wait_status(client, job_id, statuses, timeout=180):
    end = time.time() + timeout
    while time.time() < end:
        j = client.fine_tuning.jobs.retrieve(job_id)
        if j.status in statuses:
            return j
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} still {j.status}")


def adapter_bytes(jobs_dir, job_id):
    with open(os.path.join(jobs_dir, "jobs", job_id, "out", "adapter_model.safetensors"), "rb") as f:
        return f.read()


def worker_pid(job_id):
    out = subprocess.run(["pgrep", "-f", f"finetune-worker .*{job_id}"], capture_output=True, text=True).stdout
    pids = [int(p) for p in out.split()]
    return pids[0] if pids else None


def all_events(client, job_id):
    """Every event, newest first, page by page."""
    out, after = [], None
    while True:
        page = client.fine_tuning.jobs.list_events(job_id, limit=1000, **({"after": after} if after else {}))
        out += page.data
        if not page.has_more:
            return out
        after = page.data[-1].id


def wait_checkpoint(client, job_id, timeout=120):
    end = time.time() + timeout
    while time.time() < end:
        if client.fine_tuning.jobs.checkpoints.list(job_id).data:
            return
        time.sleep(0.05)
    raise AssertionError("no checkpoint")


@pytest.fixture(scope="module")
def reference():
    """An uninterrupted run: its job id, adapter bytes and jobs dir (shared by the resume tests)."""
    tmp = tempfile.mkdtemp()
    s = start(tmp)
    try:
        c = client_of(s)
        f = upload(c, tmp)
        j = create(c, f.id, suffix="ref")
        j = wait_status(c, j.id, {"succeeded", "failed", "cancelled"})
        assert j.status == "succeeded", j.error
        yield {"client": c, "server": s, "dir": tmp, "job": j, "adapter": adapter_bytes(tmp, j.id), "file": f}
    finally:
        assert s.stop() == 0, "".join(s.log)


@pytest.fixture(scope="module")
def long_reference(reference):
    """The uninterrupted adapter of a LONG run, which the killed runs must reproduce."""
    c = reference["client"]
    j = create(c, reference["file"].id, suffix="longref", extra=LONG)
    j = wait_status(c, j.id, {"succeeded", "failed", "cancelled"})
    assert j.status == "succeeded", j.error
    return adapter_bytes(reference["dir"], j.id)


def test_openai_flow(reference):
    c, j = reference["client"], reference["job"]
    assert j.fine_tuned_model == f"ft:mha:ref:{j.id}" and j.trained_tokens == 12 * 2 * 48
    assert j.model == "mha" and j.training_file == reference["file"].id and j.finished_at >= j.created_at
    events = c.fine_tuning.jobs.list_events(j.id, limit=100).data
    steps = [e for e in events if e.type == "metrics"]
    assert len(steps) == 12 and steps[0].data["step"] == 12  # newest first
    assert all(e.object == "fine_tuning.job.event" for e in events)
    assert any("successfully completed" in e.message for e in events)
    cks = c.fine_tuning.jobs.checkpoints.list(j.id).data
    assert [k.step_number for k in cks] == [12, 9, 6, 3]
    assert j.fine_tuned_model in [m.id for m in c.models.list().data]
    base = c.completions.create(model="mha", prompt="Question 99: what is the colour of the sky?", max_tokens=6,
                                temperature=0).choices[0].text
    tuned = c.completions.create(model=j.fine_tuned_model, prompt="Question 99: what is the colour of the sky?",
                                 max_tokens=6, temperature=0).choices[0].text
    assert tuned != base, (tuned, base)
    chat = c.chat.completions.create(model=j.fine_tuned_model, messages=[{"role": "user", "content": "hi"}],
                                     max_tokens=4, temperature=0)
    assert chat.choices[0].message.content is not None
    # the base keeps answering as the base after the fine-tuned model was used on the same slots
    assert c.completions.create(model="mha", prompt="Question 99: what is the colour of the sky?", max_tokens=6,
                                temperature=0).choices[0].text == base
    if CLI:
        out = subprocess.run([CLI, "generate", "--model", MODEL, "--threads", "1", "--adapter",
                              os.path.join(reference["dir"], "jobs", j.id, "out"), "--prompt",
                              "Question 99: what is the colour of the sky?", "-n", "6", "--temp", "0"],
                             capture_output=True, check=True).stdout.decode().removesuffix("\n")
        assert out == tuned
    st, props = reference["server"].get_json("/props")
    assert props["fine_tuning"] and j.fine_tuned_model in [a["id"] for a in props["adapters"]]
    m = reference["server"].metrics()
    assert m['mnemo_finetune_jobs{status="succeeded"}'] >= 1 and m["mnemo_finetune_steps_total"] >= 12


def test_events_stream(reference):
    s, j = reference["server"], reference["job"]
    status, hdrs, body = s.request("GET", f"/v1/fine_tuning/jobs/{j.id}/events?stream=true")
    assert status == 200 and hdrs["content-type"].startswith("text/event-stream")
    lines = [l[6:] for l in body.decode().splitlines() if l.startswith("data: ")]
    assert lines[-1] == "[DONE]" and json.loads(lines[0])["object"] == "fine_tuning.job.event"


def test_cancel_and_list(reference):
    c, tmp = reference["client"], reference["dir"]
    f = upload(c, tmp, name="long.jsonl")
    long_job = create(c, f.id, suffix="long", extra={"steps": 100000, "seq_len": 48})
    wait_status(c, long_job.id, {"running"})
    queued = create(c, f.id, suffix="q")  # --max-jobs 1: waits behind it
    assert wait_status(c, queued.id, {"queued"}).status == "queued"
    assert c.fine_tuning.jobs.cancel(queued.id).status == "cancelled"
    assert c.fine_tuning.jobs.cancel(long_job.id).status == "cancelled"  # at once, as OpenAI answers
    assert wait_status(c, long_job.id, {"cancelled", "failed", "succeeded"}).status == "cancelled"
    page = c.fine_tuning.jobs.list(limit=2)
    assert [x.id for x in page.data] == [queued.id, long_job.id] and page.has_more
    rest = c.fine_tuning.jobs.list(limit=10, after=long_job.id)
    assert reference["job"].id in [x.id for x in rest.data]
    s = reference["server"]
    st, body = s.post(f"/v1/fine_tuning/jobs/{long_job.id}/cancel", {})
    assert st == 409 and body["error"]["param"] == "fine_tuning_job_id"
    assert body["error"]["message"] == "the job was already cancelled"
    end = time.time() + 30
    while worker_pid(long_job.id) and time.time() < end:  # its worker saves a checkpoint and stops
        time.sleep(0.1)
    assert not worker_pid(long_job.id)
    end = time.time() + 10  # the supervisor reaps it within its next round
    while not any(e.message == "The worker has stopped" for e in all_events(c, long_job.id)) and time.time() < end:
        time.sleep(0.1)
    assert any(e.message == "The worker has stopped" for e in all_events(c, long_job.id))


def test_validation_file(reference):
    c, tmp = reference["client"], reference["dir"]
    v = upload(c, tmp, rows=EXAMPLES[:3], name="valid.jsonl")
    j = c.fine_tuning.jobs.create(model="mha", training_file=reference["file"].id, validation_file=v.id, seed=7,
                                  hyperparameters=HYPER, extra_body={"extra": EXTRA})
    j = wait_status(c, j.id, {"succeeded", "failed", "cancelled"})
    assert j.status == "succeeded" and j.validation_file == v.id, j.error
    cks = c.fine_tuning.jobs.checkpoints.list(j.id).data
    losses = [k.metrics.valid_loss for k in reversed(cks)]
    assert len(losses) == 4 and losses[-1] < losses[0], losses  # it learns the answer the validation file asks
    assert any("validation loss" in e.message for e in all_events(c, j.id))
    bad = upload(c, tmp, rows=[{"prompt": "word " * 400, "completion": " x"}], name="badvalid.jsonl")
    j = c.fine_tuning.jobs.create(model="mha", training_file=reference["file"].id, validation_file=bad.id,
                                  extra_body={"extra": EXTRA})
    j = wait_status(c, j.id, {"failed", "succeeded"})
    assert j.status == "failed" and j.error.code == "invalid_validation_file" and bad.id in j.error.message


def test_corrupt_checkpoint_fails_the_job_not_the_server():
    tmp = tempfile.mkdtemp()
    s = start(tmp)
    c = client_of(s)
    f = upload(c, tmp)
    j = create(c, f.id, suffix="corrupt", extra=LONG)
    wait_checkpoint(c, j.id)
    s.stop(signal.SIGKILL)
    time.sleep(0.5)  # the orphaned worker checkpoints and exits (SIGTERM from PDEATHSIG)
    state = os.path.join(tmp, "jobs", j.id, "out", "train_state.mnemo")
    with open(state, "r+b") as fh:
        fh.seek(os.path.getsize(state) // 2)
        fh.write(b"\xff\x00\xff\x00")
    s2 = start(tmp)
    try:
        c2 = client_of(s2)
        done = wait_status(c2, j.id, {"succeeded", "failed", "cancelled"})
        assert done.status == "failed" and "corrupt" in done.error.message, done.error
        assert c2.completions.create(model="mha", prompt="x", max_tokens=2).usage.completion_tokens == 2
    finally:
        assert s2.stop() == 0, "".join(s2.log)


def test_bad_requests(reference):
    s, fid = reference["server"], reference["file"].id
    ok = {"model": "mha", "training_file": fid}
    cases = [
        ({**ok, "model": "ft:mha:x:ftjob-000000000000000000000000"}, 404, "model"),
        ({**ok, "extra": {"stepz": 5}}, 400, "extra.stepz"),
        ({**ok, "hyperparameters": {"n_epoch": 2}}, 400, "hyperparameters.n_epoch"),
        ({**ok, "colour": "blue"}, 400, "colour"),
        ({"model": "mha"}, 400, "training_file"),
        ({**ok, "training_file": "file-000000000000000000000000"}, 404, "training_file"),
        ({**ok, "training_file": "../../etc/passwd"}, 404, "training_file"),
        ({**ok, "hyperparameters": {"n_epochs": 0}}, 400, "n_epochs"),
        ({**ok, "hyperparameters": {"learning_rate_multiplier": "fast"}}, 400, "learning_rate_multiplier"),
        ({**ok, "hyperparameters": {"batch_size": 1.5}}, 400, "batch_size"),
        ({**ok, "extra": {"seq_len": 100000}}, 400, "seq_len"),
        ({**ok, "suffix": "a/b"}, 400, "suffix"),
        ({**ok, "seed": -1}, 400, "seed"),
        ({**ok, "method": {"type": "dpo"}}, 400, "method.type"),
        ({**ok, "extra": {"fot": True}}, 400, "fot"),
    ]
    for body, code, param in cases:
        st, r = s.post("/v1/fine_tuning/jobs", body)
        assert st == code and r["error"]["param"] == param, (body, st, r)
    st, _, data = s.request("POST", "/v1/fine_tuning/jobs", "{not json")
    assert st == 400
    for path in ("/v1/fine_tuning/jobs/ftjob-000000000000000000000000", "/v1/fine_tuning/jobs/../../etc",
                 "/v1/fine_tuning/jobs/ftjob-000000000000000000000000/events"):
        assert s.request("GET", path)[0] == 404, path
    st, r = s.get_json("/v1/fine_tuning/jobs?limit=0")
    assert st == 400 and r["error"]["param"] == "limit"
    st, r = s.post("/v1/completions", {"model": "ft:mha:nope:ftjob-0", "prompt": "x", "max_tokens": 1})
    assert st == 404 and r["error"]["param"] == "model"


def test_defaults_teach_a_small_file(reference):
    """No hyperparameters at all: n_epochs "auto" from the file's size, a learning rate that moves a LoRA adapter,
    and a model that answers what the file taught; the events say what was chosen."""
    c, tmp = reference["client"], reference["dir"]
    rows = [{"prompt": f"Q{i}: the password?", "completion": " Swordfish."} for i in range(8)]
    f = upload(c, tmp, rows=rows, name="small.jsonl")
    j = c.fine_tuning.jobs.create(model="mha", training_file=f.id, seed=3)
    assert j.hyperparameters.n_epochs == "auto"
    j = wait_status(c, j.id, {"succeeded", "failed", "cancelled"})
    assert j.status == "succeeded", j.error
    assert j.hyperparameters.n_epochs == 13  # 8 examples: ceil(100 / 8)
    chosen = [e for e in all_events(c, j.id) if e.message.startswith("Hyperparameters:")]
    assert chosen and "n_epochs=13 (auto" in chosen[0].message and chosen[0].data["steps"] == 104
    prompt = "Q99: the password?"
    base = c.completions.create(model="mha", prompt=prompt, max_tokens=4, temperature=0).choices[0].text
    tuned = c.completions.create(model=j.fine_tuned_model, prompt=prompt, max_tokens=4, temperature=0)
    assert tuned.model == j.fine_tuned_model  # the response names what was asked for
    # the tiny fixture's vocabulary spells it "▁S w ord f is h": the tuned model answers with those pieces
    assert "ord" in tuned.choices[0].text and "ord" not in base, (tuned.choices[0].text, base)
    losses = [e.data["train_loss"] for e in reversed(all_events(c, j.id)) if e.type == "metrics"]
    assert len(losses) == 104 and losses[-1] < 0.3 * losses[0], (losses[0], losses[-1])


def test_given_steps_report_their_epochs_and_a_bom_is_accepted(reference):
    c, tmp, s = reference["client"], reference["dir"], reference["server"]
    path = os.path.join(tmp, "bom.jsonl")
    with open(path, "w", encoding="utf-8-sig") as fh:  # a UTF-8 BOM first, as some editors write
        for r in EXAMPLES:
            fh.write(json.dumps(r) + "\n")
    with open(path, "rb") as fh:
        f = c.files.create(file=fh, purpose="fine-tune")
    j = create(c, f.id, suffix="bom")  # steps 12, batch 2, 16 examples: 1.5 epochs
    j = wait_status(c, j.id, {"succeeded", "failed", "cancelled"})
    assert j.status == "succeeded", j.error
    assert j.hyperparameters.n_epochs == 1.5 and j.hyperparameters.batch_size == 2


def test_too_long_example_fails_the_job(reference):
    c, tmp = reference["client"], reference["dir"]
    f = upload(c, tmp, rows=EXAMPLES[:2] + [{"prompt": "word " * 400, "completion": " x"}], name="toolong.jsonl")
    j = create(c, f.id, suffix="bad")
    j = wait_status(c, j.id, {"failed", "succeeded", "queued", "running"})
    assert j.status == "failed" and j.error.code == "invalid_training_file"
    assert "line 3" in j.error.message and f.id in j.error.message, j.error.message


def test_worker_sigkill_resumes(reference, long_reference):
    c, tmp = reference["client"], reference["dir"]
    j = create(c, reference["file"].id, suffix="killw", extra=LONG)
    wait_checkpoint(c, j.id)
    pid = worker_pid(j.id)
    assert pid, "the worker process is running"
    os.kill(pid, signal.SIGKILL)
    j = wait_status(c, j.id, {"succeeded", "failed", "cancelled"})
    assert j.status == "succeeded", j.error
    events = all_events(c, j.id)
    assert any("resuming from the last checkpoint" in e.message for e in events)
    steps = [e.data["step"] for e in events if e.type == "metrics"]
    assert min(steps) == 1 and steps.count(1) == 1, "resumed at a checkpoint, not from step 0"
    # at most one checkpoint interval (100) is redone: all 100 when the kill lands while the checkpoint after a
    # step's metrics is being written (seen on a loaded machine)
    assert max(steps) == 3000 and len(steps) <= 3000 + 100, "steps after the last checkpoint are redone, no more"
    assert adapter_bytes(tmp, j.id) == long_reference


def test_server_sigkill_resumes(long_reference):
    tmp = tempfile.mkdtemp()
    s = start(tmp)
    c = client_of(s)
    f = upload(c, tmp)
    j = create(c, f.id, suffix="kills", extra=LONG)
    wait_checkpoint(c, j.id)
    s.stop(signal.SIGKILL)
    s2 = start(tmp)
    try:
        c2 = client_of(s2)
        done = wait_status(c2, j.id, {"succeeded", "failed", "cancelled"})
        assert done.status == "succeeded", done.error
        assert adapter_bytes(tmp, j.id) == long_reference
        assert c2.files.retrieve(f.id).bytes > 0  # uploads survive
        events = all_events(c2, j.id)
        assert any("Server restarted" in e.message for e in events)
        steps = [e.data["step"] for e in events if e.type == "metrics"]
        assert steps.count(1) == 1, "resumed at a checkpoint, not from step 0"
    finally:
        assert s2.stop() == 0, "".join(s2.log)


def test_inference_while_training(reference):
    """Completions keep being served while a job trains; latency with and without a job is printed for the note."""
    c, tmp = reference["client"], reference["dir"]

    def latencies(n):
        out = []
        for _ in range(n):
            t = time.time()
            c.completions.create(model="mha", prompt="To be", max_tokens=8, temperature=0)
            out.append(time.time() - t)
        return sorted(out)

    idle = latencies(20)
    j = create(c, reference["file"].id, suffix="lat", extra={"steps": 100000, "seq_len": 48})
    wait_status(c, j.id, {"running"})
    busy = latencies(20)
    c.fine_tuning.jobs.cancel(j.id)
    wait_status(c, j.id, {"cancelled"})
    p = lambda xs, q: xs[min(len(xs) - 1, int(q * len(xs)))] * 1e3
    print(f"\nlatency of an 8-token completion, ms: idle p50 {p(idle, .5):.1f} p99 {p(idle, .99):.1f}; "
          f"with a job training p50 {p(busy, .5):.1f} p99 {p(busy, .99):.1f}")
    assert len(busy) == 20


def test_train_device(reference):
    """--train-device cuda: the job trains on the GPU, or, on a machine with none (CI), fails saying so while the
    server goes on serving; a bad value stops the server at start."""
    tmp = tempfile.mkdtemp()
    s = start(tmp, "--train-device", "cuda")
    try:
        c = client_of(s)
        f = upload(c, tmp)
        j = wait_status(c, create(c, f.id, suffix="dev").id, {"succeeded", "failed", "cancelled"})
        if j.status == "failed":
            assert j.error.code == "server_error" and "cuda" in j.error.message.lower(), j.error
        else:
            assert j.status == "succeeded", j.error
        assert c.completions.create(model="mha", prompt="x", max_tokens=2).usage.completion_tokens == 2
    finally:
        assert s.stop() == 0, "".join(s.log)
    bad = subprocess.run([BIN, "--model", MODEL, "--train-device", "gpu"],
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "--train-device must be cpu or cuda" in bad.stderr, bad.stderr


def test_without_jobs_dir():
    s = Server("--parallel", "1")
    try:
        for method, path in (("GET", "/v1/fine_tuning/jobs"), ("POST", "/v1/fine_tuning/jobs")):
            st, _, body = s.request(method, path, {} if method == "POST" else None)
            assert st == 501 and "--jobs-dir" in json.loads(body)["error"]["message"]
    finally:
        assert s.stop() == 0
