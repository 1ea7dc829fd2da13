"""The server's chat on a model with a real Llama 3 vocabulary: a tiny random-weight LLaMA (llama3_tiny_gguf.py)
carrying llama.cpp's ggml-vocab-llama-bpe.gguf (128256 tokens, pre-tokenizer llama-bpe; fetched by
scripts/fetch-test-vocabs.sh) and Meta's Llama 3 Instruct chat template in tokenizer.chat_template. The server
recognises the template as llama3 and renders a conversation as Llama 3 does: the prompt it feeds the model is
<|begin_of_text|> + per message <|start_header_id|>role<|end_header_id|>\n\n content <|eot_id|>, then the
assistant's header, counted here from the vocabulary's own ids; greedy answers agree streamed and whole.
"""
import os

import pytest

from conftest import FIXTURES, Server, sse_events, stream_request
import llama3_tiny_gguf

VOCAB = os.path.join(FIXTURES, "tokenizers", "ggml-vocab-llama-bpe.gguf")
BEGIN, START_HEADER, END_HEADER, EOT = 128000, 128006, 128007, 128009  # Llama 3's special ids
MESSAGES = [{"role": "system", "content": "You are a concise assistant."},
            {"role": "user", "content": "  Wie heißt die Hauptstadt von Frankreich? 🇫🇷  "}]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    assert os.path.isfile(VOCAB), f"{VOCAB} is missing: scripts/fetch-test-vocabs.sh fetches it"
    path = str(tmp_path_factory.mktemp("llama3") / "tiny-llama3.gguf")
    assert llama3_tiny_gguf.write(VOCAB, path) == 128256
    s = Server(model=path, threads=2)
    yield s
    assert s.stop() == 0, "".join(s.log)


def tokens(server, text):
    status, body = server.post("/tokenize", {"content": text})
    assert status == 200, body
    return body["tokens"]


def test_template_is_llama3_from_the_gguf(server):
    status, props = server.get_json("/props")
    assert status == 200 and props["chat_template"] == "llama3", props


def test_chat_prompt_is_rendered_as_llama3(server):
    # What Llama 3's template makes of MESSAGES (contents trimmed), in the vocabulary's ids.
    want = [BEGIN]
    for m in MESSAGES:
        want += [START_HEADER] + tokens(server, m["role"]) + [END_HEADER] + tokens(server, "\n\n" + m["content"].strip())
        want += [EOT]
    want += [START_HEADER] + tokens(server, "assistant") + [END_HEADER] + tokens(server, "\n\n")
    status, r = server.post("/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 8, "temperature": 0})
    assert status == 200, r
    assert r["usage"]["prompt_tokens"] == len(want), (r["usage"], len(want))
    assert r["usage"]["completion_tokens"] >= 1 and isinstance(r["choices"][0]["message"]["content"], str)


def test_stream_equals_whole_answer(server):
    body = {"messages": MESSAGES, "max_tokens": 12, "temperature": 0}
    status, whole = server.post("/v1/chat/completions", body)
    assert status == 200, whole
    conn, resp = stream_request(server.port, "/v1/chat/completions", dict(body, stream=True))
    assert resp.status == 200
    events = sse_events(resp)
    conn.close()
    assert events[-1] == "[DONE]"
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events[:-1] if e["choices"])
    assert text == whole["choices"][0]["message"]["content"]
