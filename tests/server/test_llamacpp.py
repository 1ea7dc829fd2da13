"""llama.cpp's native POST /completion: its request fields (prompt, n_predict, temperature, top_k, top_p, stream,
stop, seed, ...) mapped onto the same engine as /v1/completions, its response ({"content", "stop": true,
"tokens_predicted", "tokens_evaluated", "stop_type", "timings", ...}) and stream (data: {"content", "stop": false}
lines, then a final "stop": true object, no [DONE]); unsupported options refused; unknown routes list the routes."""
import json

import pytest

from conftest import sse_events, stream_request

PROMPT = "To be, or not to be"


def complete(server, **body):
    st, r = server.post("/completion", body)
    assert st == 200, r
    return r


def test_non_streaming_matches_v1_completions(server):
    r = complete(server, prompt=PROMPT, n_predict=10, temperature=0, ignore_eos=True)
    st, oai = server.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 10, "temperature": 0,
                                              "ignore_eos": True})
    assert r["content"] == oai["choices"][0]["text"]
    assert r["stop"] is True and r["model"] == "mha" and r["stop_type"] == "limit" and r["truncated"] is False
    assert r["tokens_predicted"] == 10 and r["tokens_evaluated"] == oai["usage"]["prompt_tokens"]
    assert r["timings"]["predicted_n"] == 10 and "prompt_ms" in r["timings"]


def test_sampling_fields_are_mapped(server):
    body = dict(prompt=PROMPT, n_predict=12, temperature=0.9, top_k=20, top_p=0.8, min_p=0.02, seed=42,
                repeat_penalty=1.1, ignore_eos=True)
    a, b = complete(server, **body), complete(server, **body)
    assert a["content"] == b["content"]  # the seed is honoured
    st, oai = server.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 12, "temperature": 0.9, "top_k": 20,
                                              "top_p": 0.8, "min_p": 0.02, "seed": 42, "repetition_penalty": 1.1,
                                              "ignore_eos": True})
    assert a["content"] == oai["choices"][0]["text"]
    assert complete(server, prompt=PROMPT, n_predict=3, seed=-1)["tokens_predicted"] <= 3  # -1: random seed


def test_stream(server):
    whole = complete(server, prompt=PROMPT, n_predict=8, temperature=0, ignore_eos=True)
    conn, resp = stream_request(server.port, "/completion", {"prompt": PROMPT, "n_predict": 8, "temperature": 0,
                                                            "ignore_eos": True, "stream": True})
    assert resp.status == 200 and resp.getheader("Content-Type") == "text/event-stream"
    events = sse_events(resp)
    conn.close()
    assert "[DONE]" not in events
    pieces, last = events[:-1], events[-1]
    assert pieces and all(e["stop"] is False and len(e["tokens"]) == 1 for e in pieces)
    assert "".join(e["content"] for e in pieces) == whole["content"]
    assert last["stop"] is True and last["content"] == "" and last["tokens_predicted"] == 8


def test_stop_word_and_token_prompt(server):
    text = complete(server, prompt=PROMPT, n_predict=12, temperature=0, ignore_eos=True)["content"]
    word = text[4:6]
    r = complete(server, prompt=PROMPT, n_predict=12, temperature=0, ignore_eos=True, stop=[word])
    assert r["stop_type"] == "word" and r["content"] == text[:text.index(word)]
    st, tok = server.post("/tokenize", {"content": PROMPT, "add_special": True})
    assert complete(server, prompt=tok["tokens"], n_predict=12, temperature=0, ignore_eos=True)["content"] == text


def test_n_predict_omitted_runs_to_the_context(server):
    r = complete(server, prompt=PROMPT, temperature=0, ignore_eos=True)
    assert r["tokens_evaluated"] + r["tokens_predicted"] == 129  # 128 positions + the last sampled token
    assert r["truncated"] is True and r["stop_type"] == "limit"
    assert complete(server, prompt=PROMPT, n_predict=-1, ignore_eos=True)["tokens_predicted"] == r["tokens_predicted"]


@pytest.mark.parametrize("body, param", [
    ({"prompt": "x", "grammar": "root ::= \"a\""}, "grammar"),
    ({"prompt": "x", "json_schema": {}}, "json_schema"),
    ({"prompt": "x", "n_probs": 3}, "n_probs"),
    ({"prompt": "x", "mirostat": 2}, "mirostat"),
    ({"prompt": ["a", "b"]}, "prompt"),
    ({"prompt": "x", "n_predict": -5}, "n_predict"),
    ({"prompt": "x", "n_predict": 1000}, "n_predict"),  # past the 128-token context: OpenAI's rule applies
    ({"prompt": "x", "temperature": 9}, "temperature"),
    ({}, "prompt"),
])
def test_refusals(server, body, param):
    st, r = server.post("/completion", body)
    assert st == 400 and r["error"]["param"] == param, r


def test_bookkeeping_fields_are_ignored(server):
    r = complete(server, prompt=PROMPT, n_predict=2, cache_prompt=True, id_slot=-1, n_keep=0, typical_p=1.0,
                 samplers=["top_k"], n_probs=0)
    assert r["tokens_predicted"] <= 2


def test_unknown_route_lists_the_routes(server):
    status, _, body = server.request("GET", "/v2/everything")
    msg = json.loads(body)["error"]["message"]
    assert status == 404 and "/v2/everything" in msg
    for route in ("POST /v1/completions", "POST /v1/chat/completions", "POST /v1/embeddings", "POST /completion",
                  "GET /v1/models", "GET /health", "POST /tokenize"):
        assert route in msg, msg
    status, hdrs, _ = server.request("GET", "/completion")
    assert status == 405 and hdrs["allow"] == "POST"
