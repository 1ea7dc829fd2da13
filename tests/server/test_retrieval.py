"""Retrieval memory in the server (--memory retrieval): prompts far past the cache, /props and /metrics report the
memory's rows and bytes, sessions keep it across requests, snapshots across a restart, a snapshot of another memory
mode is refused naming both, and options that do not fit the model stop the server with the engine's message.
The model is the tiny GQA fixture (128 positions); the cache is 4 sinks + a 24-token window."""
import os
import subprocess

import pytest

from conftest import BIN, FIXTURES, Server

GQA = os.path.join(FIXTURES, "models", "gqa")
RET = ["--memory", "retrieval", "--ret-sinks", "4", "--ret-window", "24", "--ret-block", "4", "--ret-topk", "3",
       "--ret-reps", "2", "--batch", "8", "--parallel", "2"]


@pytest.fixture(scope="module")
def sdir(tmp_path_factory):
    return tmp_path_factory.mktemp("ret-sessions")


@pytest.fixture(scope="module")
def ret(sdir):
    s = Server(*RET, "--session-dir", str(sdir), model=GQA)
    yield s
    assert s.stop() == 0, "".join(s.log)


def complete(server, prompt, max_tokens, session=None):
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "logprobs": 1}
    if session:
        body["session"] = session
    st, out = server.post("/v1/completions", body)
    assert st == 200, out
    return out


def long_prompt(n):
    return [3 + (i * 37) % 500 for i in range(n)]


def test_prompt_past_the_cache_and_props(ret):
    out = complete(ret, long_prompt(300), 4)  # 300 tokens through a 28-row cache
    assert out["usage"]["prompt_tokens"] == 301 and out["usage"]["completion_tokens"] == 4  # 300 + BOS
    st, props = ret.get_json("/props")
    assert st == 200 and props["memory_kind"] == "retrieval"
    assert props["retrieval"] == {"sinks": 4, "window": 24, "topk": 3, "block": 4, "reps": 2, "dtype": "f32"}


def test_session_keeps_memory_and_metrics_count_it(ret):
    st, s = ret.post("/v1/sessions", {"id": "doc"})
    assert st == 201, s
    complete(ret, long_prompt(200), 0, session="doc")
    st, info = ret.get_json("/v1/sessions/doc")
    assert st == 200 and info["tokens"] == 201  # with BOS
    metrics = ret.metrics()
    rows = metrics["mnemo_session_memory_tokens"]
    keys = metrics['mnemo_session_memory_bytes{kind="memory_keys"}']
    # 201 tokens, at most 24 + 4 in the cache: the rest in memory, f32 keys of 2 layers x 2 KV heads x 12
    assert 172 <= rows <= 201 and rows % 4 == 0, metrics
    assert keys >= rows * 2 * 24 * 4, metrics
    complete(ret, long_prompt(40), 2, session="doc")
    st, info = ret.get_json("/v1/sessions/doc")
    assert info["tokens"] == 243  # the earlier request's 201, these 40 and the 2 generated


def test_snapshot_survives_a_restart(sdir):
    a = Server(*RET, "--session-dir", str(sdir), model=GQA)
    try:
        st, _ = a.post("/v1/sessions", {"id": "book"})
        assert st == 201
        complete(a, long_prompt(150), 0, session="book")
        st, saved = a.post("/v1/sessions/book/save", {"name": "book.ret"})
        assert st == 200 and saved["bytes"] > 0, saved
        live = complete(a, [5, 6, 7], 6, session="book")
    finally:
        assert a.stop() == 0
    b = Server(*RET, "--session-dir", str(sdir), model=GQA)
    try:
        st, s = b.post("/v1/sessions", {"restore": "book.ret"})
        assert st == 201 and s["tokens"] == 151, s  # with BOS
        again = complete(b, [5, 6, 7], 6, session=s["id"])
        assert again["choices"][0]["text"] == live["choices"][0]["text"]
        assert again["choices"][0]["logprobs"]["token_logprobs"] == live["choices"][0]["logprobs"]["token_logprobs"]
    finally:
        assert b.stop() == 0
    plain = Server("--parallel", "1", "--session-dir", str(sdir), model=GQA)
    try:
        st, body = plain.post("/v1/sessions", {"restore": "book.ret"})
        msg = body["error"]["message"]
        assert st >= 400 and "retrieval memory" in msg and "plain LLaMA" in msg, body
    finally:
        assert plain.stop() == 0


@pytest.mark.parametrize("opts, says", [
    (["--ret-window", "200"], "past the 128 this model was trained on"),
    (["--ret-topk", "0"], "top-k 0"),
    (["--ret-sinks", "30"], "sink tokens"),
    (["--ret-block", "0"], "block size 0"),
    (["--ret-dtype", "int3"], "--ret-dtype must be"),
])
def test_bad_options_stop_the_server(opts, says):
    p = subprocess.run([BIN, "--model", GQA, "--port", "0", "--threads", "1", *RET, *opts], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode != 0 and says in p.stderr, p.stderr
