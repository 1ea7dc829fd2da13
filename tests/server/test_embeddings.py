"""POST /v1/embeddings through the official openai client (which asks for base64 and decodes it) and raw HTTP:
shape, unit norm, determinism, batch order, float == base64, token-id inputs, the reference embedding of
tests/fixtures/embeddings (mean-pooled last hidden state after the final RMSNorm), usage, and the refusals
(empty input, bad token id, too long, dimensions, encoding_format, model); LongLLaMA takes up to its window."""
import base64
import json
import math
import os
import struct

import openai
import pytest
from openai import OpenAI

from conftest import FIXTURES, Server

LONGLLAMA = os.path.join(FIXTURES, "longllama", "basic")
N_EMBD = 64  # mha's hidden size


@pytest.fixture(scope="module")
def client(server):
    return OpenAI(base_url=server.base + "/v1", api_key="unused", max_retries=0, timeout=60)


def norm(v):
    return math.sqrt(sum(x * x for x in v))


def embed(server, **body):
    st, r = server.post("/v1/embeddings", body)
    assert st == 200, r
    return r


def test_openai_client_shape_norm_usage(client, server):
    r = client.embeddings.create(model="mha", input="To be, or not to be")
    assert r.object == "list" and r.model == "mha" and len(r.data) == 1
    d = r.data[0]
    assert d.object == "embedding" and d.index == 0 and len(d.embedding) == N_EMBD
    assert abs(norm(d.embedding) - 1) < 1e-5
    st, tok = server.post("/tokenize", {"content": "To be, or not to be", "add_special": True})
    assert r.usage.prompt_tokens == len(tok["tokens"]) == r.usage.total_tokens


def test_deterministic_and_batch_order(client):
    texts = ["first line", "a second, longer line of text", "3"]
    batch = client.embeddings.create(model="mha", input=texts)
    assert [d.index for d in batch.data] == [0, 1, 2]
    for i, t in enumerate(texts):
        alone = client.embeddings.create(model="mha", input=t).data[0].embedding
        assert alone == batch.data[i].embedding  # the same bytes, alone or batched
    assert batch.data[0].embedding != batch.data[1].embedding


def test_float_and_base64_agree(client, server):
    floats = client.embeddings.create(model="mha", input="hello", encoding_format="float").data[0].embedding
    via_client = client.embeddings.create(model="mha", input="hello").data[0].embedding  # the client asks base64
    raw = embed(server, input="hello", encoding_format="base64")["data"][0]["embedding"]
    decoded = list(struct.unpack("<%df" % N_EMBD, base64.b64decode(raw)))
    assert floats == via_client == decoded


def test_token_ids_equal_text(server):
    st, tok = server.post("/tokenize", {"content": "hello world", "add_special": False})
    ids = tok["tokens"]
    text = embed(server, input="hello world")["data"][0]["embedding"]
    assert embed(server, input=ids)["data"][0]["embedding"] == text  # BOS added as for prompts
    assert embed(server, input=[1] + ids)["data"][0]["embedding"] == text
    two = embed(server, input=[ids, [1] + ids])["data"]
    assert two[0]["embedding"] == two[1]["embedding"] == text


def test_matches_the_reference_embedding(server):
    with open(os.path.join(FIXTURES, "embeddings", "mha.json")) as f:
        ref = json.load(f)
    for case in ref["cases"]:
        got = embed(server, input=case["ids"])["data"][0]["embedding"]
        assert max(abs(a - b) for a, b in zip(got, case["embedding"])) < 1e-5


@pytest.mark.parametrize("body, param, code, text", [
    ({"input": ""}, "input", "invalid_value", "empty"),
    ({"input": []}, "input", "invalid_value", None),
    ({"input": ["a", ""]}, "input", "invalid_value", "entry 1"),
    ({}, "input", "invalid_value", "required"),
    ({"input": 5}, "input", "invalid_type", None),
    ({"input": [1, 99999]}, "input", "invalid_value", "99999"),
    ({"input": [[1, 2], [-1]]}, "input", "invalid_value", None),
    ({"input": "word " * 400}, "input", "context_length_exceeded", "128 tokens"),
    ({"input": ["ok", "word " * 400]}, "input", "context_length_exceeded", "input[1]"),
    ({"input": "x", "dimensions": 32}, "dimensions", "invalid_value", "64"),
    ({"input": "x", "encoding_format": "int8"}, "encoding_format", "invalid_value", None),
])
def test_refusals(server, body, param, code, text):
    st, r = server.post("/v1/embeddings", body)
    assert st == 400, r
    err = r["error"]
    assert err["param"] == param and err["code"] == code, err
    if text:
        assert text in err["message"], err["message"]


def test_refusals_through_the_client(client):
    with pytest.raises(openai.BadRequestError) as ei:
        client.embeddings.create(model="mha", input="word " * 400)
    assert ei.value.body["code"] == "context_length_exceeded"
    with pytest.raises(openai.NotFoundError):  # a fine-tuned model does not embed (other names: the base model)
        client.embeddings.create(model="ft:mha:x:ftjob-0", input="x")
    assert client.embeddings.create(model="text-embedding-3-small", input="x").model == "mha"
    assert len(client.embeddings.create(model="mha", input="x", dimensions=N_EMBD).data[0].embedding) == N_EMBD


def test_too_long_names_the_numbers(server):
    st, r = server.post("/v1/embeddings", {"input": [5] * 200})
    assert st == 400 and "201 tokens" in r["error"]["message"] and "128 tokens" in r["error"]["message"], r


def test_longllama_takes_up_to_its_window():
    s = Server("--parallel", "1", model=LONGLLAMA)
    try:
        r = embed(s, input=[1] + [7] * 63)  # 64 tokens: the window
        assert abs(norm(r["data"][0]["embedding"]) - 1) < 1e-5
        st, body = s.post("/v1/embeddings", {"input": [1] + [7] * 64})
        assert st == 400 and body["error"]["code"] == "context_length_exceeded", body
        assert "65 tokens" in body["error"]["message"] and "64" in body["error"]["message"], body
    finally:
        assert s.stop() == 0
