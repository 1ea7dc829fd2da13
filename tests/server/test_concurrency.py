"""Concurrency: continuous batching must not change results (concurrent greedy and seeded requests give exactly
what they give one by one), long prompts are prefilled in chunks while other slots keep decoding, a full queue
answers 503 + Retry-After, and a client that disconnects frees its slot while the others continue."""
import http.client
import json
import random
import signal
import socket
import subprocess
import threading
import time

import pytest

from conftest import Server, sse_events, stream_request


@pytest.fixture(scope="module")
def srv():
    s = Server("--parallel", "4", "--ctx", "8192")
    yield s
    assert s.stop() == 0, "".join(s.log)


def body_for(i):
    prompts = ["To be, or not to be", "Once upon a time", "The king", "Hello world", "Shall I compare thee",
               "Now is the winter", "Friends, Romans", "All the world"]
    b = {"prompt": prompts[i % len(prompts)], "max_tokens": 160, "ignore_eos": True}
    if i % 2:
        b.update(temperature=0.8, seed=100 + i, top_k=40)
    else:
        b.update(temperature=0)
    return b


def run_one(port, body, stream):
    if not stream:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        r = json.loads(conn.getresponse().read())
        conn.close()
        return r["choices"][0]["text"]
    conn, resp = stream_request(port, "/v1/completions", dict(body, stream=True))
    events = sse_events(resp)
    conn.close()
    assert events[-1] == "[DONE]"
    return "".join(e["choices"][0]["text"] for e in events[:-1] if e.get("choices"))


def test_concurrent_equals_sequential(srv):
    n = 12
    sequential = [run_one(srv.port, body_for(i), stream=False) for i in range(n)]
    before = srv.metrics()
    results = [None] * n
    barrier = threading.Barrier(n)

    def worker(i):
        barrier.wait()
        results[i] = run_one(srv.port, body_for(i), stream=i % 3 == 0)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    after = srv.metrics()
    for i in range(n):
        assert results[i] == sequential[i], f"request {i} ({body_for(i)}) changed under batching"
    steps = after["mnemo_batch_steps_total"] - before["mnemo_batch_steps_total"]
    seqs = after["mnemo_batch_sequences_total"] - before["mnemo_batch_sequences_total"]
    assert seqs / steps > 2.0, f"requests were not batched together ({seqs} sequences in {steps} steps)"


def test_n_choices_run_as_parallel_slots(srv):
    body = {"prompt": "Once upon a time", "max_tokens": 40, "temperature": 0.9, "seed": 5, "n": 4}
    st, r = srv.post("/v1/completions", body)
    assert st == 200 and len(r["choices"]) == 4
    for k in range(4):  # choice k is the same sequence as a single request with seed 5 + k
        st, one = srv.post("/v1/completions", dict(body, n=1, seed=5 + k))
        assert one["choices"][0]["text"] == r["choices"][k]["text"]


def test_chunked_prefill_keeps_others_decoding():
    rng = random.Random(3)
    long_prompt = [rng.randrange(3, 512) for _ in range(2000)]
    ref = Server("--parallel", "2", "--ctx", "4096", "--batch", "4096")
    try:
        st, want = ref.post("/v1/completions", {"prompt": long_prompt, "max_tokens": 20, "temperature": 0})
        assert st == 200
    finally:
        assert ref.stop() == 0
    s = Server("--parallel", "2", "--ctx", "4096", "--batch", "16")
    try:
        # A decodes a long answer while B's 2001-token prompt is prefilled 15 tokens per step beside it.
        conn_a, resp_a = stream_request(s.port, "/v1/completions",
                                        {"prompt": "Hello", "max_tokens": 3000, "ignore_eos": True, "stream": True})
        a_times = []

        def read_a():
            for line in resp_a:
                if line.startswith(b"data: {"):
                    a_times.append(time.monotonic())

        ta = threading.Thread(target=read_a)
        ta.start()
        while len(a_times) < 5:
            time.sleep(0.001)
        before = s.metrics()
        t0 = time.monotonic()
        conn_b, resp_b = stream_request(s.port, "/v1/completions",
                                        {"prompt": long_prompt, "max_tokens": 20, "temperature": 0, "stream": True})
        events = []
        t_first = None
        for line in resp_b:
            if line.startswith(b"data: {") and t_first is None:
                t_first = time.monotonic()
            events.extend(sse_events([line]))
        after = s.metrics()
        ta.join()
        conn_a.close()
        conn_b.close()
        text = "".join(e["choices"][0]["text"] for e in events if isinstance(e, dict) and e.get("choices"))
        assert text == want["choices"][0]["text"], "chunked prefill changed the result"
        assert after["mnemo_batch_steps_total"] - before["mnemo_batch_steps_total"] >= 2001 // 16
        during = sum(1 for t in a_times if t0 <= t <= t_first)
        assert during >= 50, f"the decoding stream got only {during} tokens while the long prompt was prefilled"
    finally:
        assert s.stop() == 0


def test_queue_full_gets_503_with_retry_after():
    s = Server("--parallel", "1", "--queue", "1", "--ctx", "8192")
    try:
        conn_a, resp_a = stream_request(s.port, "/v1/completions",
                                        {"prompt": "A", "max_tokens": 8000, "ignore_eos": True, "stream": True})
        resp_a.readline()  # A holds the only slot
        queued = {}

        def run_b():
            queued["r"] = s.post("/v1/completions", {"prompt": "B", "max_tokens": 3, "ignore_eos": True})

        tb = threading.Thread(target=run_b)
        tb.start()
        deadline = time.time() + 10
        while s.metrics()["mnemo_requests_waiting"] < 1 and time.time() < deadline:
            time.sleep(0.01)
        status, hdrs, body = s.request("POST", "/v1/completions", {"prompt": "C", "max_tokens": 3})
        assert status == 503 and hdrs.get("retry-after") == "1"
        assert json.loads(body)["error"]["code"] == "overloaded"
        conn_a.close()  # A's client leaves: its slot goes to B
        tb.join(30)
        assert queued["r"][0] == 200 and queued["r"][1]["usage"]["completion_tokens"] == 3
    finally:
        assert s.stop() == 0


def test_killed_client_frees_its_slot_others_continue(srv):
    body = {"prompt": "Once", "max_tokens": 6000, "ignore_eos": True, "stream": True}
    before = srv.metrics()
    # The victim is a separate curl process, killed with SIGKILL mid-stream.
    victim = subprocess.Popen(["curl", "-sN", "--noproxy", "*", f"{srv.base}/v1/completions", "-d", json.dumps(body)],
                              stdout=subprocess.PIPE)
    others = [stream_request(srv.port, "/v1/completions", body) for _ in range(2)]
    for _, resp in others:
        resp.readline()
    assert victim.stdout.readline().startswith(b"data: ")
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    t_kill = time.monotonic()
    gone = None
    while time.monotonic() - t_kill < 10:
        m = srv.metrics()
        if m['mnemo_requests_total{outcome="client_gone"}'] > before['mnemo_requests_total{outcome="client_gone"}']:
            gone = time.monotonic() - t_kill
            break
        time.sleep(0.005)
    assert gone is not None, "the killed client's slot was never freed"
    assert m["mnemo_requests_running"] == 2, "the other two streams must still be running"
    for conn, resp in others:
        events = sse_events(resp)
        conn.close()
        assert events[-1] == "[DONE]"
        finals = [e for e in events[:-1] if e["choices"] and e["choices"][0]["finish_reason"]]
        assert finals and finals[-1]["choices"][0]["finish_reason"] == "length"
    print(f"slot freed {gone * 1e3:.1f} ms after the client was killed")


def test_non_streaming_disconnect_is_noticed(srv):
    before = srv.metrics()
    s = socket.create_connection(("127.0.0.1", srv.port))
    body = json.dumps({"prompt": "Once", "max_tokens": 8000, "ignore_eos": True}).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d"
              b"\r\n\r\n%s" % (len(body), body))
    deadline = time.time() + 10
    while srv.metrics()["mnemo_requests_running"] < 1 and time.time() < deadline:
        time.sleep(0.005)
    s.close()  # nothing is being written to this client: the server must notice by itself
    t = time.monotonic()
    while time.monotonic() - t < 10:
        m = srv.metrics()
        if m['mnemo_requests_total{outcome="client_gone"}'] > before['mnemo_requests_total{outcome="client_gone"}']:
            break
        time.sleep(0.005)
    else:
        pytest.fail("the abandoned non-streaming request kept its slot")
    assert m["mnemo_requests_running"] == 0


def test_time_limit():
    s = Server("--parallel", "1", "--queue", "4", "--ctx", "16384", "--timeout", "0.5")
    try:
        queued = {}

        def run_queued():  # waits behind the long request, gets the slot when that one hits its limit
            time.sleep(0.1)
            queued["r"] = s.post("/v1/completions", {"prompt": "B", "max_tokens": 3, "ignore_eos": True})

        tq = threading.Thread(target=run_queued)
        tq.start()
        t = time.time()
        st, r = s.post("/v1/completions", {"prompt": "A", "max_tokens": 16000, "ignore_eos": True})
        took = time.time() - t
        tq.join()
        assert st == 200, r
        c = r["choices"][0]
        assert c["finish_reason"] == "length" and c["stop_reason"] == "time_limit"
        assert 0 < r["usage"]["completion_tokens"] < 16000 and took < 5
        st, r = queued["r"]
        assert st == 200 and r["usage"]["completion_tokens"] == 3 and r["timings"]["queue_ms"] > 250
        assert s.metrics()['mnemo_requests_total{outcome="timeout"}'] == 1
    finally:
        assert s.stop() == 0
