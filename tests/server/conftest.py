"""Shared helpers for the mnemo-server tests: start the real binary on a tiny fixture model on a free loopback
port (--port 0; the server prints the port it bound, first while loading, then in "listening on ..."), talk to it
with raw HTTP, stop it with a signal.

Environment (set by ctest): MNEMO_SERVER_BIN (the binary), MNEMO_FIXTURES (tests/fixtures), MNEMO_CLI_BIN (the
mnemo CLI, for cross-checks; optional).
"""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time

import pytest

BIN = os.environ.get("MNEMO_SERVER_BIN", "build/mnemo-server")
FIXTURES = os.environ.get("MNEMO_FIXTURES", os.path.join(os.path.dirname(__file__), "..", "fixtures"))
MODEL = os.path.join(FIXTURES, "models", "mha")


class Server:
    """One mnemo-server process. args are extra command-line options."""

    def __init__(self, *args, model=MODEL, env=None, wait_ready=True, threads=1):
        cmd = [BIN, "--model", model, "--port", "0", "--threads", str(threads), *args]
        full_env = dict(os.environ)
        full_env.update(env or {})
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     env=full_env)
        self.log = []
        self._port_seen = threading.Event()
        self.port = None
        threading.Thread(target=self._read_log, daemon=True).start()
        if not self._port_seen.wait(30):
            self.proc.kill()
            raise RuntimeError("server did not print its port:\n" + "".join(self.log))
        if self.port is None:
            raise RuntimeError("server exited early:\n" + "".join(self.log))
        self.base = f"http://127.0.0.1:{self.port}"
        if wait_ready:
            self.wait_ready()

    def wait_log(self, text, timeout=10):
        """True once a stderr line containing text has been read (the reader thread runs behind the server)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if any(text in line for line in self.log):
                return True
            time.sleep(0.01)
        return False

    def _read_log(self):
        for line in self.proc.stderr:
            self.log.append(line)
            m = re.search(r"port (\d+) bound|listening on http://[^ ]*:(\d+)", line)
            if m and self.port is None:
                self.port = int(m.group(1) or m.group(2))
                self._port_seen.set()
        self._port_seen.set()

    def wait_ready(self, timeout=60):
        end = time.time() + timeout
        while time.time() < end:
            try:
                status, _, _ = self.request("GET", "/health")
                if status == 200:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError("server exited:\n" + "".join(self.log))
            time.sleep(0.05)
        raise RuntimeError("server not ready:\n" + "".join(self.log))

    def request(self, method, path, body=None, headers=None, timeout=120):
        """-> (status, headers dict (lower-case names), body bytes)"""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        hdrs = {"Content-Type": "application/json"} if body is not None else {}
        hdrs.update(headers or {})
        conn.request(method, path, body=body, headers=hdrs)
        resp = conn.getresponse()
        data = resp.read()
        out = (resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)
        conn.close()
        return out

    def post(self, path, body, headers=None):
        status, hdrs, data = self.request("POST", path, body, headers)
        return status, json.loads(data) if data else None

    def get_json(self, path, headers=None):
        status, _, data = self.request("GET", path, headers=headers)
        return status, json.loads(data)

    def metrics(self):
        status, _, data = self.request("GET", "/metrics")
        assert status == 200
        out = {}
        for line in data.decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("server did not exit after signal:\n" + "".join(self.log))
        time.sleep(0.05)  # let the log reader drain stderr
        # Under -DMNEMO_SANITIZE=ON a sanitizer report fails the test even when the exit status is 0 (UBSan).
        bad = [l for l in self.log if "runtime error:" in l or "Sanitizer" in l]
        assert not bad, "".join(self.log)
        return rc


def sse_events(resp_lines):
    """Parses an SSE stream (an iterable of byte lines) into a list of payloads ("[DONE]" kept as a string)."""
    out = []
    for raw in resp_lines:
        line = raw.decode().rstrip("\r\n")
        if line.startswith("data: "):
            payload = line[6:]
            out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def stream_request(port, path, body, timeout=120):
    """POSTs a streaming request; returns (http.client connection, response) for incremental reading."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    return conn, conn.getresponse()


@pytest.fixture(scope="module")
def server():
    s = Server("--parallel", "4")
    yield s
    assert s.stop() == 0, "".join(s.log)
