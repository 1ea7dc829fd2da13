"""The OpenAI files API (POST/GET /v1/files, GET /v1/files/{id}[/content], DELETE /v1/files/{id}) as the official
openai client uses it, then the bad input as raw HTTP sends it: JSONL validated line by line at upload, the wrong
purpose, bodies that are not multipart or lack a field, unknown and path-like ids (nothing outside --jobs-dir is
read or written), --max-files (exact under concurrent uploads), --max-body, restarts (SIGTERM and SIGKILL) that keep
every acknowledged file, and the server without --jobs-dir (501)."""
import json
import os
import re
import signal
import subprocess
import threading
import time
import uuid

import openai
import pytest
from openai import OpenAI

from conftest import BIN, MODEL, Server

ID_RE = re.compile(r"^file-[0-9a-f]{24}$")
PROMPT_LINE = b'{"prompt": "To be, or not", "completion": " to be"}\n'
CHAT_LINE = (b'{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}, '
             b'{"role": "assistant", "content": "Hello."}]}\n')
GOOD = PROMPT_LINE + CHAT_LINE + b"\n" + PROMPT_LINE  # a blank line is allowed


def multipart(fields):
    """fields: [(name, filename or None, bytes)] -> (body, headers) of a multipart/form-data request."""
    boundary = "mnemo" + uuid.uuid4().hex
    out = []
    for name, filename, data in fields:
        disp = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename is not None else "")
        out.append(f"--{boundary}\r\nContent-Disposition: {disp}\r\n".encode())
        if filename is not None:
            out.append(b"Content-Type: application/octet-stream\r\n")
        out.append(b"\r\n" + data + b"\r\n")
    out.append(f"--{boundary}--\r\n".encode())
    return b"".join(out), {"Content-Type": f"multipart/form-data; boundary={boundary}"}


def upload(s, data, purpose="fine-tune", filename="train.jsonl", headers=None):
    """Raw POST /v1/files -> (status, parsed JSON body)."""
    body, hdrs = multipart([("purpose", None, purpose.encode()), ("file", filename, data)])
    hdrs.update(headers or {})
    status, _, raw = s.request("POST", "/v1/files", body, hdrs)
    return status, json.loads(raw)


def error_of(status_body):
    status, body = status_body
    return status, body["error"]


def disk_names(d):
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def tree(root):
    """Every path under root with its size and mtime: what 'nothing was touched' compares."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            st = os.lstat(p)
            out[os.path.relpath(p, root)] = (st.st_size, st.st_mtime_ns)
    return out


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("files")


@pytest.fixture(scope="module")
def server(work):
    s = Server("--parallel", "1", "--jobs-dir", str(work / "jobs"))
    yield s
    assert s.stop() == 0, "".join(s.log)


@pytest.fixture(scope="module")
def client(server):
    return OpenAI(base_url=server.base + "/v1", api_key="unused", max_retries=0, timeout=60)


# ---------------------------------------------------------------- openai client

def test_create_retrieve_content_list_delete(client, server, work, tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_bytes(GOOD)
    with open(path, "rb") as fh:
        f = client.files.create(file=fh, purpose="fine-tune")
    assert ID_RE.match(f.id), f.id
    assert (f.object, f.bytes, f.filename, f.purpose, f.status) == ("file", len(GOOD), "train.jsonl", "fine-tune",
                                                                    "processed")
    assert abs(f.created_at - time.time()) < 60
    assert client.files.retrieve(f.id) == f
    assert client.files.content(f.id).read() == GOOD
    assert f.id in [x.id for x in client.files.list()]
    files_dir = work / "jobs" / "files"
    assert (files_dir / f"{f.id}.jsonl").read_bytes() == GOOD
    assert json.loads((files_dir / f"{f.id}.json").read_text()) == f.model_dump(exclude_none=True)

    d = client.files.delete(f.id)
    assert (d.id, d.object, d.deleted) == (f.id, "file", True)
    assert not any(n.startswith(f.id) for n in disk_names(files_dir))
    for call in (client.files.retrieve, client.files.content, client.files.delete):
        with pytest.raises(openai.NotFoundError) as ei:
            call(f.id)
        assert ei.value.body["param"] == "file_id" and ei.value.body["type"] == "invalid_request_error"
    assert f.id not in [x.id for x in client.files.list()]


def test_create_from_bytes_keeps_the_name_and_any_bytes(client):
    data = '{"prompt": "é ü 日本", "completion": " ✓"}\r\n\r\n'.encode() + CHAT_LINE  # UTF-8 and CRLF lines
    f = client.files.create(file=("données.jsonl", data), purpose="fine-tune")
    assert f.filename == "données.jsonl" and f.bytes == len(data)
    assert client.files.content(f.id).read() == data
    client.files.delete(f.id)


def test_list_pagination_order_and_purpose(client, server):
    mine = [client.files.create(file=(f"p{i}.jsonl", GOOD), purpose="fine-tune").id for i in range(5)]
    everything = [x.id for x in client.files.list().data]  # newest first
    assert everything[:5] == mine[::-1]
    page = client.files.list(limit=2)
    assert [x.id for x in page.data] == everything[:2] and page.has_more
    page2 = client.files.list(limit=2, after=page.data[-1].id)
    assert [x.id for x in page2.data] == everything[2:4]
    assert [x.id for x in client.files.list(limit=2)] == everything  # the client follows has_more/after
    assert [x.id for x in client.files.list(order="asc")] == everything[::-1]
    assert [x.id for x in client.files.list(order="asc", limit=1, after=everything[-1]).data] == everything[-2:-1]
    assert [x.id for x in client.files.list(purpose="fine-tune")] == everything
    assert client.files.list(purpose="assistants").data == []
    status, body = server.get_json(f"/v1/files?limit=3&after={everything[0]}")
    assert status == 200 and body["first_id"] == everything[1] and body["last_id"] == everything[3]
    last = client.files.list(limit=10000, after=everything[-1])
    assert last.data == [] and not last.has_more
    for i in mine:
        client.files.delete(i)


def test_openai_client_errors(client):
    with pytest.raises(openai.BadRequestError) as ei:
        client.files.create(file=("a.jsonl", PROMPT_LINE + b"{oops}\n"), purpose="fine-tune")
    assert ei.value.body["param"] == "file" and "line 2" in ei.value.body["message"]
    with pytest.raises(openai.BadRequestError) as ei:
        client.files.create(file=("a.jsonl", GOOD), purpose="assistants")
    assert ei.value.body["param"] == "purpose" and '"fine-tune"' in ei.value.body["message"]
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve("file-" + "0" * 24)
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve("../../etc/passwd")


# ---------------------------------------------------------------- bad input over raw HTTP

BAD_LINES = [
    ("not-json", PROMPT_LINE * 2 + b"not json\n", 3, None),
    ("array", PROMPT_LINE + b"[1, 2]\n", 2, "JSON object"),
    ("blank-lines-count", b"\n\r\n" + b'{"prompt": "a"}\n', 3, "prompt"),
    ("prompt-number", b'{"prompt": 1, "completion": "b"}', 1, "prompt"),
    ("empty-completion", b'{"prompt": "a", "completion": ""}', 1, "empty"),
    ("duplicate-key", b'{"prompt": "a", "prompt": "b", "completion": "c"}', 1, "duplicate"),
    ("invalid-utf8", b'{"prompt": "\xff\xfe", "completion": "b"}', 1, None),
    ("nul", b'{"prompt": "a\\u0000", "completion": "b"}', 1, None),
    ("both-kinds", b'{"prompt": "a", "completion": "b", "messages": []}', 1, "not both"),
    ("messages-empty", b'{"messages": []}', 1, "non-empty"),
    ("role-tool", b'{"messages": [{"role": "tool", "content": "x"}, {"role": "assistant", "content": "y"}]}', 1,
     "messages[0].role"),
    ("content-null", b'{"messages": [{"role": "user", "content": null}, {"role": "assistant", "content": "y"}]}', 1,
     "messages[0].content"),
    ("ends-with-user", CHAT_LINE + b'{"messages": [{"role": "user", "content": "x"}]}', 2, "last message"),
    ("message-not-object", b'{"messages": ["hi"]}', 1, "messages[0]"),
    ("truncated", GOOD + b'{"prompt": "a", "compl', 5, None),
]


@pytest.mark.parametrize("name,data,line,text", BAD_LINES, ids=[c[0] for c in BAD_LINES])
def test_bad_jsonl_names_the_line(server, name, data, line, text):
    status, err = error_of(upload(server, data))
    assert status == 400 and err["param"] == "file" and err["code"] == "invalid_file", err
    assert err["message"].startswith(f"training file line {line}: "), err["message"]
    if text:
        assert text in err["message"], err["message"]


@pytest.mark.parametrize("data", [b"", b"\n  \r\n\t\n"], ids=["empty", "blank-lines"])
def test_empty_file_is_400(server, data):
    status, err = error_of(upload(server, data))
    assert status == 400 and err["param"] == "file" and ("empty" in err["message"] or "blank" in err["message"]), err


@pytest.mark.parametrize("purpose", ["assistants", "batch", "", "fine-tune ", "fine-tune\x00x", "x" * 200])
def test_wrong_purpose_is_400(server, purpose):
    status, err = error_of(upload(server, GOOD, purpose=purpose))
    assert status == 400 and err["param"] == "purpose" and err["type"] == "invalid_request_error", err


def test_not_multipart_and_missing_fields(server):
    status, err = error_of(server.post("/v1/files", {"file": "x", "purpose": "fine-tune"}))
    assert status == 400 and "multipart/form-data" in err["message"] and err["code"] == "invalid_content_type", err
    status, err = error_of(server.post("/v1/files", "", headers={"Content-Type": "text/plain"}))
    assert status == 400 and "multipart/form-data" in err["message"], err
    _, hdrs = multipart([])
    status, _, raw = server.request("POST", "/v1/files", b"garbage without delimiters", hdrs)
    err = json.loads(raw)["error"]
    assert status == 400 and err["code"] == "invalid_multipart", err
    body, hdrs = multipart([("purpose", None, b"fine-tune")])
    status, _, raw = server.request("POST", "/v1/files", body, hdrs)
    err = json.loads(raw)["error"]
    assert status == 400 and err["param"] == "file" and "required" in err["message"], err
    body, hdrs = multipart([("file", "t.jsonl", GOOD)])
    status, _, raw = server.request("POST", "/v1/files", body, hdrs)
    err = json.loads(raw)["error"]
    assert status == 400 and err["param"] == "purpose" and "required" in err["message"], err
    # A file part without a filename is still a file.
    body, hdrs = multipart([("purpose", None, b"fine-tune"), ("file", None, GOOD)])
    status, _, raw = server.request("POST", "/v1/files", body, hdrs)
    f = json.loads(raw)
    assert status == 200 and f["filename"] == "upload.jsonl", f
    assert server.request("DELETE", f"/v1/files/{f['id']}")[0] == 200


def test_unknown_ids_are_404(server):
    for fid in ["file-" + "0" * 24, "file-" + "a" * 24]:
        for method, path in [("GET", f"/v1/files/{fid}"), ("GET", f"/v1/files/{fid}/content"),
                             ("DELETE", f"/v1/files/{fid}")]:
            status, _, raw = server.request(method, path)
            err = json.loads(raw)["error"]
            assert status == 404 and err["param"] == "file_id" and err["code"] == "file_not_found", (path, err)
            assert err["type"] == "invalid_request_error" and fid in err["message"], err
    f = upload(server, GOOD)[1]
    status, _, raw = server.request("GET", f"/v1/files/{f['id']}/bytes")
    assert status == 404 and json.loads(raw)["error"]["code"] == "not_found"
    assert server.request("DELETE", f"/v1/files/{f['id']}/content")[0] == 404
    assert server.request("DELETE", f"/v1/files/{f['id']}")[0] == 200


def test_path_like_ids_touch_nothing_outside_jobs_dir(server, work):
    secret = work / "secret.jsonl"
    secret.write_bytes(PROMPT_LINE)
    (work / "secret.json").write_text('{"id": "x"}')
    before = tree(work)
    victims = ["..", "../secret", "..%2Fsecret", "..%2F..%2Fsecret.jsonl", "%2e%2e%2fsecret", "../../etc/passwd",
               "file-../../secret", "file-" + "0" * 23 + "/", "file-" + "A" * 24, "file-" + "0" * 25,
               "file-" + "0" * 24 + "%00", "file-" + "0" * 24 + ".jsonl", "." * 300, "x" * 5000, "%00", "~root",
               "/etc/passwd", "secret", "jobs%2Ffiles"]
    for v in victims:
        for method, path in [("GET", f"/v1/files/{v}"), ("GET", f"/v1/files/{v}/content"),
                             ("DELETE", f"/v1/files/{v}"), ("DELETE", f"/v1/files/{v}/content")]:
            status, _, raw = server.request(method, path)
            assert status in (400, 404), (method, path, status, raw[:200])
            assert b"To be" not in raw and b'"id": "x"' not in raw, (path, raw[:200])
            if status == 404 and path.startswith("/v1/files/") and b"file_id" in raw:
                assert json.loads(raw)["error"]["param"] == "file_id"
    assert tree(work) == before
    assert server.request("GET", "/health")[0] == 200


def test_route_list_and_methods(server):
    status, err = error_of(server.get_json("/v1/nope"))
    assert status == 404 and "POST|GET /v1/files" in err["message"] and "DELETE /v1/files/{id}" in err["message"]
    status, hdrs, _ = server.request("PUT", "/v1/files")
    assert status == 405 and hdrs.get("allow") == "POST, GET"


# ---------------------------------------------------------------- limits

def test_max_files_429_and_max_body_413(tmp_path):
    s = Server("--parallel", "1", "--jobs-dir", str(tmp_path / "jobs"), "--max-files", "3", "--max-body", "4096")
    try:
        c = OpenAI(base_url=s.base + "/v1", api_key="unused", max_retries=0, timeout=60)
        ids = [c.files.create(file=(f"{i}.jsonl", GOOD), purpose="fine-tune").id for i in range(3)]
        with pytest.raises(openai.RateLimitError) as ei:
            c.files.create(file=("4.jsonl", GOOD), purpose="fine-tune")
        assert "--max-files" in ei.value.body["message"]
        status, err = error_of(upload(s, GOOD))
        assert status == 429 and err["code"] == "too_many_files", err
        c.files.delete(ids[0])
        ids.append(c.files.create(file=("5.jsonl", GOOD), purpose="fine-tune").id)
        assert sorted(x.id for x in c.files.list()) == sorted(ids[1:])
        c.files.delete(ids[1])
        big = PROMPT_LINE * (5000 // len(PROMPT_LINE))
        status, err = error_of(upload(s, big))
        assert status == 413 and "--max-body" in err["message"], err
        assert len(c.files.list().data) == 2
    finally:
        assert s.stop() == 0
    assert len(disk_names(tmp_path / "jobs" / "files")) == 4  # 2 files, .json + .jsonl each


def test_max_files_is_exact_under_concurrent_uploads(tmp_path):
    s = Server("--parallel", "1", "--jobs-dir", str(tmp_path / "jobs"), "--max-files", "4")
    try:
        results = []
        lock = threading.Lock()

        def one(i):
            r = upload(s, GOOD * 50, filename=f"c{i}.jsonl")
            with lock:
                results.append(r)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        codes = sorted(st for st, _ in results)
        assert codes == [200] * 4 + [429] * 8, codes
        ids = {b["id"] for st, b in results if st == 200}
        assert len(ids) == 4 and {x["id"] for x in s.get_json("/v1/files")[1]["data"]} == ids
    finally:
        assert s.stop() == 0
    names = disk_names(tmp_path / "jobs" / "files")
    assert sorted(names) == sorted([f"{i}.json" for i in ids] + [f"{i}.jsonl" for i in ids]), names


def test_api_key_protects_files(tmp_path):
    s = Server("--parallel", "1", "--jobs-dir", str(tmp_path / "jobs"), "--api-key", "k3y")
    try:
        assert s.request("GET", "/v1/files")[0] == 401
        assert upload(s, GOOD)[0] == 401
        assert upload(s, GOOD, headers={"Authorization": "Bearer k3y"})[0] == 200
        c = OpenAI(base_url=s.base + "/v1", api_key="k3y", max_retries=0, timeout=60)
        assert len(c.files.list().data) == 1
    finally:
        assert s.stop() == 0


# ---------------------------------------------------------------- persistence and start-up

def test_restart_keeps_files_and_cleans_leftovers(tmp_path):
    jobs = tmp_path / "jobs"
    files_dir = jobs / "files"
    s = Server("--parallel", "1", "--jobs-dir", str(jobs))
    try:
        c = OpenAI(base_url=s.base + "/v1", api_key="unused", max_retries=0, timeout=60)
        made = [c.files.create(file=(f"r{i}.jsonl", GOOD + PROMPT_LINE * i), purpose="fine-tune") for i in range(4)]
        c.files.delete(made[1].id)
        before = [x.model_dump() for x in c.files.list()]
    finally:
        assert s.stop(signal.SIGTERM) == 0
    assert [x["id"] for x in before] == [made[3].id, made[2].id, made[0].id]

    s = Server("--parallel", "1", "--jobs-dir", str(jobs))
    try:
        c = OpenAI(base_url=s.base + "/v1", api_key="unused", max_retries=0, timeout=60)
        assert [x.model_dump() for x in c.files.list()] == before  # same objects, same order
        for m in (made[0], made[2], made[3]):
            assert c.files.content(m.id).read() == GOOD + PROMPT_LINE * int(m.filename[1])
        late = c.files.create(file=("late.jsonl", GOOD), purpose="fine-tune")
    finally:
        s.stop(signal.SIGKILL)  # an acknowledged upload survives a kill

    # What a crash can leave, and what a person may put there.
    hexid = lambda ch: "file-" + ch * 24  # noqa: E731
    (files_dir / f".tmp-{hexid('1')}.jsonl").write_bytes(b"half")
    (files_dir / f".tmp-{hexid('2')}.json").write_bytes(b"{")
    (files_dir / f"{hexid('3')}.jsonl").write_bytes(GOOD)  # content whose object was never written
    (files_dir / f"{hexid('4')}.json").write_text("{not json")  # a corrupt object: skipped, kept for a person
    (files_dir / f"{hexid('4')}.jsonl").write_bytes(GOOD)
    (files_dir / f"{hexid('5')}.json").write_text(json.dumps({**before[0], "id": hexid("5"), "bytes": 3}))
    (files_dir / f"{hexid('5')}.jsonl").write_bytes(GOOD)  # size differs from the object's
    (files_dir / "notes.txt").write_text("mine")

    s = Server("--parallel", "1", "--jobs-dir", str(jobs))
    try:
        status, body = s.get_json("/v1/files")
        assert status == 200
        assert [x["id"] for x in body["data"]] == [late.id] + [x["id"] for x in before]
        assert s.request("GET", f"/v1/files/{late.id}/content")[2] == GOOD
        assert s.request("GET", f"/v1/files/{hexid('4')}")[0] == 404
        assert s.wait_log(f"{hexid('4')}.json") and s.wait_log(f"{hexid('5')}.json: its content's size differs")
    finally:
        assert s.stop() == 0
    names = set(disk_names(files_dir))
    assert not any(n.startswith(".tmp-") for n in names) and f"{hexid('3')}.jsonl" not in names
    assert {f"{hexid('4')}.json", f"{hexid('4')}.jsonl", f"{hexid('5')}.json", "notes.txt"} <= names


def test_without_jobs_dir_every_files_route_is_501():
    s = Server("--parallel", "1")
    try:
        body, hdrs = multipart([("purpose", None, b"fine-tune"), ("file", "t.jsonl", GOOD)])
        for method, path, b, h in [("GET", "/v1/files", None, None), ("POST", "/v1/files", body, hdrs),
                                   ("GET", "/v1/files/file-" + "0" * 24, None, None),
                                   ("GET", "/v1/files/file-" + "0" * 24 + "/content", None, None),
                                   ("DELETE", "/v1/files/file-" + "0" * 24, None, None)]:
            status, _, raw = s.request(method, path, b, h)
            err = json.loads(raw)["error"]
            assert status == 501 and "--jobs-dir" in err["message"], (path, err)
        c = OpenAI(base_url=s.base + "/v1", api_key="unused", max_retries=0, timeout=60)
        with pytest.raises(openai.APIStatusError) as ei:
            c.files.list()
        assert ei.value.status_code == 501
    finally:
        assert s.stop() == 0


def test_jobs_dir_created_or_refused(tmp_path):
    regular = tmp_path / "regular"
    regular.write_text("x")
    for bad, text in [(regular, "not a directory"), (tmp_path / "no" / "such", "cannot be created")]:
        r = subprocess.run([BIN, "--model", MODEL, "--port", "0", "--jobs-dir", str(bad)], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 2 and "--jobs-dir" in r.stderr and text in r.stderr, r.stderr
        assert "listening" not in r.stderr
    fresh = tmp_path / "fresh"
    s = Server("--parallel", "1", "--jobs-dir", str(fresh))
    try:
        assert s.get_json("/v1/files") == (200, {"object": "list", "data": [], "first_id": None, "last_id": None,
                                                 "has_more": False})
        assert (fresh / "files").is_dir()
    finally:
        assert s.stop() == 0
