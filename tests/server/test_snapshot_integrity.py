"""Snapshot files under stress: two sessions saving to one name at once (every 200 leaves a snapshot that restores,
whole), temporary files a crash left behind (removed at start), and files tampered with after saving and given a
correct checksum again (refused at restore with 422, the session unchanged and still usable)."""
import struct
import threading
import time
import zlib

import pytest

from conftest import Server

END = b"END!"


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    d = tmp_path_factory.mktemp("snap-integrity")
    s = Server("--parallel", "2", "--max-sessions", "6", "--session-dir", str(d))
    s.dir = d
    yield s
    assert s.stop() == 0, "".join(s.log)


def new_session(server, n_tokens):
    st, s = server.post("/v1/sessions", {})
    assert st == 201, s
    if n_tokens:
        st, out = server.post("/v1/completions", {"prompt": [5 + i % 200 for i in range(n_tokens)], "max_tokens": 0,
                                                  "session": s["id"]})
        assert st == 200, out
    return s["id"]


def delete(server, sid):
    assert server.request("DELETE", "/v1/sessions/" + sid)[0] == 200


def temp_files(d):
    return sorted(p.name for p in d.iterdir() if ".tmp" in p.name)


def test_concurrent_saves_to_one_name_leave_whole_snapshots(srv):
    """Two sessions of different sizes save as "race" at once for ~3 s; after every 200 the name restores (into a
    third session); nothing is left but the snapshot."""
    writers = [new_session(srv, 20), new_session(srv, 110)]
    checkers = [new_session(srv, 0), new_session(srv, 0)]
    results = [[], []]
    deadline = time.time() + 3

    def run(i):
        rounds = 0
        while time.time() < deadline and rounds < 400:
            rounds += 1
            st, body = srv.post(f"/v1/sessions/{writers[i]}/save", {"name": "race"})
            results[i].append(("save", st, body))
            if st == 200:
                st, body = srv.post(f"/v1/sessions/{checkers[i]}/restore", {"name": "race"})
                results[i].append(("restore", st, body))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    bad = [r for rs in results for r in rs if r[1] != 200]
    saves = sum(1 for rs in results for r in rs if r[0] == "save")
    assert not bad, f"{len(bad)} failures in {saves} saves, first: {bad[:3]}"
    assert all(len(rs) >= 4 for rs in results), "both writers saved several times"
    st, body = srv.post(f"/v1/sessions/{checkers[0]}/restore", {"name": "race"})
    assert st == 200, body
    tokens = srv.get_json("/v1/sessions/" + checkers[0])[1]["tokens"]
    assert tokens in (20 + 1, 110 + 1), tokens  # one writer's whole state (+ BOS)
    assert temp_files(srv.dir) == []
    for sid in writers + checkers:
        delete(srv, sid)
    assert srv.request("DELETE", "/v1/snapshots/race")[0] == 200


def test_leftover_temporary_files_are_removed_at_start(tmp_path):
    leftovers = ["crashed.mnemo.tmp.Ab12Cd", "crashed.mnemo.tmp", "x.y.mnemo.tmp.000000"]
    kept = ["notes.tmp", "crashed.mnemo.tmp.toolong7", "other.tmp.Ab12Cd", "kept.mnemo"]
    for name in leftovers + kept:
        (tmp_path / name).write_bytes(b"half a snapshot")
    (tmp_path / "dir.mnemo.tmp.Zz99Zz").mkdir()  # not a file: not ours to remove
    s = Server("--parallel", "1", "--session-dir", str(tmp_path))
    try:
        names = sorted(p.name for p in tmp_path.iterdir())
        assert names == sorted(kept + ["dir.mnemo.tmp.Zz99Zz"]), names
        st, lst = s.get_json("/v1/snapshots")
        assert st == 200 and [x["name"] for x in lst["data"]] == ["kept"], lst
    finally:
        assert s.stop() == 0


def sections(data):
    """{tag: (offset of its data, length)} of a snapshot container (snapshot.h)."""
    out, off = {}, 24
    while True:
        tag, length = data[off:off + 4], struct.unpack_from("<Q", data, off + 8)[0]
        if tag == END:
            return out
        out[tag] = (off + 16, length)
        off += 16 + length + (-length % 8)


def tamper(data, off, new):
    b = bytearray(data)
    b[off:off + len(new)] = new
    struct.pack_into("<I", b, len(b) - 8, zlib.crc32(bytes(b[:-8])))
    return bytes(b)


def test_tampered_snapshots_with_a_fixed_checksum_are_refused(srv):
    sid = new_session(srv, 30)
    st, saved = srv.post(f"/v1/sessions/{sid}/save", {"name": "good"})
    assert st == 200, saved
    data = (srv.dir / "good.mnemo").read_bytes()
    sec = sections(data)
    nan, inf, huge = struct.pack("<f", float("nan")), struct.pack("<f", float("inf")), struct.pack("<f", 1e30)
    header = 40  # file header 24 + section header 16: n_layer, kv_dim, n_rows at +8.., n_past +20, last_token +24
    n_past = struct.unpack_from("<i", data, header + 20)[0]
    cases = {
        "nan-key": tamper(data, sec[b"KVK_"][0] + 8, nan),
        "inf-value": tamper(data, sec[b"KVV_"][0] + sec[b"KVV_"][1] - 4, inf),
        "huge-key": tamper(data, sec[b"KVK_"][0] + 64, huge),
        "nan-logit": tamper(data, sec[b"LGTS"][0], nan),
        "no-last-token": tamper(data, header + 24, struct.pack("<i", -1)),
        "past-rows": tamper(data, header + 20, struct.pack("<i", n_past + 1)),
        "past-vocab": tamper(data, header + 24, struct.pack("<i", 1 << 20)),
    }
    other = new_session(srv, 0)
    st, before = srv.post("/v1/completions", {"prompt": [7, 8], "max_tokens": 6, "temperature": 0, "session": other})
    assert st == 200, before
    st, snap = srv.get_json("/v1/sessions/" + other)
    for name, bytes_ in cases.items():
        (srv.dir / f"{name}.mnemo").write_bytes(bytes_)
        st, body = srv.post(f"/v1/sessions/{other}/restore", {"name": name})
        assert st == 422 and f"{name}.mnemo" in body["error"]["message"], (name, body)
        st, body = srv.post("/v1/sessions", {"restore": name})
        assert st == 422, (name, body)
        assert srv.request("DELETE", f"/v1/snapshots/{name}")[0] == 200
    st, info = srv.get_json("/v1/sessions/" + other)
    assert info["tokens"] == snap["tokens"], "the refusals left the session as it was"
    # still usable: the same continuation as a session that saw none of it
    twin = new_session(srv, 0)
    st, a = srv.post("/v1/completions", {"prompt": [9], "max_tokens": 6, "temperature": 0, "session": other})
    st2, _ = srv.post("/v1/completions", {"prompt": [7, 8], "max_tokens": 6, "temperature": 0, "session": twin})
    st3, b = srv.post("/v1/completions", {"prompt": [9], "max_tokens": 6, "temperature": 0, "session": twin})
    assert st == st2 == st3 == 200, (a, b)
    assert a["choices"][0]["text"] == b["choices"][0]["text"]
    st, body = srv.post(f"/v1/sessions/{other}/restore", {"name": "good"})  # the untampered file still loads
    assert st == 200, body
    for s in (sid, other, twin):
        delete(srv, s)
    assert srv.request("DELETE", "/v1/snapshots/good")[0] == 200
