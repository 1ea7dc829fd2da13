"""Process lifecycle: --help and bad arguments, /health 503 while loading, chat template selection, and
SIGINT/SIGTERM: stop accepting, let in-flight streams finish within --grace, cancel what is left after it, exit 0."""
import json
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time

import pytest

from conftest import BIN, MODEL, Server, sse_events, stream_request


def run(*args, timeout=60):
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=timeout)


def test_help_and_bad_arguments():
    r = run("--help")
    assert r.returncode == 0 and "--parallel" in r.stdout and "--api-key" in r.stdout
    for args in (["--port", "abc"], ["--parallel", "0"], ["--frobnicate"], ["--chat-template", "jinja"],
                 ["--host", "not-an-ip"], ["--mem-index", "lsh"], ["--mem-knn", "-1"],
                 ["--mem-nprobe", "-1"], ["--mem-index", "ivf", "--mem-nprobe", "257"],
                 ["--mem-dense-rows", "-1"], ["--mem-dense-rows", "1.5"]):
        r = run(*args, "--port", "0") if args[0] != "--port" else run(*args)
        assert r.returncode in (1, 2) and r.stderr.strip(), args
    r = run("--model", "/nonexistent/model", "--port", "0")
    assert r.returncode == 1 and "cannot load" in r.stderr


@pytest.mark.parametrize("config", [None, "{", '{"architectures": ["GPT2LMHeadModel"]}'],
                         ids=["missing-dir", "bad-json", "unsupported"])
def test_failed_load_exits_1_with_one_message_and_never_listens(config):
    d = "/nonexistent/model"
    if config is not None:
        d = tempfile.mkdtemp(prefix="mnemo-bad-model-")
        with open(os.path.join(d, "config.json"), "w") as f:
            f.write(config)
    r = run("--model", d, "--port", "0")
    assert r.returncode == 1, r.stderr
    assert "listening" not in r.stderr and "stopped" not in r.stderr, r.stderr
    errors = [l for l in r.stderr.splitlines() if "error" in l]
    assert len(errors) == 1 and "cannot load the model" in errors[0] and d in errors[0], r.stderr


def test_port_in_use_fails_cleanly():
    s = Server("--parallel", "1")
    try:
        r = run("--model", MODEL, "--port", str(s.port))
        assert r.returncode == 1 and "cannot listen" in r.stderr
    finally:
        assert s.stop() == 0


def slow_model():
    """A copy of the model whose config.json is a named pipe: the load blocks on it until the test writes it, so
    the loading state lasts as long as the test wants. Returns (dir, release) where release() lets the load go on
    (with the real config, or with nothing, which fails the load)."""
    d = tempfile.mkdtemp(prefix="mnemo-slow-model-")
    for f in os.listdir(MODEL):
        if f != "config.json":
            os.symlink(os.path.join(MODEL, f), os.path.join(d, f))
    fifo = os.path.join(d, "config.json")
    os.mkfifo(fifo)

    def release(real=True):
        with open(fifo, "wb") as w:  # blocks until the server opens it for reading
            if real:
                with open(os.path.join(MODEL, "config.json"), "rb") as r:
                    w.write(r.read())
    return d, release


def test_health_503_while_loading():
    d, release = slow_model()
    s = Server("--parallel", "1", model=d, wait_ready=False)
    try:
        status, hdrs, body = s.request("GET", "/health")
        assert status == 503 and hdrs.get("retry-after")
        assert json.loads(body)["error"]["code"] == "loading"
        for path, body in (("/v1/completions", {"prompt": "x"}), ("/v1/embeddings", {"input": "x"}),
                           ("/completion", {"prompt": "x"})):
            status, _, reply = s.request("POST", path, body)
            assert status == 503 and json.loads(reply)["error"]["code"] == "loading", path
        status, _, body = s.request("GET", "/metrics")
        assert status == 200 and b"mnemo_model_loading 1" in body
        release()
        s.wait_ready()
        assert s.request("GET", "/health")[0] == 200
    finally:
        assert s.stop() == 0


def test_signal_while_loading_exits_0():
    d, release = slow_model()
    s = Server("--parallel", "1", model=d, wait_ready=False)
    assert s.request("GET", "/health")[0] == 503  # loading
    s.proc.send_signal(signal.SIGINT)
    release(real=False)  # the load returns (here: fails); the signal is what the server acts on
    assert s.stop(signal.SIGINT, timeout=10) == 0


def model_dir_with(config):
    d = tempfile.mkdtemp(prefix="mnemo-model-")
    for f in os.listdir(MODEL):
        if f != "tokenizer_config.json":
            os.symlink(os.path.join(MODEL, f), os.path.join(d, f))
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(config, f)
    return d


def test_chat_template_from_tokenizer_config_and_flag():
    d = model_dir_with({"chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>"
                                         "\n{% endfor %}<|im_start|>assistant\n"})
    s = Server("--parallel", "1", model=d)
    try:
        assert s.get_json("/props")[1]["chat_template"] == "chatml"
        st, r = s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3})
        assert st == 200 and r["model"] == os.path.basename(d)
    finally:
        assert s.stop() == 0
    s = Server("--parallel", "1", "--chat-template", "plain", "--alias", "tiny", model=d)
    try:
        assert s.get_json("/props")[1]["chat_template"] == "plain"
        assert s.post("/v1/chat/completions", {"model": "tiny", "messages": [{"role": "user", "content": "x"}],
                                                "max_tokens": 2})[0] == 200
    finally:
        assert s.stop() == 0
    d2 = model_dir_with({"chat_template": "{{ '<|user|>' }}"})  # not one mnemo knows: llama2 + warning
    s = Server("--parallel", "1", model=d2)
    try:
        assert s.get_json("/props")[1]["chat_template"] == "llama2"
        assert s.wait_log("not one mnemo knows"), "".join(s.log)
    finally:
        assert s.stop() == 0


def test_sigint_idle_exits_0():
    s = Server("--parallel", "1")
    t = time.time()
    assert s.stop(signal.SIGINT) == 0 and time.time() - t < 5


def read_stream(resp, out):
    try:
        out.extend(sse_events(resp))
    except Exception as e:  # a connection cut short shows up as missing [DONE]
        out.append(e)


def test_sigterm_lets_streams_finish_within_grace():
    s = Server("--parallel", "2", "--ctx", "8192", "--grace", "120")
    body = {"prompt": "Once", "max_tokens": 5000, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    streams = [stream_request(s.port, "/v1/completions", body) for _ in range(2)]
    for _, resp in streams:
        resp.readline()
    outs = [[], []]
    readers = [threading.Thread(target=read_stream, args=(resp, out)) for (_, resp), out in zip(streams, outs)]
    for t in readers:
        t.start()
    s.proc.send_signal(signal.SIGTERM)
    time.sleep(1.0)
    with pytest.raises(OSError):  # no longer accepting
        socket.create_connection(("127.0.0.1", s.port), timeout=2).recv(1)
    assert s.proc.wait(120) == 0, "".join(s.log)
    for t in readers:
        t.join()
    for out in outs:
        assert out and out[-1] == "[DONE]", out[-3:]
        final = [e for e in out[:-1] if e["choices"] and e["choices"][0]["finish_reason"]][-1]
        assert final["choices"][0]["finish_reason"] == "length" and "stop_reason" not in final["choices"][0]
        assert out[-2]["usage"]["completion_tokens"] == 5000  # every token made it


def test_sigterm_cancels_after_grace():
    # The stream must outlive the grace period by far, even on a fast idle machine (16K tokens of the tiny model
    # take about a second): it is cancelled after 0.5 s, so a long one costs nothing.
    s = Server("--parallel", "1", "--ctx", "65536", "--grace", "0.5")
    conn, resp = stream_request(s.port, "/v1/completions",
                                {"prompt": "Once", "max_tokens": 65000, "ignore_eos": True, "stream": True})
    resp.readline()
    queued = {}

    def run_queued():  # waits behind the stream; never gets a slot
        queued["r"] = s.post("/v1/completions", {"prompt": "B", "max_tokens": 3})

    tq = threading.Thread(target=run_queued)
    tq.start()
    deadline = time.time() + 10
    while s.metrics()["mnemo_requests_waiting"] < 1 and time.time() < deadline:
        time.sleep(0.01)
    out = []
    reader = threading.Thread(target=read_stream, args=(resp, out))
    reader.start()
    t = time.time()
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(30) == 0, "".join(s.log)
    assert time.time() - t < 10
    reader.join()
    tq.join()
    conn.close()
    assert out[-1] == "[DONE]"
    final = [e for e in out[:-1] if isinstance(e, dict) and e.get("choices") and e["choices"][0]["finish_reason"]]
    assert final[-1]["choices"][0]["stop_reason"] == "server_shutdown"
    assert queued["r"][0] == 503 and queued["r"][1]["error"]["code"] == "unavailable"


def test_second_signal_cuts_the_grace_period():
    s = Server("--parallel", "1", "--ctx", "65536", "--grace", "300")
    conn, resp = stream_request(s.port, "/v1/completions",
                                {"prompt": "Once", "max_tokens": 65000, "ignore_eos": True, "stream": True})
    resp.readline()
    t = time.time()
    s.proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    s.proc.send_signal(signal.SIGINT)
    assert s.proc.wait(30) == 0
    assert time.time() - t < 10
    conn.close()
