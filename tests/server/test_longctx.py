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
    assert p["memory"]["memory_key_bytes"] == m['mnemo_memory_bytes{kind="memory_keys"}']
