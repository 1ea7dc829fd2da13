#!/usr/bin/env python3
"""The installed layout finds its default model (SmolLM2-135M-Instruct's GGUF) on its own (stdlib only; run by ctest).

Installs the build into a temporary prefix and checks: the default model and the LongLLaMA demo land in share/mnemo/models; no installed
binary or library holds a path into the source tree but to its code (debug and line information);
the installed `mnemo` generates with no --model from the installed copy, also after the prefix is moved; the
installed and the build tree's `mnemo-server` serve it with no --model; MNEMO_MODEL overrides; with
the installed model gone the error names every place looked at.

usage: test_install.py BUILD_DIR SOURCE_DIR
"""
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

from cli_harness import check, finish, runner

BUILD, SRC = os.path.realpath(sys.argv[1]), os.path.realpath(sys.argv[2])
ENV = {k: v for k, v in os.environ.items() if k != "MNEMO_MODEL"}
ENV.update(NO_PROXY="127.0.0.1", no_proxy="127.0.0.1")


run = runner(env=ENV)


CODE_DIRS = {"engine", "kernels", "memstore", "server", "clients"}


def source_paths(path):
    """Strings in a binary that point into the source tree at anything but code: compilers keep source file and
    directory names as debug and line information (asserts, nvcc -lineinfo), which nothing reads at run time."""
    text = subprocess.run(["strings", "-a", path], capture_output=True, text=True).stdout
    hits = re.findall(re.escape(SRC) + r"[^\s\"'():]*", text)
    return sorted({h for h in hits if os.path.relpath(h, SRC).split(os.sep)[0] not in CODE_DIRS and
                   not re.search(r"\.(c|h|cc|cpp|cu|cuh)$", h)})


def serve_models(server, env=None):
    """Starts server (no --model) on a free port; -> (ids from /v1/models or None, its stderr)."""
    proc = subprocess.Popen([server, "--port", "0", "--threads", "1"], stderr=subprocess.PIPE, text=True,
                            env=env or ENV)
    log, ids = [], None
    try:
        deadline = time.time() + 60
        port = None
        while port is None and time.time() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            log.append(line)
            m = re.search(r"listening on http://[^ ]*:(\d+)", line)
            port = int(m.group(1)) if m else None
        while port and ids is None and time.time() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=5) as r:
                    ids = [m["id"] for m in json.load(r)["data"]]
            except OSError:
                time.sleep(0.1)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            log.append(proc.communicate(timeout=30)[1])
        except subprocess.TimeoutExpired:
            proc.kill()
            log.append(proc.communicate()[1])
    return ids, "".join(log)


with tempfile.TemporaryDirectory() as td:
    prefix = os.path.join(td, "prefix")
    rc, out, err = run("cmake", "--install", BUILD, "--prefix", prefix)
    check(rc == 0, f"cmake --install: {err}")
    model = os.path.join(prefix, "share", "mnemo", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    demo = os.path.join(prefix, "share", "mnemo", "models", "longllama-shakespeare")
    check(os.path.isfile(model), "the default model is installed under share/mnemo/models")
    check(os.path.isfile(os.path.join(demo, "config.json")) and os.path.isfile(os.path.join(demo, "model.safetensors")),
          "the LongLLaMA demo is installed beside it")

    installed = [p for p in glob.glob(os.path.join(prefix, "bin", "*")) + glob.glob(os.path.join(prefix, "lib*", "**",
                 "libengine*"), recursive=True) if os.path.isfile(p) and not p.endswith(".pc")]
    check(len(installed) >= 3, f"installed binaries and libraries: {installed}")
    for path in installed:
        bad = source_paths(path)
        check(not bad, f"{os.path.relpath(path, prefix)} holds source-tree paths: {bad[:5]}")

    mnemo = os.path.join(prefix, "bin", "mnemo")
    args = ["generate", "--prompt", "The capital of France is", "-n", "6", "--temp", "0"]
    rc, out, err = run(mnemo, *args, "-v")
    check(rc == 0 and f"loaded {model}:" in err, f"installed mnemo loads the installed model: {err!r}")
    rc_b, out_b, err_b = run(os.path.join(BUILD, "mnemo"), *args)
    check(rc_b == 0 and out == out_b and len(out) > 10, f"same text as build/mnemo: {out!r} vs {out_b!r}")
    rc, out, err = run(mnemo, "generate", "--help")
    check(rc == 0 and "$MNEMO_MODEL" in out and f"default model (no --model) now: {model}" in out,
          f"--help names MNEMO_MODEL and the default: {out[-300:]!r}")

    mha = os.path.join(SRC, "tests", "fixtures", "models", "mha")
    rc, out, err = run(mnemo, *args, "-v", env=dict(ENV, MNEMO_MODEL=mha))
    check(rc == 0 and f"loaded {mha}:" in err, f"MNEMO_MODEL overrides the default: {err!r}")
    rc, out, err = run(mnemo, *args, "--model", mha, "-v", env=dict(ENV, MNEMO_MODEL="/nonexistent"))
    check(rc == 0 and f"loaded {mha}:" in err, f"--model overrides MNEMO_MODEL: {err!r}")
    rc, out, err = run(mnemo, *args, env=dict(ENV, MNEMO_MODEL="/nonexistent/model"))
    check(rc == 1 and "MNEMO_MODEL=/nonexistent/model: No such file or directory" in err and
          len(err.strip().splitlines()) == 1, f"a bad MNEMO_MODEL: exit {rc}, {err!r}")

    server = os.path.join(prefix, "bin", "mnemo-server")
    if os.path.exists(server):
        ids, log = serve_models(server)
        check(ids == ["SmolLM2-135M-Instruct.Q4_1"], f"installed mnemo-server serves the default: {ids} {log[-400:]!r}")
        rc, out, err = run(server, "--help")
        check(rc == 0 and "$MNEMO_MODEL" in out and model in out, f"mnemo-server --help: {out[-300:]!r}")
        ids, log = serve_models(os.path.join(BUILD, "mnemo-server"))
        check(ids == ["SmolLM2-135M-Instruct.Q4_1"], f"build/mnemo-server serves the default: {ids} {log[-400:]!r}")

    # The prefix is relocatable: nothing points back at where it was installed.
    moved = os.path.join(td, "moved")
    os.rename(prefix, moved)
    rc, out, err = run(os.path.join(moved, "bin", "mnemo"), *args, "-v")
    check(rc == 0 and f"loaded {os.path.join(moved, 'share', 'mnemo', 'models', 'SmolLM2-135M-Instruct.Q4_1.gguf')}:" in err,
          f"a moved prefix still finds its model: {err!r}")

    # Without the installed model the installed binaries say where they looked (the build tree is not among them).
    shutil.rmtree(os.path.join(moved, "share", "mnemo"))
    rc, out, err = run(os.path.join(moved, "bin", "mnemo"), *args)
    looked = os.path.join(moved, "bin", "..", "share", "mnemo", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    check(rc == 1 and looked in err and "MNEMO_MODEL" in err and "fetch-default-model.sh" in err and BUILD not in err,
          f"no default model: exit {rc}, {err!r}")
    if os.path.exists(os.path.join(moved, "bin", "mnemo-server")):
        rc, out, err = run(os.path.join(moved, "bin", "mnemo-server"), "--port", "0")
        check(rc == 1 and looked in err, f"mnemo-server with no default model: exit {rc}, {err!r}")

finish()
