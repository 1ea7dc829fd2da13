"""Malformed and hostile requests: each row is a request with its expected status and error body (OpenAI error
object: message, type, code, param). After the table, raw-socket abuse (garbage, huge headers, truncated and
oversized bodies, slow clients, connection floods) — and the server must still answer normally at the end."""
import json
import socket
import time

import pytest

from conftest import Server

LONG_PROMPT = "word " * 400  # far more than the 128-token context

# (id, method, path, body (str/dict/None), extra headers, status, code, param, message substring)
CASES = [
    ("not-json", "POST", "/v1/completions", "not json", {}, 400, "invalid_json", None, "invalid JSON"),
    ("empty-body", "POST", "/v1/completions", "", {}, 400, "invalid_json", None, "invalid JSON"),
    ("array-body", "POST", "/v1/completions", "[1,2]", {}, 400, "invalid_json", None, "JSON object"),
    ("trailing-comma", "POST", "/v1/completions", '{"prompt":"a",}', {}, 400, "invalid_json", None, None),
    ("duplicate-key", "POST", "/v1/completions", '{"prompt":"a","prompt":"b"}', {}, 400, "invalid_json", None,
     "duplicate"),
    ("nul-in-string", "POST", "/v1/completions", '{"prompt":"a\\u0000b"}', {}, 400, "invalid_json", None, None),
    ("invalid-utf8", "POST", "/v1/completions", b'{"prompt":"\xff\xfe"}', {}, 400, "invalid_json", None, None),
    ("nan-literal", "POST", "/v1/completions", '{"prompt":"a","temperature":NaN}', {}, 400, "invalid_json", None,
     None),
    ("huge-number", "POST", "/v1/completions", '{"prompt":"a","temperature":1e999}', {}, 400, "invalid_json", None,
     None),
    ("deep-nesting", "POST", "/v1/completions", "[" * 30000 + "]" * 30000, {}, 400, "invalid_json", None, None),
    ("missing-prompt", "POST", "/v1/completions", {}, {}, 400, "invalid_value", "prompt", "required"),
    ("prompt-number", "POST", "/v1/completions", {"prompt": 42}, {}, 400, "invalid_type", "prompt", None),
    ("prompt-empty-array", "POST", "/v1/completions", {"prompt": []}, {}, 400, "invalid_value", "prompt", None),
    ("prompt-mixed", "POST", "/v1/completions", {"prompt": [1, "a"]}, {}, 400, "invalid_type", "prompt", None),
    ("token-out-of-vocab", "POST", "/v1/completions", {"prompt": [1, 99999]}, {}, 400, "invalid_value", "prompt",
     "99999"),
    ("token-negative", "POST", "/v1/completions", {"prompt": [-5]}, {}, 400, "invalid_value", "prompt", None),
    ("max-tokens-string", "POST", "/v1/completions", {"prompt": "a", "max_tokens": "10"}, {}, 400, "invalid_type",
     "max_tokens", None),
    ("max-tokens-negative", "POST", "/v1/completions", {"prompt": "a", "max_tokens": -1}, {}, 400, "invalid_value",
     "max_tokens", None),
    ("temperature-high", "POST", "/v1/completions", {"prompt": "a", "temperature": 7}, {}, 400, "invalid_value",
     "temperature", "<= 2"),
    ("temperature-type", "POST", "/v1/completions", {"prompt": "a", "temperature": "hot"}, {}, 400, "invalid_type",
     "temperature", None),
    ("top-p-zero", "POST", "/v1/completions", {"prompt": "a", "top_p": 0}, {}, 400, "invalid_value", "top_p", None),
    ("top-k-negative", "POST", "/v1/completions", {"prompt": "a", "top_k": -2}, {}, 400, "invalid_value", "top_k",
     None),
    ("min-p-high", "POST", "/v1/completions", {"prompt": "a", "min_p": 3}, {}, 400, "invalid_value", "min_p", None),
    ("presence-range", "POST", "/v1/completions", {"prompt": "a", "presence_penalty": 9}, {}, 400, "invalid_value",
     "presence_penalty", None),
    ("n-zero", "POST", "/v1/completions", {"prompt": "a", "n": 0}, {}, 400, "invalid_value", "n", None),
    ("n-too-many", "POST", "/v1/completions", {"prompt": ["a"] * 4, "n": 5}, {}, 400, "invalid_value", "n", None),
    ("stop-type", "POST", "/v1/completions", {"prompt": "a", "stop": 5}, {}, 400, "invalid_type", "stop", None),
    ("stop-empty", "POST", "/v1/completions", {"prompt": "a", "stop": [""]}, {}, 400, "invalid_value", "stop", None),
    ("stop-too-many", "POST", "/v1/completions", {"prompt": "a", "stop": ["x"] * 17}, {}, 400, "invalid_value",
     "stop", None),
    ("logprobs-range", "POST", "/v1/completions", {"prompt": "a", "logprobs": 50}, {}, 400, "invalid_value",
     "logprobs", None),
    ("stream-type", "POST", "/v1/completions", {"prompt": "a", "stream": "yes"}, {}, 400, "invalid_type", "stream",
     None),
    ("stream-options-no-stream", "POST", "/v1/completions", {"prompt": "a", "stream_options": {"include_usage": True}},
     {}, 400, "invalid_value", "stream_options", None),
    ("seed-type", "POST", "/v1/completions", {"prompt": "a", "seed": "abc"}, {}, 400, "invalid_type", "seed", None),
    ("echo-unsupported", "POST", "/v1/completions", {"prompt": "a", "echo": True}, {}, 400, "unsupported_parameter",
     "echo", None),
    ("logit-bias-unsupported", "POST", "/v1/completions", {"prompt": "a", "logit_bias": {"5": 10}}, {}, 400,
     "unsupported_parameter", "logit_bias", None),
    ("unknown-fine-tuned-model", "POST", "/v1/completions", {"model": "ft:mha:x:ftjob-0", "prompt": "a"}, {}, 404,
     "model_not_found", "model", "ft:mha:x:ftjob-0"),
    ("model-path-traversal", "POST", "/v1/completions", {"model": "ft:../../etc/passwd", "prompt": "a"}, {}, 404,
     "model_not_found", "model", None),
    ("prompt-too-long", "POST", "/v1/completions", {"prompt": LONG_PROMPT}, {}, 400, "context_length_exceeded",
     "prompt", "128"),
    ("token-prompt-too-long", "POST", "/v1/completions", {"prompt": [5] * 200}, {}, 400, "context_length_exceeded",
     "prompt", "201"),
    ("max-tokens-past-context", "POST", "/v1/completions", {"prompt": "a", "max_tokens": 1000000}, {}, 400,
     "context_length_exceeded", "max_tokens", "1000000"),
    ("max-completion-tokens-past-context", "POST", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": "a"}], "max_completion_tokens": 200}, {}, 400,
     "context_length_exceeded", "max_completion_tokens", "128 tokens"),
    ("chat-no-messages", "POST", "/v1/chat/completions", {}, {}, 400, "invalid_value", "messages", None),
    ("chat-messages-string", "POST", "/v1/chat/completions", {"messages": "hi"}, {}, 400, "invalid_type", "messages",
     None),
    ("chat-bad-role", "POST", "/v1/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]}, {}, 400,
     "invalid_value", "messages[0].role", None),
    ("chat-tool-role", "POST", "/v1/chat/completions", {"messages": [{"role": "tool", "content": "x"}]}, {}, 400,
     "unsupported_parameter", "messages[0].role", None),
    ("chat-content-type", "POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": 5}]}, {}, 400,
     "invalid_type", "messages[0].content", None),
    ("chat-image-part", "POST", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}]}]},
     {}, 400, "unsupported_parameter", "messages[0].content", None),
    ("chat-roles-not-alternating", "POST", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}, {}, 400, "invalid_value",
     "messages[1].role", "alternating"),
    ("chat-top-logprobs-alone", "POST", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": "a"}], "top_logprobs": 3}, {}, 400, "invalid_value", "top_logprobs",
     None),
    ("chat-tools", "POST", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": "a"}], "tools": [{"type": "function"}]}, {}, 400,
     "unsupported_parameter", "tools", None),
    ("chat-too-long", "POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": LONG_PROMPT}]}, {},
     400, "context_length_exceeded", "messages", "128"),
    ("tokenize-no-content", "POST", "/tokenize", {}, {}, 400, "invalid_value", "content", None),
    ("tokenize-content-type", "POST", "/tokenize", {"content": ["x"]}, {}, 400, "invalid_type", "content", None),
    ("detokenize-bad-id", "POST", "/detokenize", {"tokens": [1, 100000]}, {}, 400, "invalid_value", "tokens", None),
    ("detokenize-type", "POST", "/detokenize", {"tokens": "abc"}, {}, 400, "invalid_type", "tokens", None),
    ("unknown-route", "GET", "/v2/everything", None, {}, 404, "not_found", None, "POST /v1/embeddings"),
    ("path-traversal", "GET", "/../../etc/passwd", None, {}, 404, "not_found", None, None),
    ("completions-suffix-path", "POST", "/v1/completions/extra", {"prompt": "a"}, {}, 404, "not_found", None, None),
    ("model-not-found", "GET", "/v1/models/llama-70b", None, {}, 404, "model_not_found", "model", None),
    ("get-on-post-route", "GET", "/v1/completions", None, {}, 405, "method_not_allowed", None, "POST"),
    ("delete-models", "DELETE", "/v1/models", None, {}, 405, "method_not_allowed", None, "GET"),
    ("post-health", "POST", "/health", {}, {}, 405, "method_not_allowed", None, None),
    ("body-too-large", "POST", "/v1/completions", {"prompt": "x" * 70000}, {}, 413, "request_too_large", None,
     "65536"),
]


@pytest.fixture(scope="module")
def srv():
    s = Server("--parallel", "2", "--max-body", "65536", "--conn-timeout", "2", "--max-conns", "24")
    yield s
    assert s.stop() == 0, "".join(s.log)


def test_table_is_big_enough():
    assert len(CASES) >= 30


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_hostile_request(srv, case):
    name, method, path, body, headers, status, code, param, substr = case
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
    got, hdrs, data = srv.request(method, path, body, headers)
    assert got == status, data
    assert hdrs["content-type"] == "application/json"
    err = json.loads(data)["error"]
    assert set(err) == {"message", "type", "code", "param"}
    assert err["message"] and err["type"] == ("invalid_request_error" if status < 500 else "server_error")
    assert err["code"] == code and err["param"] == param
    if substr:
        assert substr in err["message"], err["message"]
    if status == 405:
        assert "allow" in hdrs


def test_prompt_too_long_names_both_numbers(srv):
    st, r = srv.post("/v1/completions", {"prompt": [5] * 300})
    assert st == 400
    msg = r["error"]["message"]
    assert "301 tokens" in msg and "128 tokens" in msg  # the prompt (with BOS) and the context


def test_max_tokens_past_the_context_names_the_numbers(srv):
    st, r = srv.post("/v1/completions", {"prompt": [5] * 10, "max_tokens": 118})  # 11 with BOS + 118 = 129 > 128
    assert st == 400 and r["error"]["code"] == "context_length_exceeded" and r["error"]["param"] == "max_tokens"
    msg = r["error"]["message"]
    assert "11 prompt tokens" in msg and "118" in msg and "129" in msg and "128 tokens" in msg and "117" in msg, msg
    st, r = srv.post("/v1/completions", {"prompt": [5] * 10, "max_tokens": 117, "ignore_eos": True})
    assert st == 200 and r["usage"]["completion_tokens"] == 117, r


# ---------------------------------------------------------------- raw-socket abuse

def raw(srv, data, read_timeout=5.0):
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=read_timeout)
    try:
        s.sendall(data)
        chunks = []
        while True:
            try:
                b = s.recv(65536)
            except (socket.timeout, ConnectionResetError):
                break
            if not b:
                break
            chunks.append(b)
        return b"".join(chunks)
    finally:
        s.close()


def status_of(resp):
    return int(resp.split(b" ", 2)[1]) if resp.startswith(b"HTTP/") else None


def timed(srv, data, read_timeout=30.0):
    """raw() plus the seconds until the server answered or closed."""
    t = time.time()
    resp = raw(srv, data, read_timeout)
    return resp, time.time() - t


def error_code(resp):
    return json.loads(resp.split(b"\r\n\r\n", 1)[1])["error"]["code"]


@pytest.mark.parametrize("data", [b"GARBAGE\r\n\r\n", b"GARBAGE\r\nHost: x\r\n\r\n", b"GET\r\n\r\n",
                                  b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  # a TLS ClientHello
                                  b"\x00\x01\x02\x03\r\n", b" GET / HTTP/1.1\r\n\r\n", b"G\xc3\xa9T / HTTP/1.1\r\n\r\n",
                                  b"A" * 40 + b" / HTTP/1.1\r\n\r\n"],
                         ids=["word", "word-header", "method-only", "tls", "nul", "leading-space", "non-ascii",
                              "long-method"])
def test_garbage_request_line_gets_400_at_once(srv, data):
    # libmicrohttpd alone closed a one-word line silently and held bytes without a line end until the timeout.
    resp, took = timed(srv, data)
    assert status_of(resp) == 400 and error_code(resp) == "bad_request", resp
    assert took < 1.0, took


def test_bad_version_and_leading_empty_lines(srv):
    assert status_of(raw(srv, b"GET /health HTTP/9.9\r\nHost: x\r\n\r\n")) in (400, 505)
    assert status_of(raw(srv, b"\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\n\r\n")) == 200  # RFC 9112 allows them


def test_unfinished_request_line_gets_408(srv):
    resp, took = timed(srv, b"GARBAGE")  # could still become a method: answered when --conn-timeout (2 s) ends
    assert status_of(resp) == 408 and error_code(resp) == "request_timeout", resp
    assert took < 6, took


def test_body_shorter_than_content_length_gets_408(srv):
    resp, took = timed(srv, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"prompt\"")
    assert status_of(resp) == 408 and error_code(resp) == "request_timeout", resp
    assert took < 6, took  # --conn-timeout 2


def test_default_conn_timeout_is_short():
    s = Server("--parallel", "1")  # no --conn-timeout: the default (was 60 s)
    try:
        resp, took = timed(s, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{",
                           read_timeout=70)
        assert status_of(resp) == 408, resp
        assert 5 < took < 20, took  # 10 s
        resp, took = timed(s, b"", read_timeout=70)  # a connection that never sends a byte is closed
        assert resp == b"" and took < 20, took
    finally:
        assert s.stop() == 0


def test_huge_headers(srv):
    resp = raw(srv, b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200000 + b"\r\n\r\n")
    assert resp == b"" or status_of(resp) in (400, 413, 431)


def test_huge_url(srv):
    resp = raw(srv, b"GET /" + b"a" * 100000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    assert resp == b"" or status_of(resp) in (400, 413, 414, 431)


def test_truncated_body_does_not_hang(srv):
    t = time.time()
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"prompt\"")
    s.shutdown(socket.SHUT_WR)
    s.settimeout(10)
    assert s.recv(100) == b""  # closed without a reply, no handler ran on half a body
    s.close()
    assert time.time() - t < 10


def test_chunked_body_over_limit_is_cut(srv):
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b"x" * 8192
    try:
        for _ in range(20):  # 160 KiB > --max-body 64 KiB
            s.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        s.sendall(b"0\r\n\r\n")
        data = s.recv(1000)
    except (BrokenPipeError, ConnectionResetError):
        data = b""
    s.close()
    assert data == b"" or status_of(data) == 413


def test_slow_client_is_dropped(srv):
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=15)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")  # ...and never finishes the headers
    t = time.time()
    data = s.recv(1000)
    assert status_of(data) == 408 and b"headers did not arrive" in data  # the front door's 408
    assert time.time() - t < 10  # --conn-timeout 2
    s.close()


def test_connection_flood(srv):
    socks = []
    for _ in range(40):  # more than --max-conns 24
        try:
            socks.append(socket.create_connection(("127.0.0.1", srv.port), timeout=5))
        except OSError:
            break
    time.sleep(0.5)
    for s in socks:
        s.close()
    time.sleep(0.5)
    assert srv.request("GET", "/health")[0] == 200


def test_still_healthy_after_abuse(srv):
    assert srv.proc.poll() is None
    st, r = srv.post("/v1/completions", {"prompt": "To be", "max_tokens": 4, "temperature": 0})
    assert st == 200 and r["usage"]["completion_tokens"] == 4
    m = srv.metrics()
    assert m['mnemo_http_responses_total{code="400"}'] >= 40
