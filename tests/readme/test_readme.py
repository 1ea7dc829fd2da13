#!/usr/bin/env python3
"""The documentation's commands run as a reader runs them: every fenced code block in README.md and in each page of
docs/ carries a marker on the line before it that says how it is checked, and a page's blocks run in the order
printed, in one directory that stands for the repository root (build/, models/, tests/, scripts/, clients/, bench/
and docs/ point at this checkout; what a block writes, the next block of the same page sees; each page starts from
a fresh directory).

Markers (an HTML comment, invisible on the rendered page):
  <!-- readme-test: run -->             run the block with bash (set -euo pipefail)
  <!-- readme-test: run-after-build -->  the same, minus the install and cmake steps that CI (scripts/test.sh) runs
                                        itself just before this test
  <!-- readme-test: server -->          a block that starts its own server, as printed (`build/mnemo-server ... &`),
                                        waits for it and talks to it with curl: run with curl failing on any HTTP
                                        error; its port 8080 becomes a free one (the only change made to the block)
                                        and the server it started must stop with exit 0 on SIGTERM
  <!-- readme-test: launch -->          each line starting mnemo-server (no --help) is started on a free port, must
                                        print "listening" and stop cleanly on SIGTERM; other lines run as with run
  <!-- readme-test: python-server -->   a Python block (the server venv's python: openai client) whose first line is
                                        the comment "# with the server running: build/mnemo-server ...": that
                                        command, as printed, is started first (port 8080 made a free one)
  <!-- readme-test: skip REASON -->     not run here; REASON says why (a real checkpoint, or another test covers it)
A block without a marker fails the test, so no new command in the documentation escapes it.

usage: test_readme.py PAGE [PAGE ...] BUILD_DIR SOURCE_DIR [PYTHON]
  PAGE: a Markdown file (README.md, docs/server.md), or a directory written with a trailing slash (docs/) for every
  *.md file in it, in name order. ctest's readme_commands runs README.md and docs/.
"""
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request



def pages_and_rest(argv):
    """-> ([Markdown files], [BUILD_DIR, SOURCE_DIR, PYTHON?]): the leading arguments that are pages."""
    pages, i = [], 0
    while i < len(argv) and (argv[i].endswith(".md") or argv[i].endswith("/")):
        if argv[i].endswith("/"):
            d = os.path.abspath(argv[i])
            pages += [os.path.join(d, n) for n in sorted(os.listdir(d)) if n.endswith(".md")]
        else:
            pages.append(os.path.abspath(argv[i]))
        i += 1
    return pages, argv[i:]


PAGES, REST = pages_and_rest(sys.argv[1:])
if not PAGES or len(REST) < 2:
    sys.exit(__doc__)
BUILD, SRC = (os.path.abspath(a) for a in REST[:2])
PYTHON = REST[2] if len(REST) > 2 else sys.executable
passed = failed = 0


def check(cond, what, detail=""):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print(f"FAIL: {what}\n{detail}", file=sys.stderr)


CODE_LANGS = ("sh", "bash", "c", "python")  # fenced blocks without one of these are text (e.g. the layout)


def blocks(text):
    """-> [(line number, language, marker or None, code)]"""
    out, lines, i = [], text.split("\n"), 0
    while i < len(lines):
        m = re.match(r"^```(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        k = i - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        mk = re.match(r"^<!-- readme-test: (.*?) -->\s*$", lines[k]) if k >= 0 else None
        out.append((i + 1, m.group(1), mk.group(1) if mk else None, "\n".join(lines[i + 1:j])))
        i = j + 1
    return out


def scratch():
    d = tempfile.mkdtemp(prefix="mnemo-readme-")
    os.symlink(BUILD, os.path.join(d, "build"))
    for name in ("models", "tests", "scripts", "clients", "bench", "docs"):
        if os.path.exists(os.path.join(SRC, name)):
            os.symlink(os.path.join(SRC, name), os.path.join(d, name))
    return d


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start_server(args, cwd, port=None):
    port = port or free_port()
    proc = subprocess.Popen([os.path.join(BUILD, "mnemo-server"), *args, "--port", str(port)], cwd=cwd,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for _ in range(600):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return proc, port
        except OSError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("mnemo-server did not come up: " + (proc.stderr.read() if proc.stderr else ""))


def own_server(code, port):
    """A server block with its port made a free one and its server line given that port."""
    out = []
    for line in code.replace(":8080", f":{port}").split("\n"):
        if line.lstrip().startswith("build/mnemo-server") and "--port" not in line:
            cmd, amp, rest = line.partition("&")
            line = f"{cmd.rstrip()} --port {port} {amp}{rest}"
        out.append(line)
    return "\n".join(out)


# A block's background server gets SIGTERM when the block ends; its exit status is kept for the check.
SERVER_TRAP = ("stop_servers() { for p in $(jobs -p); do kill -TERM $p 2>/dev/null; wait $p; echo \"server exit $?\" "
               ">&2; done; }\ntrap stop_servers EXIT\n")


STRICT_CURL = "curl() { command curl --fail-with-body -sS \"$@\"; echo; }\n"  # an HTTP error fails the block


def run(code, cwd, lang="sh", strict_curl=False):
    if lang == "python":
        cmd = [PYTHON, "-c", code]
    else:
        cmd = ["bash", "-c", "set -euo pipefail\n" + (STRICT_CURL + SERVER_TRAP if strict_curl else "") + code]
    env = dict(os.environ, NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600, env=env)


def stop_server(proc):
    proc.terminate()
    try:
        return proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        return -9


def launch(code, cwd):
    """-> (ok, detail): every mnemo-server line comes up and stops cleanly; other lines run."""
    for line in code.split("\n"):
        cmdline = line.split("#")[0].strip()
        if not cmdline:
            continue
        words = cmdline.split()
        if words[0].endswith("mnemo-server") and "--help" not in words:
            try:
                proc, _ = start_server(words[1:], cwd)
            except RuntimeError as e:
                return False, f"{cmdline}: {e}"
            rc = stop_server(proc)
            if rc != 0:
                return False, f"{cmdline}: exit {rc} on SIGTERM"
        else:
            r = run(cmdline, cwd)
            if r.returncode != 0:
                return False, f"{cmdline}: exit {r.returncode}\n{r.stderr[-1000:]}"
    return True, ""


def after_build(code):
    """The first block's commands without the steps scripts/test.sh has just run (install, configure, build)."""
    keep = []
    for line in code.split("\n"):
        parts = [p.strip() for p in line.split("&&")]
        parts = [p for p in parts if p and not p.startswith(("scripts/install-deps.sh", "cmake ", "scripts/test.sh"))]
        if parts and not line.lstrip().startswith("#"):
            keep.append(" && ".join(parts))
    return "\n".join(keep)


def printed_server(code):
    """The server command a Python block's first line names ("# with the server running: build/mnemo-server ...")."""
    first = code.split("\n", 1)[0]
    m = re.match(r"^#.*?(build/mnemo-server[^&#]*)", first)
    return m.group(1).split()[1:] if m else None


def main():
    t_all = time.time()
    for page in PAGES:
        name = os.path.relpath(page, SRC)
        found = blocks(open(page, encoding="utf-8").read())
        if os.path.basename(page) == "README.md":
            check(len(found) > 0, f"{name} has code blocks")
        d = scratch()  # one directory for every block of the page, in order, as a reader's checkout
        try:
            for line, lang, marker, code in found:
                if lang in CODE_LANGS:
                    run_block(name, line, lang, marker, code, d)
        finally:
            shutil.rmtree(d, ignore_errors=True)
    print(f"{passed} passed, {failed} failed ({len(PAGES)} pages, {time.time() - t_all:.0f} s)")
    return 1 if failed else 0


def run_block(page, line, lang, marker, code, d):
    where = f"{page}:{line} ({lang or 'text'})"
    if marker is None:
        check(False, f"{where}: no <!-- readme-test: ... --> marker before the block")
        return
    kind, _, arg = marker.partition(" ")
    if kind == "skip":
        check(len(arg.strip()) > 10, f"{where}: a skip says why", marker)
        return
    if kind not in ("run", "run-after-build", "server", "python-server", "launch"):
        check(False, f"{where}: unknown marker '{kind}'")
        return
    server = None
    t0 = time.time()
    try:
        if kind == "launch":
            ok, detail = launch(code, d)
            check(ok, f"{where}: {detail}")
            if ok:
                print(f"ok   {where} ({time.time() - t0:.1f} s)")
            return
        if kind == "server":
            if "build/mnemo-server" not in code:
                check(False, f"{where}: a server block starts its own server (build/mnemo-server ... &)")
                return
            code = own_server(code, free_port())
        if kind == "python-server":
            args = printed_server(code)
            if args is None:
                check(False, f"{where}: the first line names the server: # with the server running: build/mnemo-server")
                return
            server, port = start_server(args, d)
            code = code.replace(":8080", f":{port}")
        if kind == "run-after-build":
            code = after_build(code)
        r = run(code, d, "python" if kind == "python-server" else "sh", strict_curl=kind == "server")
        ok = r.returncode == 0 and "Traceback" not in r.stderr
        check(ok, f"{where}: exit {r.returncode} after {time.time() - t0:.1f} s",
              f"--- block ---\n{code}\n--- stdout ---\n{r.stdout[-2000:]}\n--- stderr ---\n{r.stderr[-2000:]}")
        if kind == "server":
            exits = re.findall(r"server exit (\d+)", r.stderr)
            check(exits and all(e == "0" for e in exits), f"{where}: its server exited {exits} on SIGTERM")
        if ok:
            print(f"ok   {where} ({time.time() - t0:.1f} s)")
    finally:
        if server:
            rc = stop_server(server)
            check(rc == 0, f"{where}: the server exited {rc} on SIGTERM")


if __name__ == "__main__":
    sys.exit(main())
