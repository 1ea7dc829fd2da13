"""The endpoints as users reach them: the official openai client (completions, chat, streaming, models), curl for
every endpoint, and the llama.cpp-style extras (/tokenize, /detokenize, /props, /metrics, /health). Greedy and
seeded results are cross-checked against the mnemo CLI, which runs the same engine without the server."""
import json
import os
import shutil
import subprocess

import pytest
import openai
from openai import OpenAI, NotFoundError, AuthenticationError

from conftest import MODEL, Server

CLI = os.environ.get("MNEMO_CLI_BIN")
PROMPT = "To be, or not to be"


@pytest.fixture(scope="module")
def client(server):
    return OpenAI(base_url=server.base + "/v1", api_key="unused", max_retries=0, timeout=60)


def cli_generate(*args):
    out = subprocess.run([CLI, "generate", "--model", MODEL, "--threads", "1", *args], capture_output=True,
                         check=True)
    return out.stdout.decode("utf-8", "replace").removesuffix("\n")


# ---------------------------------------------------------------- openai client

def test_models(client):
    models = client.models.list()
    assert [m.id for m in models.data] == ["mha"]
    assert client.models.retrieve("mha").id == "mha"
    with pytest.raises(NotFoundError):
        client.models.retrieve("gpt-4")


def test_completion_greedy_matches_cli(client):
    r = client.completions.create(model="mha", prompt=PROMPT, max_tokens=12, temperature=0)
    assert r.object == "text_completion" and len(r.choices) == 1
    c = r.choices[0]
    assert c.index == 0 and c.finish_reason == "length"
    assert r.usage.completion_tokens == 12 and r.usage.prompt_tokens > 1
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    if CLI:
        assert c.text == cli_generate("--prompt", PROMPT, "-n", "12", "--temp", "0")


def test_completion_seeded_matches_cli(client):
    r = client.completions.create(model="mha", prompt=PROMPT, max_tokens=16, temperature=0.9, seed=7)
    again = client.completions.create(model="mha", prompt=PROMPT, max_tokens=16, temperature=0.9, seed=7)
    assert r.choices[0].text == again.choices[0].text
    if CLI:
        want = cli_generate("--prompt", PROMPT, "-n", "16", "--temp", "0.9", "--seed", "7", "--top-k", "0",
                            "--top-p", "1", "--min-p", "0")
        assert r.choices[0].text == want


def test_completion_stream_equals_non_stream(client):
    args = dict(model="mha", prompt=PROMPT, max_tokens=20, temperature=0)
    whole = client.completions.create(**args).choices[0].text
    chunks = list(client.completions.create(stream=True, stream_options={"include_usage": True}, **args))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == whole
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals == ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 20
    assert all(c.usage is None for c in chunks[:-1])


def test_chat(client):
    r = client.chat.completions.create(model="mha", max_tokens=10, temperature=0,
                                       messages=[{"role": "system", "content": "Be brief."},
                                                 {"role": "user", "content": "Hello"}])
    assert r.object == "chat.completion"
    m = r.choices[0].message
    assert m.role == "assistant" and isinstance(m.content, str)
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.completion_tokens <= 10
    # Llama-2 template: the prompt is the rendered conversation, tokenized with BOS.
    assert r.usage.prompt_tokens > 10


def test_chat_stream(client):
    args = dict(model="mha", max_tokens=15, temperature=0, messages=[{"role": "user", "content": "Tell me"}])
    whole = client.chat.completions.create(**args).choices[0].message.content
    chunks = list(client.chat.completions.create(stream=True, **args))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text == whole
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")


def test_n_choices_and_seeds(client):
    r = client.completions.create(model="mha", prompt=PROMPT, max_tokens=8, temperature=1.0, seed=11, n=3)
    assert sorted(c.index for c in r.choices) == [0, 1, 2]
    single = client.completions.create(model="mha", prompt=PROMPT, max_tokens=8, temperature=1.0, seed=11)
    assert r.choices[0].text == single.choices[0].text  # choice i uses seed + i
    assert len({c.text for c in r.choices}) > 1
    assert r.usage.completion_tokens == 24
    assert r.usage.prompt_tokens == single.usage.prompt_tokens  # the prompt counts once


def test_n_choices_stream(client):
    args = dict(model="mha", prompt=PROMPT, max_tokens=10, temperature=0.7, seed=3, n=2)
    whole = client.completions.create(**args)
    texts = ["", ""]
    finished = set()
    for chunk in client.completions.create(stream=True, **args):
        for c in chunk.choices:
            texts[c.index] += c.text
            if c.finish_reason:
                finished.add(c.index)
    assert finished == {0, 1}
    assert texts == [c.text for c in whole.choices]


def test_prompt_forms(server, client):
    tokens = server.post("/tokenize", {"content": PROMPT, "add_special": True})[1]["tokens"]
    assert tokens[0] == 1
    as_text = client.completions.create(model="mha", prompt=PROMPT, max_tokens=6, temperature=0).choices[0].text
    as_ids = client.completions.create(model="mha", prompt=tokens, max_tokens=6, temperature=0).choices[0].text
    no_bos = client.completions.create(model="mha", prompt=tokens[1:], max_tokens=6, temperature=0).choices[0].text
    assert as_text == as_ids == no_bos
    multi = client.completions.create(model="mha", prompt=[PROMPT, "Hello"], max_tokens=6, temperature=0)
    assert [c.index for c in multi.choices] == [0, 1] and multi.choices[0].text == as_text
    batch_ids = client.completions.create(model="mha", prompt=[tokens, tokens[:3]], max_tokens=6, temperature=0)
    assert batch_ids.choices[0].text == as_text


def test_logprobs_completion(client):
    r = client.completions.create(model="mha", prompt=PROMPT, max_tokens=6, temperature=0, logprobs=3)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 6
    for chosen, lps, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert lps <= 0 and 1 <= len(top) <= 3
        assert abs(max(top.values()) - lps) < 1e-5  # greedy: the chosen token is the most likely
    assert lp.text_offset == sorted(lp.text_offset)


def test_logprobs_chat(client):
    r = client.chat.completions.create(model="mha", max_tokens=5, temperature=0, logprobs=True, top_logprobs=2,
                                       messages=[{"role": "user", "content": "Hi"}])
    content = r.choices[0].logprobs.content
    assert 1 <= len(content) <= 5
    for t in content:
        assert t.logprob <= 0 and len(t.top_logprobs) == 2 and bytes(t.bytes).decode("utf-8", "replace")
        assert t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob


def test_stop_string(client):
    text = client.completions.create(model="mha", prompt=PROMPT, max_tokens=20, temperature=0).choices[0].text
    stop = text[8:11]
    assert stop and stop not in text[:8] + text[8:10]
    r = client.completions.create(model="mha", prompt=PROMPT, max_tokens=20, temperature=0, stop=[stop, "zzzz"])
    assert r.choices[0].text == text[:text.index(stop)]
    assert r.choices[0].finish_reason == "stop"
    s = client.completions.create(model="mha", prompt=PROMPT, max_tokens=20, temperature=0, stop=stop, stream=True)
    assert "".join(c.choices[0].text for c in s) == r.choices[0].text


def test_max_tokens_zero_and_long(client):
    r = client.completions.create(model="mha", prompt=PROMPT, max_tokens=0)
    assert r.choices[0].text == "" and r.usage.completion_tokens == 0
    # OpenAI's rule: prompt + max_tokens must fit the context (128 here); asking for more is a 400 that names
    # the numbers, never a silent cut.
    with pytest.raises(openai.BadRequestError) as ei:
        client.completions.create(model="mha", prompt=PROMPT, max_tokens=1000000)
    err = ei.value.body
    assert err["code"] == "context_length_exceeded" and err["param"] == "max_tokens", err
    assert "1000000" in err["message"] and "128 tokens" in err["message"], err["message"]
    with pytest.raises(openai.BadRequestError) as ei:
        client.chat.completions.create(model="mha", messages=[{"role": "user", "content": "Hi"}],
                                       max_completion_tokens=5000)
    assert ei.value.body["param"] == "max_completion_tokens"
    # Exactly what fits is allowed and runs to its end.
    n_prompt = client.completions.create(model="mha", prompt=PROMPT, max_tokens=0).usage.prompt_tokens
    r = client.completions.create(model="mha", prompt=PROMPT, max_tokens=128 - n_prompt, temperature=0,
                                  extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 128 - n_prompt and r.choices[0].finish_reason == "length"
    # Omitted (chat): generation runs until the context is full and says "length".
    r = client.chat.completions.create(model="mha", messages=[{"role": "user", "content": "Hi"}], temperature=0,
                                       extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "length"
    assert r.usage.prompt_tokens + r.usage.completion_tokens == 129  # 128 positions + the last sampled token


def test_api_key():
    s = Server("--api-key", "s3cret", "--parallel", "1")
    try:
        status, hdrs, body = s.request("GET", "/v1/models")
        assert status == 401 and hdrs.get("www-authenticate") == "Bearer"
        assert json.loads(body)["error"]["type"] == "authentication_error"
        assert s.request("GET", "/metrics", headers={"Authorization": "Bearer wrong"})[0] == 401
        assert s.request("GET", "/metrics", headers={"Authorization": "Bearer s3cret"})[0] == 200
        assert s.request("GET", "/health")[0] == 200  # probes need no key
        bad = OpenAI(base_url=s.base + "/v1", api_key="nope", max_retries=0)
        with pytest.raises(AuthenticationError):
            bad.completions.create(model="mha", prompt="x", max_tokens=1)
        good = OpenAI(base_url=s.base + "/v1", api_key="s3cret", max_retries=0)
        assert good.completions.create(model="mha", prompt="x", max_tokens=2).usage.completion_tokens == 2
    finally:
        assert s.stop() == 0


# ---------------------------------------------------------------- llama.cpp-style extras

def test_tokenize_detokenize(server):
    st, r = server.post("/tokenize", {"content": "Hello world"})
    assert st == 200 and r["tokens"] and r["tokens"][0] != 1
    st, with_bos = server.post("/tokenize", {"content": "Hello world", "add_special": True})
    assert with_bos["tokens"] == [1] + r["tokens"]
    st, pieces = server.post("/tokenize", {"content": "Hello world", "with_pieces": True})
    assert [p["id"] for p in pieces["tokens"]] == r["tokens"]
    assert "".join(p["piece"] for p in pieces["tokens"]).strip() == "Hello world"
    st, d = server.post("/detokenize", {"tokens": r["tokens"]})
    assert st == 200 and d["content"] == "Hello world"
    assert server.post("/detokenize", {"tokens": []})[1] == {"content": ""}


def test_props_and_health(server):
    st, p = server.get_json("/props")
    assert st == 200 and p["n_ctx"] == 128 and p["total_slots"] == 4 and p["chat_template"] == "llama2"
    assert p["default_generation_settings"]["temperature"] == 1.0
    assert p["memory"] == {"local_kv_bytes": 4 * 2 * 2 * 128 * 4 * 16 * 4, "memory_key_bytes": 0,
                           "memory_value_bytes": 0, "index_bytes": 0, "memory_tokens": 0}
    assert server.get_json("/health") == (200, {"status": "ok"})


def test_metrics(server, client):
    before = server.metrics()
    client.completions.create(model="mha", prompt=PROMPT, max_tokens=5, temperature=0)
    after = server.metrics()
    assert after["mnemo_generated_tokens_total"] - before["mnemo_generated_tokens_total"] == 5
    assert after["mnemo_time_to_first_token_seconds_count"] > before["mnemo_time_to_first_token_seconds_count"]
    assert after['mnemo_requests_total{outcome="ok"}'] >= before['mnemo_requests_total{outcome="ok"}'] + 1
    assert after["mnemo_slots_total"] == 4 and after["mnemo_kv_cache_capacity_tokens"] == 4 * 128
    # mha: 2 layers x 4 KV heads x 16 dims, K and V in fp32, 128 positions per slot, 4 slots
    assert after["mnemo_kv_cache_bytes"] == 4 * 2 * 2 * 128 * 4 * 16 * 4
    # memory by kind: a plain LLaMA model has only its local KV cache
    assert after['mnemo_memory_bytes{kind="local_kv"}'] == after["mnemo_kv_cache_bytes"]
    for kind in ("memory_keys", "memory_values", "index"):
        assert after['mnemo_memory_bytes{kind="%s"}' % kind] == 0
    assert after["mnemo_memory_tokens"] == 0
    for name in ("mnemo_inter_token_latency_seconds_bucket{le=\"+Inf\"}", "mnemo_request_duration_seconds_sum",
                 "mnemo_queue_time_seconds_count", "mnemo_requests_running", "mnemo_requests_waiting",
                 "mnemo_kv_cache_usage_ratio", "mnemo_process_resident_memory_bytes"):
        assert name in after, name


# ---------------------------------------------------------------- curl, as the README shows it

@pytest.mark.skipif(shutil.which("curl") is None, reason="curl not installed (scripts/install-deps.sh adds it)")
def test_curl_every_endpoint(server):
    def curl(*args):
        out = subprocess.run(["curl", "-sS", "--noproxy", "*", "-w", "\n%{http_code}", *args], capture_output=True,
                             check=True, timeout=60)
        body, _, code = out.stdout.decode().rpartition("\n")
        return int(code), body

    b = server.base
    assert curl(f"{b}/health") == (200, '{"status":"ok"}')
    code, body = curl(f"{b}/v1/models")
    assert code == 200 and json.loads(body)["data"][0]["id"] == "mha"
    code, body = curl(f"{b}/v1/completions", "-H", "Content-Type: application/json",
                      "-d", '{"model":"mha","prompt":"To be","max_tokens":8,"ignore_eos":true}')
    assert code == 200 and json.loads(body)["usage"]["completion_tokens"] == 8
    code, body = curl("-N", f"{b}/v1/chat/completions", "-H", "Content-Type: application/json",
                      "-d", '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"stream":true}')
    assert code == 200 and body.rstrip().endswith("data: [DONE]") and body.count("data: ") >= 3
    code, body = curl(f"{b}/tokenize", "-d", '{"content":"Hello"}')
    assert code == 200 and json.loads(body)["tokens"]
    code, body = curl(f"{b}/detokenize", "-d", '{"tokens":[1, 100, 200]}')
    assert code == 200 and "content" in json.loads(body)
    code, body = curl(f"{b}/props")
    assert code == 200 and json.loads(body)["n_ctx"] == 128
    code, body = curl(f"{b}/metrics")
    assert code == 200 and "mnemo_requests_running" in body
    code, body = curl(f"{b}/v1/completions", "-d", "{bad json")
    assert code == 400 and json.loads(body)["error"]["code"] == "invalid_json"
