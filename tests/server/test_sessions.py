"""Sessions: a context that outlives requests. A request naming "session" continues what the session holds
(prompt and generated tokens of earlier requests; for LongLLaMA its memory too); sessions are created, listed,
saved to --session-dir, restored and deleted over HTTP, one request at a time each, within --max-sessions and
--session-max-bytes. Long prompts report progress chunks when streaming asks for them."""
import json
import os
import subprocess

import pytest

from conftest import BIN, FIXTURES, MODEL, Server, sse_events, stream_request

LONGLLAMA = os.path.join(FIXTURES, "longllama", "basic")


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    d = tmp_path_factory.mktemp("plain-sessions")
    s = Server("--parallel", "2", "--max-sessions", "3", "--session-dir", str(d))
    s.dir = d
    yield s
    assert s.stop() == 0, "".join(s.log)


@pytest.fixture(scope="module")
def longllama(tmp_path_factory):
    d = tmp_path_factory.mktemp("ll-sessions")
    s = Server("--parallel", "2", "--batch", "32", "--session-dir", str(d), model=LONGLLAMA)
    s.dir = d
    yield s
    assert s.stop() == 0, "".join(s.log)


def create(server, **body):
    st, s = server.post("/v1/sessions", body)
    assert st == 201, s
    assert s["object"] == "session" and s["tokens"] == 0 and not s["busy"]
    return s["id"]


def delete(server, sid):
    st, _, body = server.request("DELETE", "/v1/sessions/" + sid)
    assert st == 200, body


def complete(server, prompt, max_tokens, session=None, **extra):
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "logprobs": 1, **extra}
    if session:
        body["session"] = session
    st, out = server.post("/v1/completions", body)
    assert st == 200, out
    return out


def tokens(server, text):
    st, out = server.post("/tokenize", {"content": text, "add_special": False})
    assert st == 200
    return out["tokens"]


def test_session_continues_its_tokens_exactly(plain):
    """Ingest a prefix (max_tokens 0), then continue: the same text and logprobs as one request on the whole."""
    first, second = tokens(plain, "Once upon a time there was"), tokens(plain, " a little cat who")
    sid = create(plain)
    ingest = complete(plain, first, 0, session=sid)
    assert ingest["choices"][0]["text"] == "" and ingest["usage"]["prompt_tokens"] == len(first) + 1  # + BOS
    st, info = plain.get_json("/v1/sessions/" + sid)
    assert st == 200 and info["tokens"] == len(first) + 1 and info["requests"] == 1 and info["last_error"] is None
    cont = complete(plain, second, 12, session=sid)
    assert cont["usage"]["prompt_tokens"] == len(second)  # no second BOS
    whole = complete(plain, first + second, 12)
    assert cont["choices"][0]["text"] == whole["choices"][0]["text"]
    a = cont["choices"][0]["logprobs"]["token_logprobs"]
    b = whole["choices"][0]["logprobs"]["token_logprobs"]
    assert max(abs(x - y) for x, y in zip(a, b)) < 1e-4
    # the session kept the 12 generated tokens (the last one too): BOS + first + second + 12
    st, info = plain.get_json("/v1/sessions/" + sid)
    assert info["tokens"] == 1 + len(first) + len(second) + 12 and info["requests"] == 2
    delete(plain, sid)


def test_session_context_full_is_a_clear_error(plain):
    sid = create(plain)
    complete(plain, tokens(plain, "hello " * 50)[:100], 0, session=sid)
    st, body = plain.post("/v1/completions", {"prompt": tokens(plain, "more words " * 20)[:40], "session": sid})
    assert st == 400 and body["error"]["code"] == "context_length_exceeded"
    assert sid in body["error"]["message"] and "128" in body["error"]["message"]
    # The session's tokens count too when max_tokens is checked against the context.
    st, body = plain.post("/v1/completions", {"prompt": [7] * 10, "max_tokens": 20, "session": sid})
    assert st == 400 and body["error"]["param"] == "max_tokens", body
    assert "101 tokens session" in body["error"]["message"] and "at most 17" in body["error"]["message"], body
    delete(plain, sid)


def test_chat_on_a_session_takes_new_messages_only(plain):
    sid = create(plain)
    st, a = plain.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                                               "session": sid, "temperature": 0})
    assert st == 200, a
    n1 = plain.get_json("/v1/sessions/" + sid)[1]["tokens"]
    st, b = plain.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "and then?"}],
                                               "max_tokens": 4, "session": sid, "temperature": 0})
    assert st == 200, b
    assert b["usage"]["prompt_tokens"] < a["usage"]["prompt_tokens"] + 12  # only the new turn was sent
    assert plain.get_json("/v1/sessions/" + sid)[1]["tokens"] > n1
    delete(plain, sid)


def test_session_lifecycle_and_errors(plain):
    st, body = plain.post("/v1/completions", {"prompt": "x", "session": "nope"})
    assert st == 404 and body["error"]["code"] == "session_not_found" and body["error"]["param"] == "session"
    st, body = plain.post("/v1/completions", {"prompt": "x", "session": "../etc"})
    assert st == 400 and body["error"]["param"] == "session"
    st, body = plain.post("/v1/completions", {"prompt": "x", "session": 5})
    assert st == 400 and body["error"]["param"] == "session"
    st, body = plain.post("/v1/completions", {"prompt": "x", "n": 2, "session": "a"})
    assert st == 400 and body["error"]["param"] == "session"
    st, body = plain.post("/v1/sessions", {"id": "bad id!"})
    assert st == 400
    st, _, raw = plain.request("POST", "/v1/sessions", body="{not json")
    assert st == 400 and b"JSON" in raw

    create(plain, id="alpha")
    st, body = plain.post("/v1/sessions", {"id": "alpha"})
    assert st == 409, body
    create(plain, id="beta")
    create(plain, id="gamma")
    st, body = plain.post("/v1/sessions", {})
    assert st == 429 and body["error"]["code"] == "too_many_sessions" and "--max-sessions" in body["error"]["message"]
    st, lst = plain.get_json("/v1/sessions")
    assert st == 200 and [s["id"] for s in lst["data"]] == ["alpha", "beta", "gamma"]
    for sid in ("alpha", "beta", "gamma"):
        delete(plain, sid)
    st, _, _ = plain.request("DELETE", "/v1/sessions/alpha")
    assert st == 404
    st, _, _ = plain.request("GET", "/v1/sessions/alpha")
    assert st == 404
    st, _, _ = plain.request("POST", "/v1/sessions/alpha/explode", body="{}")
    assert st == 404
    st, _, _ = plain.request("PUT", "/v1/sessions/alpha")
    assert st == 405


def test_snapshot_round_trip_gives_the_same_continuation(plain):
    sid = create(plain)
    complete(plain, "The quick brown fox", 6, session=sid)
    st, saved = plain.post(f"/v1/sessions/{sid}/save", {"name": "fox.v1"})
    assert st == 200 and saved["snapshot"] == "fox.v1" and saved["bytes"] > 0
    assert (plain.dir / "fox.v1.mnemo").stat().st_size == saved["bytes"]
    live = complete(plain, " jumps over", 8, session=sid)

    other = create(plain)
    st, info = plain.post(f"/v1/sessions/{other}/restore", {"name": "fox.v1"})
    assert st == 200 and info["tokens"] > 0
    restored = complete(plain, " jumps over", 8, session=other)
    assert restored["choices"][0]["text"] == live["choices"][0]["text"]
    assert restored["choices"][0]["logprobs"]["token_logprobs"] == live["choices"][0]["logprobs"]["token_logprobs"]

    st, s3 = plain.post("/v1/sessions", {"restore": "fox.v1"})  # create straight from a snapshot
    assert st == 201 and s3["tokens"] == info["tokens"]
    st, lst = plain.get_json("/v1/snapshots")
    assert st == 200 and [s["name"] for s in lst["data"]] == ["fox.v1"]
    for s in (sid, other, s3["id"]):
        delete(plain, s)


def test_snapshot_errors(plain):
    sid = create(plain)
    st, body = plain.post(f"/v1/sessions/{sid}/save", {"name": "../escape"})
    assert st == 400 and "snapshot name" in body["error"]["message"]
    st, body = plain.post(f"/v1/sessions/{sid}/save", {"name": 3})
    assert st == 400 and body["error"]["param"] == "name"
    st, body = plain.post(f"/v1/sessions/{sid}/restore", {"name": "missing"})
    assert st == 404
    (plain.dir / "junk.mnemo").write_bytes(b"MNEMOSNP" + os.urandom(200))
    st, body = plain.post(f"/v1/sessions/{sid}/restore", {"name": "junk"})
    assert st == 422 and body["error"]["code"] == "snapshot_refused", body
    assert "junk" in body["error"]["message"] and str(plain.dir) not in body["error"]["message"], body  # no leak
    st, info = plain.get_json("/v1/sessions/" + sid)
    assert info["tokens"] == 0  # a refused snapshot leaves the session as it was
    st, _, _ = plain.request("DELETE", "/v1/snapshots/junk")
    assert st == 200 and not (plain.dir / "junk.mnemo").exists()
    st, _, _ = plain.request("DELETE", "/v1/snapshots/junk")
    assert st == 404
    delete(plain, sid)


def test_empty_snapshot_name_is_refused(plain):
    sid = create(plain, id="emptyname")
    for action in ("save", "restore"):
        st, body = plain.post(f"/v1/sessions/{sid}/{action}", {"name": ""})
        assert st == 400 and body["error"]["param"] == "name" and "'name'" in body["error"]["message"], body
    assert not (plain.dir / "emptyname.mnemo").exists()  # it used to save under the session id
    st, body = plain.post("/v1/sessions", {"restore": ""})
    assert st == 400 and body["error"]["param"] == "restore", body
    st, saved = plain.post(f"/v1/sessions/{sid}/save", {})  # absent: the session id, as documented
    assert st == 200 and saved["snapshot"] == "emptyname"
    assert plain.request("DELETE", "/v1/snapshots/emptyname")[0] == 200
    delete(plain, sid)


def test_error_bodies_name_the_snapshot_never_the_directory(plain):
    sid = create(plain)
    complete(plain, "The quick brown fox", 4, session=sid)
    st, _ = plain.post(f"/v1/sessions/{sid}/save", {"name": "full"})
    assert st == 200
    data = (plain.dir / "full.mnemo").read_bytes()
    (plain.dir / "cut.mnemo").write_bytes(data[: len(data) // 2])  # truncated: the engine names the file
    st, refused = plain.post(f"/v1/sessions/{sid}/restore", {"name": "cut"})
    assert st == 422 and "cut.mnemo" in refused["error"]["message"], refused
    (plain.dir / "busy.mnemo").mkdir()  # the save's file cannot be renamed into place
    st, failed = plain.post(f"/v1/sessions/{sid}/save", {"name": "busy"})
    assert st == 500 and "busy.mnemo" in failed["error"]["message"], failed
    assert "Is a directory" in failed["error"]["message"], failed  # the failing call's errno, not a later one's
    (plain.dir / "busy.mnemo").rmdir()
    assert not [p.name for p in plain.dir.iterdir() if ".tmp" in p.name]  # the failed save removed its file
    for body in (refused, failed):
        assert str(plain.dir) not in body["error"]["message"], body
    for name in ("full", "cut"):
        assert plain.request("DELETE", "/v1/snapshots/" + name)[0] == 200
    delete(plain, sid)


def test_snapshots_off_without_session_dir():
    s = Server("--parallel", "1")
    try:
        st, sess = s.post("/v1/sessions", {})
        assert st == 201
        st, body = s.post(f"/v1/sessions/{sess['id']}/save", {})
        assert st == 501 and "--session-dir" in body["error"]["message"]
        st, _ = s.get_json("/v1/snapshots")
        assert st == 501
    finally:
        assert s.stop() == 0


def test_bad_session_dir_fails_at_start(tmp_path):
    (tmp_path / "file").write_text("x")
    for bad, text in [(tmp_path / "file", "not a directory"), (tmp_path / "no" / "such", "cannot be created")]:
        r = subprocess.run([BIN, "--model", MODEL, "--port", "0", "--session-dir", str(bad)],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 2 and "--session-dir" in r.stderr and text in r.stderr


def test_missing_session_dir_is_created(tmp_path):
    s = Server("--session-dir", str(tmp_path / "sessions"))
    try:
        assert (tmp_path / "sessions").is_dir() and s.wait_log("created --session-dir")
    finally:
        assert s.stop() == 0


def test_metrics_and_props_count_sessions(plain):
    sid = create(plain)
    complete(plain, "counting tokens", 3, session=sid)
    m = plain.metrics()
    assert m["mnemo_sessions"] == 1 and m["mnemo_sessions_max"] == 3
    assert m['mnemo_session_memory_bytes{kind="local_kv"}'] > 0
    st, p = plain.get_json("/props")
    assert p["sessions"]["live"] == 1 and p["sessions"]["max"] == 3 and p["sessions"]["snapshots"] is True
    delete(plain, sid)
    assert plain.metrics()["mnemo_sessions"] == 0


# ---------------------------------------------------------------- LongLLaMA: memory that persists

DOC = "the cat sat on the mat and the dog lay by the door " * 60  # ~ 1100 tokens: 17 windows of 64


def test_longllama_document_ingested_once_then_queried(longllama):
    sid = create(longllama)
    ingest = complete(longllama, DOC, 0, session=sid)
    assert ingest["usage"]["prompt_tokens"] > 15 * 64
    st, info = longllama.get_json("/v1/sessions/" + sid)
    assert info["memory"]["memory_tokens"] > 0 and info["memory"]["memory_key_bytes"] > 0
    assert info["tokens"] == ingest["usage"]["prompt_tokens"]
    st, saved = longllama.post(f"/v1/sessions/{sid}/save", {"name": "doc"})
    assert st == 200, saved
    q1 = complete(longllama, " Where is the dog?", 10, session=sid)

    st, s2 = longllama.post("/v1/sessions", {"restore": "doc"})
    assert st == 201 and s2["memory"]["memory_tokens"] == info["memory"]["memory_tokens"]
    q2 = complete(longllama, " Where is the dog?", 10, session=s2["id"])
    assert q2["choices"][0]["text"] == q1["choices"][0]["text"]
    assert q2["usage"]["prompt_tokens"] == q1["usage"]["prompt_tokens"] < 20  # the document is not sent again
    m = longllama.metrics()
    assert m["mnemo_sessions"] == 2 and m["mnemo_session_memory_tokens"] >= 2 * info["memory"]["memory_tokens"]
    delete(longllama, sid)
    delete(longllama, s2["id"])


def test_longllama_busy_session_and_progress(longllama):
    """While a long prompt prefills on a session (progress chunks arrive), the session refuses a second request
    and deletion with 409; the stream ends normally and the session is free again."""
    sid = create(longllama)
    body = {"prompt": DOC * 6, "max_tokens": 4, "temperature": 0, "stream": True, "session": sid,
            "stream_options": {"include_progress": True, "include_usage": True}}
    conn, resp = stream_request(longllama.port, "/v1/completions", body)
    assert resp.status == 200
    first = resp.readline()
    assert b"progress" in first, first
    st, busy = longllama.post("/v1/completions", {"prompt": "x", "session": sid})
    st_del, _, _ = longllama.request("DELETE", "/v1/sessions/" + sid)
    events = [json.loads(first.decode()[6:])] + sse_events(resp)
    conn.close()
    assert st == 409 and busy["error"]["code"] == "session_busy", busy
    assert st_del == 409
    progress = [e["progress"] for e in events if isinstance(e, dict) and "progress" in e]
    assert len(progress) > 10
    done = [p["processed"] for p in progress]
    assert done == sorted(done) and done[-1] == progress[-1]["total"] and progress[0]["index"] == 0
    assert all(e["choices"] == [] for e in events if isinstance(e, dict) and "progress" in e)
    assert events[-1] == "[DONE]"
    usage = [e["usage"] for e in events if isinstance(e, dict) and e.get("usage")]
    assert usage and usage[0]["completion_tokens"] == 4 and usage[0]["prompt_tokens"] == progress[-1]["total"]
    st, info = longllama.get_json("/v1/sessions/" + sid)
    assert not info["busy"] and info["last_error"] is None
    delete(longllama, sid)


def test_progress_needs_asking(longllama):
    conn, resp = stream_request(longllama.port, "/v1/completions",
                                {"prompt": DOC, "max_tokens": 2, "stream": True})
    events = sse_events(resp)
    conn.close()
    assert not any(isinstance(e, dict) and "progress" in e for e in events)


def test_openai_client_reads_a_stream_with_progress(longllama):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=longllama.base + "/v1", api_key="none")
    # A prompt no earlier test sent: a slot holding its prefix would prefill only the rest, in one step.
    chunks = list(client.completions.create(model="basic", prompt="Progress. " + DOC, max_tokens=3, temperature=0,
                                            stream=True, extra_body={"stream_options": {"include_progress": True}}))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert len([c for c in chunks if not c.choices]) > 5 and isinstance(text, str)


def test_session_memory_limit(tmp_path):
    s = Server("--parallel", "1", "--batch", "32", "--session-max-bytes", "300000", model=LONGLLAMA)
    try:
        st, sess = s.post("/v1/sessions", {})
        assert st == 201
        st, body = s.post("/v1/completions", {"prompt": DOC, "max_tokens": 0, "session": sess["id"]})
        assert st == 500 and "memory limit" in body["error"]["message"], body
        st, info = s.get_json("/v1/sessions/" + sess["id"])
        assert "memory limit" in info["last_error"] and info["memory"]["memory_key_bytes"] + \
            info["memory"]["memory_value_bytes"] <= 300000
        # the session is intact and can be deleted
        st, _, _ = s.request("DELETE", "/v1/sessions/" + sess["id"])
        assert st == 200
    finally:
        assert s.stop() == 0
