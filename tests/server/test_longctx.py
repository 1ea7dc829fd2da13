"""mnemo-server on a LongLLaMA model (tests/fixtures/longllama/basic: window 64, last_context_length 32, memory
layers [1, 3]): prompts far longer than the window are served (their prefix streams into memory window by window),
generation runs past the window, and /props and /metrics report the memory by kind. The model is tiny and random,
so the text is gibberish: the checks are on token counts, determinism and accounting."""
import os

import pytest

from conftest import FIXTURES, Server

LONGLLAMA = os.path.join(FIXTURES, "longllama", "basic")


@pytest.fixture(scope="module")
def ll_server():
    s = Server("--parallel", "2", model=LONGLLAMA)
    yield s
    assert s.stop() == 0, "".join(s.log)


def complete(server, prompt, max_tokens):
    st, body = server.post("/v1/completions", {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0})
    assert st == 200, body
    return body


def test_long_prompt_and_generation_past_the_window(ll_server):
    body = complete(ll_server, "hello world " * 400, 100)
    assert body["usage"]["prompt_tokens"] > 20 * 64  # 20+ windows
    assert body["usage"]["completion_tokens"] == 100 and body["choices"][0]["finish_reason"] == "length"
    again = complete(ll_server, "hello world " * 400, 100)
    assert again["choices"][0]["text"] == body["choices"][0]["text"]  # greedy and deterministic


def test_memory_accounting(ll_server):
    complete(ll_server, "the cat sat on the mat " * 200, 4)
    m = ll_server.metrics()
    assert m["mnemo_memory_tokens"] >= 1000
    assert m['mnemo_memory_bytes{kind="memory_keys"}'] > 0
    assert m['mnemo_memory_bytes{kind="memory_values"}'] == m['mnemo_memory_bytes{kind="memory_keys"}']
    assert m['mnemo_memory_bytes{kind="local_kv"}'] > 0
    st, p = ll_server.get_json("/props")
    assert st == 200 and p["memory"]["memory_tokens"] == m["mnemo_memory_tokens"]
    # the default: dense up to 8192 memory rows, then the top 128 through IVF-grow (this is the CPU)
    assert p["memory_attention"] == {"mode": "dense_then_knn", "knn_k": 128, "dense_rows": 8192, "index": "ivf-grow",
                                     "nprobe": 16}
    assert p["memory"]["memory_key_bytes"] == m['mnemo_memory_bytes{kind="memory_keys"}']


def test_knn_memory_server():
    """--mem-knn / --mem-index: slots and sessions attend to their top-k memory rows through the chosen index."""
    s = Server("--parallel", "1", "--mem-knn", "4", "--mem-index", "ivf-grow", "--mem-nprobe", "32",
               "--mem-dense-rows", "0", model=LONGLLAMA)
    try:
        st, p = s.get_json("/props")
        assert st == 200 and p["memory_attention"] == {"mode": "knn", "knn_k": 4, "dense_rows": 0, "index": "ivf-grow",
                                                       "nprobe": 32}
        body = complete(s, "hello world " * 400, 40)
        assert body["usage"]["completion_tokens"] == 40
        again = complete(s, "hello world " * 400, 40)
        assert again["choices"][0]["text"] == body["choices"][0]["text"]
        m = s.metrics()
        assert m['mnemo_memory_bytes{kind="index"}'] > 0  # the index holds the memory's keys
        st, sess = s.post("/v1/sessions", {})
        assert st == 201, sess
        st, b = s.post("/v1/completions", {"prompt": "the cat sat on the mat " * 200, "max_tokens": 4,
                                           "temperature": 0, "session": sess["id"]})
        assert st == 200, b
        st, info = s.get_json("/v1/sessions/" + sess["id"])
        assert st == 200 and info["memory"]["index_bytes"] > 0, info
    finally:
        assert s.stop() == 0, "".join(s.log)


def test_dense_memory_server():
    """--mem-knn 0 keeps the released checkpoints' dense attention at every length; /props says so."""
    s = Server("--parallel", "1", "--mem-knn", "0", model=LONGLLAMA)
    try:
        st, p = s.get_json("/props")
        assert st == 200 and p["memory_attention"] == {"mode": "dense", "knn_k": 0}
        body = complete(s, "hello world " * 400, 8)
        assert body["usage"]["completion_tokens"] == 8
        assert s.metrics()['mnemo_memory_bytes{kind="index"}'] == 0  # dense attention keeps no index
    finally:
        assert s.stop() == 0, "".join(s.log)
