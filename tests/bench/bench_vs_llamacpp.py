#!/usr/bin/env python3
"""CPU prefill and decode, mnemo against llama.cpp side by side on the same model shape, threads and context.

  python3 tests/bench/bench_vs_llamacpp.py [--formats f32,bf16,q8_0,q4_0] [--pairs 3] [--threads 2] \\
      [--prompt 512] [--decode 32] [--bench-engine build/tests/bench_engine] [--venv build/train-venv] \\
      [--cache ~/.cache/mnemo-bench-llamacpp] [--jsonl FILE] [--only mnemo|llama] [--mnemo-env VAR=VALUE]... [--mnemo-set NAME=VALUE]...
  python3 tests/bench/bench_vs_llamacpp.py --model FILE.gguf [--requant Q4_K_M,Q8_0] [--decode 64] \\
      [--bench-tokenizer build/tests/bench_tokenizer] ...

One command does everything, each step skipped when its output is already in the cache (outside git, never
committed):
  1. llama.cpp: the newest llama-cpp-python source package from PyPI (`pip download --no-binary :all: --no-deps`;
     --llama-sdist FILE to pin one), its vendored llama.cpp built with CMake (CPU only, -DGGML_NATIVE=ON):
     llama-bench and llama-quantize.
  2. The checkpoint: bench_train.py's `lora3b` case, a random LlamaForCausalLM with LongLLaMA-3B's layer shape
     (hidden 3200, ffn 8640, 32 heads x 100, 4 layers, vocab 8000, fp32 safetensors) and a SentencePiece tokenizer,
     made once by tests/reference's venv (shared with bench_train.py's cache).
  3. GGUF files: f32 and bf16 by llama.cpp's convert_hf_to_gguf.py (run by the venv's python with the package's
     own gguf-py on PYTHONPATH), q8_0 and q4_0 by llama-quantize from the f32 file; q4_K: llama-quantize's Q4_K_M
     of bench_train.py's k256 case (hidden 3072, ffn 8192, 24 heads x 128: LongLLaMA-3B's rows are no whole
     256-blocks), which bench_engine reads too (--model FILE.gguf), so both sides run the same file.
  4. Per format, --pairs alternated pairs (mnemo then llama.cpp: A B A B A B), every run its own process:
       mnemo:     bench_engine --layers 4 --vocab 8000 --dtype FMT --prompt P --decode D --threads T --json
                  (the engine's forward on random weights of the same shape, held in memory)
       llama.cpp: llama-bench -m FMT.gguf -t T -p P -n 0, then -p 0 -n D -d P (decode at depth P), -r 3
     Both warm up the same way: one untimed prefill of P tokens before the timed ones (llama-bench's warm-up
     run; bench_engine's first prefill), and both report the mean over their timed repetitions (bench_engine: 3
     prefills, then D decode tokens after the P-token prompt).
A format bench_engine does not know is reported as "cannot run" on mnemo's side and still
measured on llama.cpp's: adding it to bench_engine's --dtype fills the row with no change here (MNEMO_DTYPE).

A real file instead: --model FILE.gguf (e.g. models/SmolLM2-135M-Instruct.Q4_1.gguf) runs both sides on that same
file (bench_engine --model FILE, llama-bench -m FILE) and on its re-quantizations by llama-quantize
--allow-requantize (--requant, default Q4_K_M,Q8_0; cached beside the GGUF files above: re-quantized from the
file's own quantized weights, so their quality is not that of a quantization from f16, their speed is). Then
--formats is ignored and no venv is needed. It also measures tokenizer speed: bench_tokenizer writes its ~1 MB
mixed text (--write-text) and encodes it with the file's vocabulary; llamacpp_tokenize_speed.c (next to this
script, compiled here against llama.cpp's libllama) encodes the same bytes with llama_tokenize; both best of 5,
in alternated pairs, and the token counts must agree.

Printed: one line per run, per-pair ratios (mnemo / llama.cpp tokens/s, prefill and decode), the load average
before each pair, and markdown rows for tests/bench/RESULTS.md; --jsonl appends every run and pair as JSON lines.
Stdlib only (the venv is used for the checkpoint and the conversion).
"""
import argparse
import glob
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import bench_train  # noqa: E402  (the checkpoint and tokenizer maker shared with the training benchmark)

FORMATS = ("f32", "bf16", "q8_0", "q4_0", "q4_K")
MNEMO_DTYPE = {"f32": "f32", "bf16": "bf16", "q8_0": "q8_0", "q4_0": "q4_0"}  # bench_engine --dtype per format
CASE = "lora3b"
# q4_K: LongLLaMA-3B's rows (3200, 8640) are no whole 256-blocks (llama-quantize would fall back to q5_0 everywhere),
# so this format runs on bench_train.py's k256 case (hidden 3072, ffn 8192, 24 x 128), quantized by llama-quantize
# to Q4_K_M (q4_K matrices; q6_K output, and attn_v / ffn_down in some layers); both sides read that same file
# (bench_engine --model FILE.gguf: mnemo maps q4_K and q6_K natively).
CASE_OF = {"q4_K": "k256"}
QUANT_TYPE = {"q4_K": "Q4_K_M"}  # llama-quantize's type name per format (default: the format, upper case)
MNEMO_FROM_FILE = ("q4_K",)


def log(msg):
    print(msg, flush=True)


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def run(cmd, what, env=None, cwd=None, timeout=None):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd,
                       timeout=timeout)
    if r.returncode != 0:
        raise SystemExit("%s failed (rc %d): %s\n%s" % (what, r.returncode, " ".join(cmd), r.stdout[-4000:]))
    return r.stdout


def ensure_llamacpp(o):
    """Returns (llama.cpp source dir, llama-bench, llama-quantize, version)."""
    src_dir = os.path.join(o.cache, "src")
    os.makedirs(src_dir, exist_ok=True)
    sdist = o.llama_sdist
    if not sdist:
        have = sorted(glob.glob(os.path.join(src_dir, "llama_cpp_python-*.tar.gz")))
        if not have:
            log("downloading the llama-cpp-python source package from PyPI")
            run([sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", "llama-cpp-python",
                 "-d", src_dir], "pip download")
            have = sorted(glob.glob(os.path.join(src_dir, "llama_cpp_python-*.tar.gz")))
        sdist = have[-1]
    base = os.path.basename(sdist)[:-len(".tar.gz")]
    version = base.split("-", 1)[1]
    top = os.path.join(o.cache, base)
    lsrc = os.path.join(top, "vendor", "llama.cpp")
    if not os.path.exists(os.path.join(lsrc, "CMakeLists.txt")):
        log("unpacking %s" % sdist)
        with tarfile.open(sdist) as t:
            t.extractall(o.cache)
    bdir = os.path.join(o.cache, "build-" + version)
    tools = [os.path.join(bdir, "bin", t) for t in ("llama-bench", "llama-quantize")]
    if not all(os.path.exists(t) for t in tools):
        log("building llama.cpp %s (llama-bench, llama-quantize; CPU, GGML_NATIVE) in %s: minutes" % (version, bdir))
        run(["cmake", "-S", lsrc, "-B", bdir, "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON", "-DGGML_CUDA=OFF",
             "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_SERVER=OFF",
             "-DLLAMA_BUILD_EXAMPLES=OFF"], "configuring llama.cpp")
        run(["cmake", "--build", bdir, "-j", str(o.build_jobs), "--target", "llama-bench", "llama-quantize"],
            "building llama.cpp")
    return lsrc, tools[0], tools[1], version


def ensure_gguf(o, lsrc, quantize, model_dir, fmt, case=CASE):
    out_dir = os.path.join(o.cache, "gguf")
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "%s-%s.gguf" % (case, fmt))
    newer = os.path.exists(path) and os.path.getmtime(path) >= os.path.getmtime(os.path.join(model_dir,
                                                                                            "config.json"))
    if newer:
        return path
    tmp = path + ".part"
    t0 = time.time()
    if fmt in ("f32", "bf16"):
        env = dict(os.environ, PYTHONPATH=os.path.join(lsrc, "gguf-py"))
        run([o.py, os.path.join(lsrc, "convert_hf_to_gguf.py"), model_dir, "--outtype", fmt, "--outfile", tmp],
            "converting to %s GGUF" % fmt, env=env)
    else:
        qt = QUANT_TYPE.get(fmt, fmt.upper())
        run([quantize, ensure_gguf(o, lsrc, quantize, model_dir, "f32", case), tmp, qt, str(o.threads)],
            "llama-quantize %s" % qt)
    os.replace(tmp, path)
    log("made %s (%.0f MB) in %.0f s" % (path, os.path.getsize(path) / 1e6, time.time() - t0))
    return path


def ensure_requant(o, quantize, model, qtype):
    """model re-quantized to qtype by llama-quantize --allow-requantize (cached; remade when model is newer)."""
    out_dir = os.path.join(o.cache, "gguf")
    os.makedirs(out_dir, exist_ok=True)
    stem = os.path.basename(model)[:-len(".gguf")] if model.endswith(".gguf") else os.path.basename(model)
    path = os.path.join(out_dir, "%s-requant-%s.gguf" % (stem, qtype))
    if os.path.exists(path) and os.path.getmtime(path) >= os.path.getmtime(model):
        return path
    tmp = path + ".part"
    t0 = time.time()
    out = run([quantize, "--allow-requantize", model, tmp, qtype, str(o.threads)],
              "llama-quantize --allow-requantize %s" % qtype)
    os.replace(tmp, path)
    mix = {}
    for m in re.finditer(r"converting to (\w+)", out):
        mix[m.group(1)] = mix.get(m.group(1), 0) + 1
    log("made %s (%.0f MB) in %.0f s; tensors converted to: %s" % (path, os.path.getsize(path) / 1e6,
                                                                    time.time() - t0, json.dumps(mix)))
    return path


def build_against_libllama(o, lsrc, version, src):
    """Compiles one C file against the llama.cpp build's libllama into the cache; returns the executable."""
    bindir = os.path.join(o.cache, "build-" + version, "bin")
    exe = os.path.join(o.cache, "%s-%s" % (os.path.basename(src)[:-len(".c")], version))
    if not os.path.exists(exe) or os.path.getmtime(exe) < os.path.getmtime(src):
        run(["cc", "-O2", "-std=c11", "-Wall", "-I" + os.path.join(lsrc, "include"),
             "-I" + os.path.join(lsrc, "ggml", "include"), src, "-o", exe, "-L" + bindir, "-lllama", "-lggml",
             "-lggml-base", "-lm", "-Wl,-rpath," + bindir], "compiling " + os.path.basename(src))
    return exe


TOKENIZE_LINE = re.compile(r"(\d+) bytes -> (\d+) tokens, ([\d.]+) ms, ([\d.]+) MB/s")


def run_tokenizers(o, bench_tok, llama_tok, model, text):
    """Alternated pairs of tokenizer speed (MB/s, best of 5 each): mnemo's bench_tokenizer, llama.cpp's llama_tokenize,
    on the same ~1 MB text (bench_tokenizer writes it)."""
    rows = []
    for p in range(o.pairs):
        la = loadavg()
        side = {}
        for name, cmd in (("mnemo", [bench_tok, "--write-text", text, model]), ("llama", [llama_tok, model, text])):
            m = TOKENIZE_LINE.search(run(cmd, name + " tokenizer", env=child_env(o), timeout=o.timeout))
            if not m:
                raise SystemExit("%s tokenizer printed no result" % name)
            side[name] = {"bytes": int(m.group(1)), "tokens": int(m.group(2)), "ms": float(m.group(3)),
                          "mb_s": float(m.group(4))}
        if side["mnemo"]["tokens"] != side["llama"]["tokens"]:
            raise SystemExit("the tokenizers disagree on the text: mnemo %d tokens, llama.cpp %d"
                             % (side["mnemo"]["tokens"], side["llama"]["tokens"]))
        row = {"tokenizer": True, "pair": p + 1, "loadavg": la, "mnemo": side["mnemo"], "llama": side["llama"],
               "ratio": side["mnemo"]["mb_s"] / side["llama"]["mb_s"]}
        log("  tokenizer pair %d  mnemo %.2f MB/s  llama.cpp %.2f MB/s  (%d bytes -> %d tokens both; load %s)"
            % (p + 1, side["mnemo"]["mb_s"], side["llama"]["mb_s"], side["mnemo"]["bytes"],
               side["mnemo"]["tokens"], la))
        rows.append(row)
    return rows


def child_env(o, extra=()):
    n = str(o.threads)
    env = dict(os.environ, OMP_NUM_THREADS=n, OPENBLAS_NUM_THREADS=n, MKL_NUM_THREADS=n)
    for kv in extra:
        k, _, v = kv.partition("=")
        env[k] = v
    return env


def git_head():
    r = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True)
    return r.stdout.strip() or None


def run_mnemo(o, fmt, gguf=None):
    """tokens/s of bench_engine, or None with the reason when it cannot run this format."""
    from_file = fmt in MNEMO_FROM_FILE or o.model
    what = ["--model", gguf] if from_file else ["--dtype", MNEMO_DTYPE.get(fmt, fmt)]
    if from_file and not gguf:
        return None, "cannot run (%s: bench_engine reads llama-quantize's file; run both sides)" % fmt
    cmd = [o.bench_engine, "--layers", "4", "--vocab", str(bench_train.VOCAB)] + what + [
           "--prompt", str(o.prompt), "--decode", str(o.decode), "--threads", str(o.threads), "--json"]
    if o.mnemo_set:
        cmd += ["--set", ",".join(o.mnemo_set)]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       env=child_env(o, o.mnemo_env), timeout=o.timeout)
    rows = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
    if r.returncode != 0 or not rows or rows[-1].get("rc"):
        return None, "cannot run (bench_engine rc %d: %s)" % (r.returncode, r.stdout.strip().splitlines()[-1:])
    j = rows[-1]
    return {"prefill": j["prefill_tok_s"], "decode": j["decode_tok_s"], "prefill_frac": j.get("prefill_frac"),
            "decode_frac_read": j.get("decode_frac_read"), "raw": j}, None


def run_llama(o, bench, gguf):
    base = [bench, "-m", gguf, "-t", str(o.threads), "-r", str(o.llama_reps), "-o", "jsonl"]
    res = {}
    for phase, args in (("prefill", ["-p", str(o.prompt), "-n", "0"]),
                        ("decode", ["-p", "0", "-n", str(o.decode), "-d", str(o.prompt)])):
        out = run(base + args, "llama-bench " + phase, env=child_env(o), timeout=o.timeout)
        rows = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
        if not rows:
            raise SystemExit("llama-bench printed no result:\n" + out[-2000:])
        res[phase] = rows[-1]["avg_ts"]
        res[phase + "_raw"] = rows[-1]
    return res


def fmt_range(xs, f="%.1f"):
    xs = [x for x in xs if x is not None]
    if not xs:
        return "—"
    lo, hi = min(xs), max(xs)
    return f % lo if f % lo == f % hi else (f % lo) + "-" + (f % hi)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--formats", default="f32,bf16,q8_0,q4_0", help="comma list of " + ", ".join(FORMATS))
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=512, help="prompt tokens; decode is measured at this depth")
    ap.add_argument("--decode", type=int, default=32, help="decode tokens timed per run")
    ap.add_argument("--llama-reps", type=int, default=3, help="llama-bench -r")
    ap.add_argument("--bench-engine", default=os.path.join(ROOT, "build", "tests", "bench_engine"))
    ap.add_argument("--venv", default=os.path.join(ROOT, "build", "train-venv"),
                    help="tests/reference/setup_train_venv.sh's venv (torch, transformers, sentencepiece)")
    ap.add_argument("--cache", default=os.path.join(os.path.expanduser("~"), ".cache", "mnemo-bench-llamacpp"),
                    help="llama.cpp source, build and GGUF files (outside git)")
    ap.add_argument("--hf-workdir", default=os.path.join(os.path.expanduser("~"), ".cache", "mnemo-bench-train"),
                    help="the checkpoint and tokenizer, shared with bench_train.py")
    ap.add_argument("--llama-sdist", help="a llama_cpp_python-*.tar.gz to use instead of the newest on PyPI")
    ap.add_argument("--build-jobs", type=int, default=2)
    ap.add_argument("--only", choices=["mnemo", "llama"], help="run one side alone (no ratios)")
    ap.add_argument("--mnemo-env", action="append", default=[], metavar="VAR=VALUE",
                    help="environment for bench_engine, repeatable (e.g. OMP_WAIT_POLICY=active)")
    ap.add_argument("--mnemo-set", action="append", default=[], metavar="NAME=VALUE",
                    help="kernel settings for bench_engine, repeatable (e.g. cpu.gemm=exact cpu.f32gemm=off: the "
                         "OpenBLAS paths; docs/kernel-settings.md)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per run before it is killed")
    ap.add_argument("--jsonl", help="append every run and pair to this file as JSON lines")
    ap.add_argument("--model", help="a real GGUF file: both sides run it and its --requant re-quantizations")
    ap.add_argument("--requant", default="Q4_K_M,Q8_0",
                    help="with --model: llama-quantize types to re-quantize it to (comma list; empty: none)")
    ap.add_argument("--bench-tokenizer", default=os.path.join(ROOT, "build", "tests", "bench_tokenizer"),
                    help="with --model: mnemo's tokenizer benchmark")
    o = ap.parse_args()
    o.cache = os.path.abspath(o.cache)
    if o.model:
        o.model = os.path.abspath(o.model)
        if not os.path.isfile(o.model):
            raise SystemExit("no file %s" % o.model)
        formats = ["file"] + [q for q in o.requant.split(",") if q]
    else:
        formats = [f for f in o.formats.split(",") if f]
    for f in formats:
        if f not in FORMATS and not o.model:
            raise SystemExit("unknown format %r (known: %s)" % (f, ", ".join(FORMATS)))
    if o.pairs < 1 or o.threads < 1 or o.prompt < 1 or o.decode < 1:
        raise SystemExit("--pairs, --threads, --prompt and --decode must be >= 1")
    sides = [s for s in ("mnemo", "llama") if o.only in (None, s)]
    if "mnemo" in sides and not os.access(o.bench_engine, os.X_OK):
        raise SystemExit("no bench_engine at %s: build it (cmake --build build --target bench_engine) or give "
                         "--bench-engine" % o.bench_engine)
    o.py = os.path.join(o.venv, "bin", "python")
    if "llama" in sides and not o.model and not os.path.exists(o.py):
        raise SystemExit("no venv python at %s: make it with tests/reference/setup_train_venv.sh or give --venv"
                         % o.py)

    ggufs, version = {}, None
    if o.model:
        lsrc, bench, quantize, version = ensure_llamacpp(o)
        ggufs["file"] = o.model
        for q in formats[1:]:
            ggufs[q] = ensure_requant(o, quantize, o.model, q)
    elif "llama" in sides:
        lsrc, bench, quantize, version = ensure_llamacpp(o)
        ns = argparse.Namespace(workdir=o.hf_workdir, seed=1, threads=o.threads)
        cases = sorted({CASE_OF.get(f, CASE) for f in formats})
        _, dirs = bench_train.prepare(ns, o.py, cases)
        for f in formats:
            c = CASE_OF.get(f, CASE)
            ggufs[f] = ensure_gguf(o, lsrc, quantize, dirs[c], f, c)

    jl = open(o.jsonl, "a", encoding="utf-8") if o.jsonl else None

    def save(row):
        if jl:
            jl.write(json.dumps(row) + "\n")
            jl.flush()

    host = {"cpu": cpu_model(), "llama_cpp_python": version, "threads": o.threads, "prompt": o.prompt,
            "decode": o.decode, "mnemo_env": o.mnemo_env, "mnemo_set": o.mnemo_set, "git": git_head()}
    if o.model:
        host["model"] = os.path.basename(o.model)
    log("side by side: %s; load average at start %s" % (json.dumps(host), loadavg()))
    summary = {}
    for f in formats:
        pairs = []
        for p in range(o.pairs):
            la = loadavg()
            m = l = None
            why = None
            if "mnemo" in sides:
                m, why = run_mnemo(o, f, ggufs.get(f))
                log("  %-5s pair %d  mnemo:     %s" % (f, p + 1, why or "prefill %7.1f tok/s  decode %6.2f tok/s"
                                                      % (m["prefill"], m["decode"])))
            if "llama" in sides:
                l = run_llama(o, bench, ggufs[f])
                log("  %-5s pair %d  llama.cpp: prefill %7.1f tok/s  decode %6.2f tok/s" % (f, p + 1, l["prefill"],
                                                                                          l["decode"]))
            row = {"format": f, "pair": p + 1, "loadavg": la, "mnemo": m and {k: v for k, v in m.items()},
                   "mnemo_error": why, "llama": l, **host}
            if m and l:
                row["ratio_prefill"] = m["prefill"] / l["prefill"]
                row["ratio_decode"] = m["decode"] / l["decode"]
                log("  %-5s pair %d  ratio mnemo/llama.cpp: prefill %.2f  decode %.2f  (load %s)"
                    % (f, p + 1, row["ratio_prefill"], row["ratio_decode"], la))
            pairs.append(row)
            save(row)
        summary[f] = pairs

    tok_rows = []
    if o.model and o.only is None:
        if not os.access(o.bench_tokenizer, os.X_OK):
            raise SystemExit("no bench_tokenizer at %s: build it or give --bench-tokenizer" % o.bench_tokenizer)
        llama_tok = build_against_libllama(o, lsrc, version, os.path.join(HERE, "llamacpp_tokenize_speed.c"))
        text = os.path.join(o.cache, "tokenizer_text.txt")
        tok_rows = run_tokenizers(o, o.bench_tokenizer, llama_tok, o.model, text)
        for r in tok_rows:
            save(dict(r, **host))

    log("\nload average at end %s" % loadavg())
    log("\n| format | phase | mnemo tok/s | llama.cpp tok/s | ratio per pair | load (1 min) |")
    log("|---|---|---|---|---|---|")
    for f, pairs in summary.items():
        for ph, what in (("prefill", "prefill %d" % o.prompt), ("decode", "decode at %d" % o.prompt)):
            ms = [p["mnemo"][ph] if p["mnemo"] else None for p in pairs]
            ls = [p["llama"][ph] if p["llama"] else None for p in pairs]
            rs = [p.get("ratio_" + ph) for p in pairs]
            mcell = fmt_range(ms, "%.2f" if ph == "decode" else "%.1f") if any(ms) else \
                (pairs[0]["mnemo_error"] and "cannot run" or "—")
            log("| %s | %s | %s | %s | %s | %s |" % (
                f, what, mcell, fmt_range(ls, "%.2f" if ph == "decode" else "%.1f"),
                (" / ".join("%.2f" % r for r in rs if r is not None) +
                 (" (median %.2f)" % statistics.median(r for r in rs if r is not None) if any(rs) else "")) or "—",
                fmt_range([float(p["loadavg"].split()[0]) for p in pairs], "%.2f")))
        if any(p.get("ratio_prefill") for p in pairs):
            save({"format": f, "summary": True,
                  "median_ratio_prefill": statistics.median(p["ratio_prefill"] for p in pairs if "ratio_prefill" in p),
                  "median_ratio_decode": statistics.median(p["ratio_decode"] for p in pairs if "ratio_decode" in p),
                  **host})
    if tok_rows:
        med = lambda k: statistics.median(r[k]["mb_s"] for r in tok_rows)  # noqa: E731
        log("| tokenizer | encode %d bytes | %.2f MB/s | %.2f MB/s | %s | %s |" % (
            tok_rows[0]["mnemo"]["bytes"], med("mnemo"), med("llama"),
            " / ".join("%.2f" % r["ratio"] for r in tok_rows),
            fmt_range([float(r["loadavg"].split()[0]) for r in tok_rows], "%.2f")))
    if jl:
        jl.close()


if __name__ == "__main__":
    main()
