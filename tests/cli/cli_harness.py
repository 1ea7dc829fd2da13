"""The harness every CLI test uses (stdlib only): check() records a failure without stopping, runner() makes a
function that runs a binary and returns (returncode, stdout, stderr) as text, finish() prints the counts and exits
non-zero on any failure."""
import subprocess
import sys

_counts = {"passed": 0, "failed": 0}


def check(cond, what):
    if cond:
        _counts["passed"] += 1
    else:
        _counts["failed"] += 1
        print("FAIL:", what, file=sys.stderr)


def runner(*prefix, env=None, timeout=300):
    """run(*args, stdin=None, env=None) -> (rc, out, err) for the command prefix + args."""
    def run(*args, stdin=None, env=env):
        p = subprocess.run([*prefix, *args], capture_output=True, timeout=timeout, input=stdin, env=env)
        return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")
    return run


def finish():
    print(f"{_counts['passed']} passed, {_counts['failed']} failed")
    sys.exit(1 if _counts["failed"] else 0)
