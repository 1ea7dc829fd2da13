"""mnemo-server on a UIO-LLM (--model tests/fixtures/models/mha --uio tests/fixtures/uio/mha_c16_m4/uio_st: chunk_size
16 compressed into 4 <mem> entries, ratio 4): completions and chat equal `mnemo generate --uio` greedy output, with
prompts longer than --ctx (the positions hold memory + raw only) and compressions during prefill and generation;
sessions keep their compressed memory between requests and through snapshots; a snapshot of a UIO model is refused
by a plain model and the other way round; /props names the memory and its settings; /metrics gives the compressed
memory and the raw KV in bytes. Option (a) (--uio-keep-raw) is served and equals the CLI too. The model is tiny
and random: the checks are on equality with the CLI, token counts and accounting."""
import json
import os
import subprocess

import pytest

from conftest import BIN, FIXTURES, MODEL, Server

UIO = os.path.join(FIXTURES, "uio", "mha_c16_m4", "uio_st")
CLI = os.environ.get("MNEMO_CLI_BIN", os.path.join(os.path.dirname(BIN), "mnemo"))
CTX = 64  # memory + raw positions per slot: 12 segments of 16 tokens, as 48 entries, + one raw segment
PROMPT = "To be, or not to be, that is the question: whether tis nobler in the mind to suffer the slings"
ROW = 2 * 2 * 64 * 4  # one cache position: keys + values, 2 layers, kv_dim 64, fp32


def start(tmp, *extra, uio=True):
    args = ["--parallel", "2", "--ctx", str(CTX), "--session-dir", str(tmp), *extra]
    return Server(*(args + ["--uio", UIO] if uio else args))


@pytest.fixture(scope="module")
def snapdir(tmp_path_factory):
    return tmp_path_factory.mktemp("uio-snapshots")


@pytest.fixture(scope="module")
def uio(snapdir):
    s = start(snapdir)
    yield s
    assert s.stop() == 0, "".join(s.log)


def cli_text(prompt, n, *extra):
    """Greedy text of `mnemo generate --uio` (its --json events, so bytes that are not UTF-8 compare exactly)."""
    out = subprocess.run([CLI, "generate", "--model", MODEL, "--uio", UIO, "--threads", "1", "--ctx", str(CTX),
                          "--prompt", prompt, "-n", str(n), "--temp", "0", "--json", *extra],
                         capture_output=True, check=True, text=True)
    events = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    return "".join(e["text"] for e in events if "token" in e)  # the last line sums up


def complete(server, prompt, max_tokens, **extra):
    st, body = server.post("/v1/completions", {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                                               "logprobs": 1, **extra})
    assert st == 200, body
    return body


def tokens(server, text):
    st, out = server.post("/tokenize", {"content": text, "add_special": False})
    assert st == 200
    return out["tokens"]


def test_completion_equals_cli_through_compressions(uio):
    body = complete(uio, PROMPT, 40)
    prompt_n = body["usage"]["prompt_tokens"]
    assert prompt_n > 2 * 16 and prompt_n + 40 > CTX  # compressed during the prompt and during generation
    assert body["choices"][0]["finish_reason"] == "length" and body["usage"]["completion_tokens"] == 40
    assert body["choices"][0]["text"] == cli_text(PROMPT, 40)


def test_long_prompt_past_ctx_and_small_prefill_chunks(snapdir):
    """A prompt of 3x --ctx fits (it is compressed as it goes); prefill chunks of 5 tokens cut at segment
    boundaries give the CLI's text too, with two requests batched together."""
    long_prompt = " ".join([PROMPT] * 3)
    s = start(snapdir, "--batch", "5")
    try:
        import threading
        out = [None, None]
        ts = [threading.Thread(target=lambda i=i: out.__setitem__(i, complete(s, long_prompt, 24))) for i in (0, 1)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert out[0]["usage"]["prompt_tokens"] > 2 * CTX
        want = cli_text(long_prompt, 24)
        assert out[0]["choices"][0]["text"] == want and out[1]["choices"][0]["text"] == want
    finally:
        assert s.stop() == 0, "".join(s.log)


def test_chat_is_served(uio):
    msgs = [{"role": "user", "content": PROMPT}]
    st, a = uio.post("/v1/chat/completions", {"messages": msgs, "max_tokens": 30, "temperature": 0})
    assert st == 200, a
    st, b = uio.post("/v1/chat/completions", {"messages": msgs, "max_tokens": 30, "temperature": 0})
    assert a["choices"][0]["message"]["content"] == b["choices"][0]["message"]["content"]
    assert a["usage"]["completion_tokens"] == 30 or a["choices"][0]["finish_reason"] == "stop"


def test_prompt_past_the_positions_is_a_clear_error(uio):
    st, body = uio.post("/v1/completions", {"prompt": " ".join([PROMPT] * 12), "max_tokens": 4})
    assert st == 400 and body["error"]["code"] == "context_length_exceeded", body
    assert "does not fit" in body["error"]["message"], body
    assert f"{CTX} positions" in body["error"]["message"], body
    complete(uio, PROMPT, 4)  # and the server goes on serving


def test_props_and_metrics_give_the_memory_by_kind(snapdir):
    s = start(snapdir)
    try:
        m0 = s.metrics()
        assert m0['mnemo_uio_memory_bytes{kind="compressed"}'] == 0 and m0['mnemo_uio_memory_bytes{kind="raw_kv"}'] == 0
        body = complete(s, PROMPT, 40)
        fed = body["usage"]["prompt_tokens"] + 40 - 1  # the last new token is never decoded
        segments, raw = fed // 16, fed % 16
        m = s.metrics()
        assert m["mnemo_uio_memory_entries"] == 4 * segments
        assert m['mnemo_uio_memory_bytes{kind="compressed"}'] == 4 * segments * ROW
        assert m['mnemo_uio_memory_bytes{kind="raw_kv"}'] == raw * ROW and m["mnemo_uio_raw_tokens"] == raw
        assert m["mnemo_memory_tokens"] == 16 * segments
        st, p = s.get_json("/props")
        assert st == 200 and p["memory_kind"] == "uio"
        assert p["uio"] == {"chunk_size": 16, "num_memory": 4, "ratio": 4, "lora_rank": 4, "lora_alpha": 8.0,
                            "keep_raw": 0, "weights_file": "uio.safetensors", "memory_entries": 4 * segments,
                            "compressed_bytes": 4 * segments * ROW, "raw_kv_bytes": raw * ROW, "raw_tokens": raw}
    finally:
        assert s.stop() == 0, "".join(s.log)


def test_session_keeps_its_compressed_memory(uio):
    """Ingest, then continue: the same text and logprobs as one request on the whole; the session's memory shows."""
    first, second = tokens(uio, PROMPT), tokens(uio, " and arrows of outrageous fortune")
    st, sess = uio.post("/v1/sessions", {})
    assert st == 201
    sid = sess["id"]
    complete(uio, first, 0, session=sid)
    cont = complete(uio, second, 30, session=sid)
    whole = complete(uio, first + second, 30)
    assert cont["choices"][0]["text"] == whole["choices"][0]["text"]
    a, b = (r["choices"][0]["logprobs"]["token_logprobs"] for r in (cont, whole))
    assert max(abs(x - y) for x, y in zip(a, b)) < 1e-4
    st, info = uio.get_json("/v1/sessions/" + sid)
    held = 1 + len(first) + len(second) + 30
    assert info["tokens"] == held and info["memory"]["memory_tokens"] == 16 * (held // 16)
    m = uio.metrics()
    assert m["mnemo_session_uio_memory_entries"] >= 4 * (held // 16)
    assert m['mnemo_session_uio_memory_bytes{kind="compressed"}'] >= 4 * (held // 16) * ROW
    assert uio.request("DELETE", "/v1/sessions/" + sid)[0] == 200


def test_snapshot_round_trip_and_refusals(uio, snapdir):
    st, sess = uio.post("/v1/sessions", {})
    sid = sess["id"]
    complete(uio, PROMPT, 20, session=sid)  # 40+ tokens held: memory, raw and accumulator all non-empty
    st, saved = uio.post(f"/v1/sessions/{sid}/save", {"name": "uio.v1"})
    assert st == 200 and saved["bytes"] > 0
    live = complete(uio, " the slings and arrows", 20, session=sid)
    st, s2 = uio.post("/v1/sessions", {"restore": "uio.v1"})
    assert st == 201, s2
    restored = complete(uio, " the slings and arrows", 20, session=s2["id"])
    assert restored["choices"][0]["text"] == live["choices"][0]["text"]
    assert restored["choices"][0]["logprobs"]["token_logprobs"] == live["choices"][0]["logprobs"]["token_logprobs"]

    plain_sess = None
    plain = start(snapdir, uio=False)  # the same base model without --uio, the same snapshot directory
    try:
        st, body = plain.post("/v1/sessions", {"restore": "uio.v1"})
        assert st == 422 and body["error"]["code"] == "snapshot_refused", body
        assert "UIO" in body["error"]["message"], body
        st, plain_sess = plain.post("/v1/sessions", {})
        complete(plain, PROMPT, 4, session=plain_sess["id"])
        st, _ = plain.post(f"/v1/sessions/{plain_sess['id']}/save", {"name": "plain.v1"})
        assert st == 200
    finally:
        assert plain.stop() == 0, "".join(plain.log)
    st, body = uio.post("/v1/sessions", {"restore": "plain.v1"})
    assert st == 422 and body["error"]["code"] == "snapshot_refused", body
    assert "plain LLaMA" in body["error"]["message"], body

    keep = start(snapdir, "--uio-keep-raw", "4")  # a UIO snapshot keeps W: another W is refused
    try:
        st, body = keep.post("/v1/sessions", {"restore": "uio.v1"})
        assert st == 422 and "uio_keep_raw" in body["error"]["message"], body
    finally:
        assert keep.stop() == 0, "".join(keep.log)
    for s in (sid, s2["id"]):
        assert uio.request("DELETE", "/v1/sessions/" + s)[0] == 200


def test_keep_raw_server_equals_cli(snapdir):
    s = start(snapdir, "--uio-keep-raw", "4")
    try:
        st, p = s.get_json("/props")
        assert p["uio"]["keep_raw"] == 4
        body = complete(s, PROMPT, 40)
        want = cli_text(PROMPT, 40, "--uio-keep-raw", "4")
        assert body["choices"][0]["text"] == want
        assert want != cli_text(PROMPT, 40)  # W changes what the model sees after a compression
        fed = body["usage"]["prompt_tokens"] + 40 - 1
        assert s.metrics()["mnemo_uio_raw_tokens"] == 4 + fed % 16  # the kept tokens are raw KV too
    finally:
        assert s.stop() == 0, "".join(s.log)


def test_bad_uio_options_fail_at_start(tmp_path):
    r = subprocess.run([BIN, "--model", MODEL, "--uio-keep-raw", "2", "--port", "0"], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 2 and "--uio" in r.stderr
    r = subprocess.run([BIN, "--model", MODEL, "--uio", str(tmp_path), "--port", "0"], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode != 0 and "uio_config.json" in r.stderr, r.stderr
    r = subprocess.run([BIN, "--model", MODEL, "--uio", UIO, "--uio-keep-raw", "17", "--port", "0"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "uio_keep_raw 17" in r.stderr, r.stderr


def test_embeddings_are_the_base_models(uio, snapdir):
    """An embedding reads its input raw, nothing compressed: the base model's (a plain server's) vector."""
    text = "the quick brown fox"
    st, a = uio.post("/v1/embeddings", {"input": text})
    assert st == 200, a
    plain = start(snapdir, uio=False)
    try:
        st, b = plain.post("/v1/embeddings", {"input": text})
        assert st == 200, b
    finally:
        assert plain.stop() == 0, "".join(plain.log)
    va, vb = a["data"][0]["embedding"], b["data"][0]["embedding"]
    assert len(va) == 64 and max(abs(x - y) for x, y in zip(va, vb)) < 1e-6
