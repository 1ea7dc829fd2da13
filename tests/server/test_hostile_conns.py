"""Connections a hostile client holds: past --max-conns of every kind (silent, dripping headers, idle keep-alive,
slow bodies), ambiguous HTTP framing, and bodies that would multiply into memory. The server must keep answering
new clients (a 503 with Retry-After at worst, never a hang), stop on SIGTERM under any number of connections, and
close a connection after a framing 400 so that nothing pipelined behind it is read as a request."""
import http.client
import json
import signal
import socket
import threading
import time

import pytest

from conftest import Server


def status_of(data):
    return int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.") else None


def read_all(s, timeout=5):
    """-> (everything the server sent, whether it closed the connection (FIN or reset) within timeout)."""
    s.settimeout(timeout)
    out = b""
    try:
        while True:
            d = s.recv(65536)
            if not d:
                return out, True
            out += d
    except ConnectionResetError:
        return out, True
    except socket.timeout:
        return out, False


def health(srv, timeout=5):
    """-> (status, seconds) of GET /health on a fresh connection."""
    t = time.time()
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=timeout)
    conn.request("GET", "/health", headers={"Connection": "close"})
    st = conn.getresponse().status
    conn.close()
    return st, time.time() - t


def open_many(srv, n, first_bytes=b""):
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        if first_bytes:
            s.sendall(first_bytes)
        socks.append(s)
    return socks


def keep_alive_idle(srv, n):
    """n connections that each completed one request and stay open, idle, as keep-alive clients do."""
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        data = s.recv(4096)
        assert status_of(data) == 200, data
        socks.append(s)
        # the server dates a connection's idleness when it has finished the request, just after the reply left:
        # a pause keeps the order of those dates the order of the clients on a loaded machine
        time.sleep(0.05)
    return socks


def close_all(socks):
    for s in socks:
        s.close()


def stop_within(srv, seconds):
    t = time.time()
    rc = srv.stop(signal.SIGTERM, timeout=seconds)
    assert rc == 0, "".join(srv.log)
    return time.time() - t


def test_dripping_headers_past_max_conns_and_sigterm():
    # 140 connections that sent a request line and part of their headers, against --max-conns 128 (the default):
    # libmicrohttpd 0.9.75 deadlocked here for good. The front door holds them without a thread.
    srv = Server("--conn-timeout", "30")
    socks = open_many(srv, 140, b"GET /health HTTP/1.1\r\nHost: x\r\n")
    time.sleep(0.3)
    st, secs = health(srv)
    assert st == 200 and secs < 2
    m = srv.metrics()
    assert m["mnemo_http_connections_waiting_headers"] >= 140
    assert stop_within(srv, 10) < 10
    close_all(socks)


def test_keep_alive_past_max_conns_evicts_the_idlest():
    srv = Server("--max-conns", "8")
    held = keep_alive_idle(srv, 8)
    more = keep_alive_idle(srv, 4)  # each takes the place of the connection idle longest
    st, secs = health(srv)
    assert st == 200 and secs < 2
    closed = 0
    for s in held[:5]:
        data, eof = read_all(s, timeout=2)
        closed += eof and data == b""
    assert closed == 5  # the five idle longest were closed by the server, silently, as HTTP allows
    assert srv.metrics()["mnemo_http_connections_evicted_total"] >= 5
    assert stop_within(srv, 10) < 10
    close_all(held + more)


def test_slow_bodies_past_max_conns_get_503_then_recover():
    srv = Server("--max-conns", "8", "--conn-timeout", "2")
    slow = open_many(srv, 8, b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
    time.sleep(0.3)
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    data, eof = read_all(s, timeout=5)
    assert status_of(data) == 503 and b"Retry-After: 1" in data and b"--max-conns" in data and eof
    time.sleep(2.5)  # the slow bodies time out (408) and free their places
    assert health(srv)[0] == 200
    assert srv.metrics()["mnemo_http_connections_refused_total"] >= 1
    for x in slow:
        data, _ = read_all(x, timeout=2)
        assert status_of(data) == 408
    assert stop_within(srv, 10) < 10
    close_all(slow)


def test_silent_flood_past_the_door_does_not_lock_out_a_real_client():
    srv = Server("--max-pending", "64")
    socks = open_many(srv, 200)  # 200 silent sockets against a door of 64: the oldest make room
    time.sleep(0.3)
    for _ in range(5):
        st, secs = health(srv)
        assert st == 200 and secs < 1
    assert srv.metrics()["mnemo_http_connections_dropped_total"] >= 136
    assert stop_within(srv, 10) < 10
    close_all(socks)


FOLLOW = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
AMBIGUOUS = [
    ("cl-and-te", b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
                  b"0\r\n\r\n", b"both Content-Length and Transfer-Encoding"),
    ("two-cl", b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nabcdef",
     b"disagree"),
    ("negative-cl", b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", b"non-negative"),
    ("te-gzip", b"POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
     b"single 'chunked'"),
]


@pytest.fixture(scope="module")
def srv():
    s = Server()
    yield s
    assert s.stop() == 0, "".join(s.log)


@pytest.mark.parametrize("first", [True, False], ids=["first-request", "after-keep-alive"])
@pytest.mark.parametrize("case", AMBIGUOUS, ids=[c[0] for c in AMBIGUOUS])
def test_ambiguous_framing_is_400_and_closes(srv, case, first):
    _, raw, why = case
    if not first and case[0] == "negative-cl":
        pytest.skip("libmicrohttpd answers a negative Content-Length itself on a reused connection (and closes)")
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    prefix = b"" if first else FOLLOW
    s.sendall(prefix + raw + FOLLOW)  # a request pipelined behind: it must never be answered
    data, eof = read_all(s)
    s.close()
    if not first:
        assert status_of(data) == 200
        data = data[data.index(b'{"status":"ok"}') + 15:]
    assert status_of(data) == 400, data
    assert data.count(b"HTTP/1.1") == 1, data  # one status line, nothing for the pipelined request
    assert b"Connection: close" in data and why in data and eof


def test_tokenize_token_limit_is_413():
    srv = Server("--max-prompt-tokens", "50")
    st, body = srv.post("/tokenize", {"content": "To be, or not to be: " * 20})
    assert st == 413 and body["error"]["param"] == "content"
    assert "--max-prompt-tokens 50" in body["error"]["message"]
    st, body = srv.post("/tokenize", {"content": "To be"})
    assert st == 200 and len(body["tokens"]) >= 2
    st, body = srv.post("/v1/completions", {"prompt": "To be, or not to be: " * 20, "max_tokens": 1})
    assert st == 400 and "--max-prompt-tokens 50" in body["error"]["message"]
    srv.stop()


def peak_rss(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def test_tokenize_memory_per_byte_is_bounded():
    srv = Server("--max-prompt-tokens", "0")
    text = " ".join(["the", "king", "of", "denmark", "to", "be", "question"] * 60000)  # ~1.6 MB, ~0.7M tokens
    before = peak_rss(srv.proc.pid)
    st, _, data = srv.request("POST", "/tokenize", json.dumps({"content": text}))
    assert st == 200 and data.startswith(b'{"tokens":[')
    grew = peak_rss(srv.proc.pid) - before
    assert grew < 20 * len(text), f"{grew} bytes of peak RSS for a {len(text)}-byte text"  # was ~150x
    srv.stop()


def test_body_bytes_in_flight_are_bounded():
    srv = Server("--max-body", "100000", "--max-body-inflight", "150000")
    held = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    held.sendall(b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 90000\r\n\r\n" + b"{" * 1000)
    time.sleep(0.3)
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    s.sendall(b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 90000\r\n\r\n")
    data, eof = read_all(s)
    assert status_of(data) == 503 and b"--max-body-inflight" in data and eof
    assert srv.metrics()["mnemo_http_request_body_bytes"] >= 90000
    held.close()
    time.sleep(0.3)
    st, _ = srv.post("/tokenize", {"content": "x" * 80000})
    assert st == 200
    srv.stop()


def test_real_clients_served_while_200_hostile_connections_are_held():
    srv = Server("--max-conns", "32", "--parallel", "2", "--conn-timeout", "30")
    hostile = open_many(srv, 70)  # silent
    hostile += open_many(srv, 70, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le")  # dripping headers
    hostile += keep_alive_idle(srv, 60)  # idle keep-alive, past --max-conns 32
    errors, done = [], []

    def client(k):
        for i in range(12):
            try:
                conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
                body = {"prompt": "To be", "max_tokens": 2} if i % 3 == 0 else {"content": "To be or not"}
                conn.request("POST", "/v1/completions" if i % 3 == 0 else "/tokenize", body=json.dumps(body),
                             headers={"Content-Type": "application/json", "Connection": "close"})
                r = conn.getresponse()
                r.read()
                conn.close()
                (done if r.status == 200 else errors).append(r.status)
            except OSError as e:
                errors.append(repr(e))

    threads = [threading.Thread(target=client, args=(k,)) for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == [] and len(done) == 16 * 12
    assert stop_within(srv, 15) < 15
    close_all(hostile)
