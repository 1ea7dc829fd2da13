#!/usr/bin/env python3
"""End-to-end tests of the real `mnemo` binary (stdlib only; run by ctest).

Greedy generation must reproduce transformers' greedy ids recorded in the fixtures, --logprobs --json must be
well-formed and consistent, tokenize must print the recorded ids, and every bad input must exit non-zero with
one clear message and no crash.
"""
import json
import os
import re
import subprocess
import sys

from cli_harness import check, finish, runner

BIN = sys.argv[1]
FIX = sys.argv[2]
os.environ.pop("MNEMO_MODEL", None)  # the default model is what these tests expect unless they set it


run = runner(BIN, timeout=120)


for name in ("mha", "gqa", "torch_bin"):
    mdir = os.path.join(FIX, "models", name)
    ref = json.load(open(os.path.join(mdir, "reference.json")))
    pr = ref["prompts"][0]
    n = len(pr["greedy"])
    rc, out, err = run("generate", "--model", mdir, "--prompt", pr["text"], "-n", str(n), "--temp", "0",
                       "--logprobs", "3", "--json")
    check(rc == 0, f"{name}: generate exit {rc}: {err}")
    lines = [json.loads(l) for l in out.splitlines() if l.strip()]
    toks = [l for l in lines if "token" in l]
    summary = lines[-1] if lines else {}
    check([t["token"] for t in toks] == pr["greedy"], f"{name}: greedy ids differ from transformers")
    check(summary.get("completion_tokens") == len(toks), f"{name}: summary count")
    for t in toks:
        top = t["top"]
        check(len(top) == 3 and all(top[i]["logprob"] >= top[i + 1]["logprob"] for i in range(2)),
              f"{name}: top-3 sorted")
        check(top[0]["token"] == t["token"] and abs(top[0]["logprob"] - t["logprob"]) < 1e-6 and t["logprob"] <= 0,
              f"{name}: greedy token is the top-1 alternative with its logprob")
    # plain streaming text equals the concatenated JSON text pieces
    rc, out_text, err = run("generate", "--model", mdir, "--prompt", pr["text"], "-n", str(n), "--temp", "0")
    check(rc == 0 and out_text == "".join(t["text"] for t in toks) + "\n", f"{name}: streamed text matches pieces")
    rc, out, err = run("tokenize", "--model", mdir, pr["text"])
    check(rc == 0 and [int(x) for x in out.split()] == pr["ids"], f"{name}: tokenize ids")

mha = os.path.join(FIX, "models", "mha")
# sampling is reproducible with a seed and changes with it
a = run("generate", "--model", mha, "--prompt", "Hello", "-n", "16", "--seed", "7", "--temp", "1.0")
b = run("generate", "--model", mha, "--prompt", "Hello", "-n", "16", "--seed", "7", "--temp", "1.0")
c = run("generate", "--model", mha, "--prompt", "Hello", "-n", "16", "--seed", "8", "--temp", "1.0")
check(a[0] == 0 and a[1] == b[1], "same seed, same text")
check(a[1] != c[1], "different seed, different text")
# the default model (SmolLM2-135M-Instruct, a real model) works with no --model: greedy, it knows a capital, and
# `mnemo chat` answers through its chat template
rc, out, err = run("generate", "--prompt", "The capital of France is", "-n", "8", "--temp", "0")
check(rc == 0 and out.startswith(" Paris"), f"the default model's greedy continuation: {out!r} {err}")
rc, out, err = run("chat", "-n", "24", "--temp", "0", stdin=b"What is the capital of France?\n")
check(rc == 0 and "Paris" in out, f"the default model answers in chat: {out!r} {err}")
rc, out, err = run("generate", "--help")
check(rc == 0 and "SmolLM2-135M-Instruct.Q4_1.gguf" in out, f"--help names the default model file: {out[-300:]!r}")

# The default model: $MNEMO_MODEL overrides it (--model overrides both); a bad MNEMO_MODEL is named in the error.
rc, out, err = run("generate", "--prompt", "Hello", "-n", "8", "--temp", "0", "-v", env=dict(os.environ, MNEMO_MODEL=mha))
want = run("generate", "--model", mha, "--prompt", "Hello", "-n", "8", "--temp", "0")
check(rc == 0 and out == want[1] and f"loaded {mha}:" in err, f"MNEMO_MODEL overrides the default: {err!r}")
rc, out, err = run("tokenize", "Hello", env=dict(os.environ, MNEMO_MODEL="/nonexistent/model"))
check(rc == 1 and err == "mnemo tokenize: MNEMO_MODEL=/nonexistent/model: No such file or directory (it must name a "
      "checkpoint directory or a GGUF file)\n", f"a bad MNEMO_MODEL: exit {rc}, {err!r}")
rc, out, err = run("passkey", "--help")
check(rc == 0 and "$MNEMO_MODEL" in out and "default model (no --model) now: " in out and "SmolLM2" in out,
      f"--help names the default model and MNEMO_MODEL: {out!r}")

bad = [
    (["generate"], 2, "a prompt is required: TEXT, --prompt TEXT or --file FILE"),
    (["generate", "--prompt", "x", "-f", "/dev/null"], 2, "--prompt or with --file, not both"),
    (["generate", "--prompt", "x", "--temp", "abc"], 2, "--temp expects a number"),
    (["generate", "--prompt", "x", "--temp", "-1"], 2, "--temp expects a number"),
    (["generate", "--prompt", "x", "-n", "1e3"], 2, "-n expects an integer"),
    (["generate", "--prompt", "x", "--logprobs", "99"], 2, "--logprobs expects an integer"),
    (["generate", "--prompt", "x", "--top-p", "0"], 2, "--top-p expects a number"),
    (["generate", "--prompt", "x", "--device", "tpu"], 2, "--device expects"),
    (["generate", "--prompt", "x", "--bogus"], 2, "unknown option"),
    (["generate", "--prompt"], 2, "needs a value"),
    (["generate", "--model", "/nonexistent/model", "--prompt", "x"], 1, "/nonexistent/model: not a directory"),
    (["generate", "--model", FIX, "--prompt", "x"], 1, "config.json: missing"),
    (["tokenize"], 2, "missing TEXT or --file"),
    (["tokenize", "x", "--file", "/dev/null"], 2, "TEXT or with --file, not both"),
    (["generate", "-f"], 2, "needs a value"),
    (["frobnicate"], 2, "unknown command"),
    ([], 2, "usage"),
]
for args, want_rc, want_msg in bad:
    rc, out, err = run(*args)
    check(rc == want_rc and want_msg in err, f"mnemo {' '.join(args)}: exit {rc} (want {want_rc}), stderr {err!r}")
    check("Segmentation" not in err and rc >= 0, f"mnemo {' '.join(args)}: crashed")
# A load error is printed once, by the command (the library's own log line of it is not shown as well); -v still
# shows the library's info lines.
for sub in (["generate", "--prompt", "x"], ["tokenize", "x"], ["passkey"]):
    rc, out, err = run(sub[0], "--model", "/nonexistent/model", *sub[1:])
    check(rc == 1 and err.count("not a directory") == 1 and len(err.strip().splitlines()) == 1,
          f"mnemo {sub[0]}: the load error once: {err!r}")
rc, out, err = run("generate", "--model", mha, "--prompt", "x", "-n", "1", "-v")
check(rc == 0 and "mnemo: info: loaded" in err, f"generate -v keeps the library's info lines: {err!r}")
desc = err.split("mnemo: info: loaded ", 1)[-1].split(": ", 1)[-1].splitlines()[0]
check(err.count(desc) == 1, f"generate -v names the model once: {err!r}")
# The prompt as the one positional argument, as tokenize takes it; the text ends with a newline before -v's timings
# even when both streams go to one pipe.
rc_a, out_a, _ = run("generate", "--model", mha, "To be", "-n", "6", "--temp", "0")
rc_b, out_b, _ = run("generate", "--model", mha, "--prompt", "To be", "-n", "6", "--temp", "0")
check(rc_a == 0 and out_a == out_b and out_a.endswith("\n"), f"generate TEXT: {out_a!r} vs {out_b!r}")
p = subprocess.run([BIN, "generate", "--model", mha, "To be", "-n", "6", "--temp", "0", "-v"], stdout=subprocess.PIPE,
                   stderr=subprocess.STDOUT, timeout=120)
both = p.stdout.decode("utf-8", "replace")
check(p.returncode == 0 and out_b in both and both.index(out_b) < both.index("mnemo: prompt "),
      f"the text, then its newline, then the timings: {both!r}")
# mnemo chat: one answer per line read, later turns reuse the context's prefix, /reset starts over
ll_basic = os.path.join(FIX, "longllama", "basic")
rc, out, err = run("chat", "--model", ll_basic, "--chat-template", "chatml", "-n", "4", "--temp", "0", "-v",
                   stdin=b"Hello!\nWho are you?\n/reset\nHello!\n")
reused = [int(l.split("(")[1].split()[0]) for l in err.splitlines() if "prompt tokens (" in l]
answers = out.split("\n")
check(rc == 0 and reused == [0, reused[1], 0] and reused[1] > 20 and answers[0] == answers[2],
      f"mnemo chat: three turns, the second reusing, the one after /reset as the first: {reused} {out!r} {err!r}")
rc, out, err = run("chat", "--model", mha, "--chat-template", "jinja")
check(rc == 2 and "--chat-template" in err, f"chat with an unknown template: {err!r}")
rc, out, err = run("generate", "--model", mha, "one", "two")
check(rc == 2 and "one prompt only" in err, f"two positional prompts: {err!r}")
# A prompt longer than the context: the message gives the context's size, use and room without contradicting itself.
rc, out, err = run("generate", "--model", mha, "--prompt", "To be, or not to be, that is the question", "--ctx", "8")
check(rc == 1 and "does not fit in the context: it has 8 positions, 0 in use, 8 free" in err,
      f"a prompt past --ctx: {err!r}")
for sub in ("generate", "tokenize", "passkey", "chat"):
    rc, out, err = run(sub, "--help")
    check(rc == 0 and "usage: mnemo " + sub in out, f"{sub} --help")
rc, out, err = run("quantize", "--help")
rc2, out2, err2 = run("--help")
types = re.findall(r"\b(q\d_[0-9K]|bf16|f16|f32)\b", out.split("the matrices' type:", 1)[-1].split("(", 1)[0])
check(len(types) >= 13 and all(t in out2 + err2 for t in types), f"mnemo --help names every quantize type {types}")

# A long prompt on a LongLLaMA model (window 64): no length limit, a progress bar on stderr with --progress that
# leaves stdout as it is without it.
ll = os.path.join(FIX, "longllama", "basic")
long_prompt = "hello world " * 300
args = ["generate", "--model", ll, "--prompt", long_prompt, "-n", "40", "--temp", "0"]
rc1, out1, err1 = run(*args)
rc2, out2, err2 = run(*args, "--progress")
check(rc1 == 0 and len(out1) > 0, f"LongLLaMA generate past its window: exit {rc1}, stderr {err1[-200:]!r}")
check(rc2 == 0 and out2 == out1, "--progress leaves stdout unchanged")
check("\r" not in err1 and "prompt [" in err2 and "100%" in err2 and err2.rstrip().endswith("tok/s"),
      f"--progress draws a bar that reaches 100% (stderr {err2[-120:]!r})")

# Sessions: ingest once (--save-session), continue later (--load-session): the same greedy text as one run.
import tempfile
with tempfile.TemporaryDirectory() as td:
    snap = os.path.join(td, "s.snap")
    gqa = os.path.join(FIX, "models", "gqa")
    rc, _, err = run("generate", "--model", gqa, "--prompt", "The quick brown fox", "-n", "0", "--temp", "0",
                     "--save-session", snap)
    check(rc == 0 and os.path.getsize(snap) > 0, f"--save-session: exit {rc}, {err!r}")
    rc_a, out_a, err_a = run("generate", "--model", gqa, "--load-session", snap, "--prompt", "", "-n", "8", "--temp", "0")
    rc_b, out_b, _ = run("generate", "--model", gqa, "--prompt", "The quick brown fox", "-n", "8", "--temp", "0")
    check(rc_a == 0 and rc_b == 0 and out_a == out_b, f"--load-session continues as one run ({out_a!r} vs {out_b!r}, {err_a!r})")
    with open(snap, "r+b") as f:
        f.seek(40)
        b = f.read(1)
        f.seek(40)
        f.write(bytes([b[0] ^ 1]))
    rc, _, err = run("generate", "--model", gqa, "--load-session", snap, "--prompt", "x", "-n", "1")
    check(rc == 1 and ("refused" in err or "checksum" in err), f"a corrupted session is refused: exit {rc}, {err!r}")
    rc, _, err = run("generate", "--model", os.path.join(FIX, "models", "mha"), "--load-session",
                     os.path.join(td, "missing.snap"), "--prompt", "x", "-n", "1")
    check(rc == 1 and "missing.snap" in err, f"a missing session file: exit {rc}, {err!r}")

# Long prompts from files (-f/--file, "-" = stdin): past the 128 KiB a single argument may hold.
import random
import tempfile
rng = random.Random(17)
words = ["thou", "art", "the", "king", "of", "Denmark", "and", "I", "shall", "speak", "to", "him", "now", "well",
         "'tis", "noble", "sweet", "prince", "good", "night"]
sentences, size = [], 0
while size <= 300 * 1024:
    sentences.append(" ".join(rng.choice(words) for _ in range(rng.randint(4, 14))) + rng.choice(".,;!?"))
    if len(sentences) % 10 == 0:
        sentences[-1] += "\nAnd"  # line breaks inside the text; cuts below fall on spaces only
    size += len(sentences[-1]) + 1
big_text = " ".join(sentences) + "\n"
assert len(big_text.encode()) > 300 * 1024
with tempfile.TemporaryDirectory() as td:
    big = os.path.join(td, "big.txt")
    open(big, "w").write(big_text)
    # SentencePiece splits at spaces, so the text cut at three spaces (each piece under 128 KiB, passed as TEXT)
    # tokenizes to the same ids, piece by piece, as the whole file.
    cuts = [big_text.index(" ", k * len(big_text) // 3) for k in (1, 2)]
    pieces = [big_text[:cuts[0]], big_text[cuts[0] + 1:cuts[1]], big_text[cuts[1] + 1:]]
    piece_ids = []
    for piece in pieces:
        rc, out, err = run("tokenize", "--model", mha, "--no-bos", piece)
        check(rc == 0, f"tokenize a piece: {err!r}")
        piece_ids += [int(x) for x in out.split()]
    rc, out, err = run("tokenize", "--model", mha, "--no-bos", "-f", big)
    file_ids = [int(x) for x in out.split()]
    check(rc == 0 and len(file_ids) > 50000 and file_ids == piece_ids,
          f"tokenize -f of {len(big_text)} bytes: {len(file_ids)} ids, {len(piece_ids)} from pieces, {err!r}")
    rc, out, err = run("tokenize", "--model", mha, "--file", "-", stdin=big_text.encode())
    check(rc == 0 and [int(x) for x in out.split()] == [1] + piece_ids, "tokenize --file - (stdin) with BOS")
    # generate reads the whole file: on a 128-token context the message counts every one of its tokens (+ BOS)
    rc, out, err = run("generate", "--model", mha, "-f", big, "-n", "1")
    check(rc == 1 and f"a prompt of {len(file_ids) + 1} tokens does not fit" in err, f"generate -f big: {err!r}")
    # generate -f on the default model: the same text as --prompt, from a file or stdin
    small = os.path.join(td, "small.txt")
    open(small, "w").write("ROMEO:\nWhat light")
    want = run("generate", "--prompt", "ROMEO:\nWhat light", "-n", "12", "--temp", "0")
    got = run("generate", "-f", small, "-n", "12", "--temp", "0")
    got_stdin = run("generate", "-f", "-", "-n", "12", "--temp", "0", stdin=b"ROMEO:\nWhat light")
    check(want[0] == 0 and len(want[1]) > 10 and got[:2] == want[:2] and got_stdin[:2] == want[:2],
          f"generate -f (default model) equals --prompt: {want[1]!r} {got[1]!r} {got_stdin[1]!r} {got[2]!r}")
    # unreadable, not text, not UTF-8
    for args, msg in ((["-f", os.path.join(td, "absent.txt")], "cannot open '" + os.path.join(td, "absent.txt")),
                      (["-f", td], "cannot read '" + td + "': Is a directory")):
        rc, out, err = run("generate", *args, "-n", "1")
        check(rc == 1 and msg in err and len(err.strip().splitlines()) == 1, f"generate {args}: exit {rc}, {err!r}")
    nul = os.path.join(td, "nul.txt")
    open(nul, "wb").write(b"abc\0def")
    rc, out, err = run("tokenize", "--model", mha, "-f", nul)
    check(rc == 1 and "NUL byte at offset 3" in err, f"a NUL byte is refused: {err!r}")
    latin1 = os.path.join(td, "latin1.txt")
    open(latin1, "wb").write("caf\u00e9 au lait".encode("latin-1"))
    rc, out, err = run("tokenize", "--model", mha, "-f", latin1)
    rc2, out2, _ = run("tokenize", "--model", mha, "caf\ufffd au lait")
    check(rc == 0 and "not valid UTF-8 (first bad byte 0xE9 at offset 3)" in err and out == out2,
          f"invalid UTF-8 warns and reads as U+FFFD: {err!r} {out!r} {out2!r}")
    # passkey --file: the filler is the file's text, line by line, within each asked length
    rc, out, err = run("passkey", "--model", os.path.join(FIX, "longllama", "basic"), "--file", big, "--lengths",
                       "384,768", "--depths", "0,1", "--trials", "1", "--json")
    trials = [json.loads(l) for l in out.splitlines() if l.strip().startswith('{"tokens"')]
    check(rc == 0 and len(trials) == 4 and all(384 - 128 <= t["tokens"] <= 384 for t in trials[:2]) and
          all(768 - 128 <= t["tokens"] <= 768 for t in trials[2:]), f"passkey --file: {out!r} {err[-200:]!r}")
    # passkey --tail: the question in a decode call of its own, here with retrieval memory past sinks + window
    rc, out, err = run("passkey", "--model", os.path.join(FIX, "models", "gqa"), "--memory", "retrieval",
                       "--ret-sinks", "4", "--ret-window", "24", "--ret-block", "4", "--ret-topk", "3", "--ret-reps",
                       "2", "--lengths", "200", "--depths", "0.5", "--trials", "2", "--tail", "12", "--json")
    trials = [json.loads(l) for l in out.splitlines() if l.strip().startswith('{"tokens"')]
    check(rc == 0 and len(trials) == 2 and all(150 <= t["tokens"] <= 200 for t in trials),
          f"passkey --tail with retrieval memory: {rc} {out!r} {err[-200:]!r}")
    empty = os.path.join(td, "empty.txt")
    open(empty, "w").write(" \n\n")
    rc, out, err = run("passkey", "--model", os.path.join(FIX, "longllama", "basic"), "-f", empty)
    check(rc == 1 and "the --file text is empty" in err, f"passkey with an empty --file: {err!r}")

# Passkey retrieval on the LongLLaMA fixture: runs end to end with each kNN index (a random tiny model: accuracy is
# not the point here), reports one JSON line per trial and per length, and refuses an unknown index kind.
for kind in ("flat", "ivf-grow"):
    rc, out, err = run("passkey", "--model", ll, "--lengths", "256,512", "--depths", "0.5", "--trials", "1",
                       "--knn", "4", "--mem-index", kind, "--json")
    lines = [json.loads(l) for l in out.splitlines() if l.strip()]
    check(rc == 0 and len(lines) >= 2, f"passkey --mem-index {kind}: exit {rc}, {len(lines)} lines, {err[-200:]!r}")
# Passkey with its defaults on the plain demo (a 256-token window, no memory layers): lengths chosen to fit it.
demo = os.path.join(os.path.dirname(os.path.abspath(FIX)), "..", "models", "tiny-shakespeare")
rc, out, err = run("passkey", "--model", demo, "--json")
lengths = [json.loads(l)["length"] for l in out.splitlines() if l.startswith('{"eval":"passkey","length"')]
check(rc == 0 and lengths and max(lengths) <= 256 - 8 and not err, f"passkey defaults: exit {rc}, {out!r} {err!r}")
rc, out, err = run("passkey", "--model", demo, "--lengths", "4096")
check(rc == 2 and "does not fit the model's context of 256 tokens" in err and "at most 248" in err,
      f"passkey past the window says what fits: exit {rc}, {err!r}")
rc, out, err = run("passkey", "--model", demo, "--lengths", "64")
check(rc == 2 and "cannot hold the passkey text" in err, f"passkey below the fixed text: exit {rc}, {err!r}")
rc, out, err = run("passkey", "--model", ll, "--mem-index", "lsh")
check(rc == 2 and "--mem-index" in err and "lsh" in err, f"passkey --mem-index lsh refused: exit {rc}, {err!r}")

# Memory options, shared by generate and passkey: the defaults are dense below 8192 memory rows, so a prompt of a
# few windows decodes exactly as with --mem-knn 0 (dense at every length); bad values are refused.
ll_args = ["generate", "--model", ll, "--prompt", long_prompt, "-n", "40", "--temp", "0"]
rc_d, out_d, err_d = run(*ll_args, "--mem-knn", "0")
check(rc_d == 0 and out_d == out1, f"defaults equal dense below --mem-dense-rows: {out_d!r} vs {out1!r} {err_d[-200:]!r}")
for sub in ("generate", "passkey"):
    for flag, val in (("--mem-knn", "-1"), ("--mem-dense-rows", "-1"), ("--mem-index", "lsh"), ("--mem-nprobe", "0")):
        rc, out, err = run(sub, "--model", ll, "--prompt", "x", flag, val) if sub == "generate" else \
            run(sub, "--model", ll, flag, val)
        check(rc == 2 and flag in err and val in err, f"{sub} {flag} {val} refused: exit {rc}, {err!r}")
    rc, out, err = run(sub, "--help")
    check(rc == 0 and "--mem-dense-rows" in out and "default 128" in out, f"{sub} --help names the memory options")

# --adapter: a peft LoRA adapter over the MHA fixture (2 layers, d 64, q_proj only, r 2), written here with the
# stdlib: with B = 0 it changes nothing; with a large B it changes the greedy text; a bad directory is refused.
import random
import struct



def write_adapter(path, b_value):
    os.makedirs(path, exist_ok=True)
    rng = random.Random(3)
    tensors, blob = {}, b""
    for l in range(2):
        for ab, shape in (("A", (2, 64)), ("B", (64, 2))):
            vals = [rng.uniform(-1, 1) if ab == "A" else b_value for _ in range(shape[0] * shape[1])]
            data = struct.pack(f"<{len(vals)}f", *vals)
            name = f"base_model.model.model.layers.{l}.self_attn.q_proj.lora_{ab}.weight"
            tensors[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [len(blob), len(blob) + len(data)]}
            blob += data
    header = json.dumps(tensors).encode()
    header += b" " * (-len(header) % 8)
    with open(os.path.join(path, "adapter_model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + blob)
    with open(os.path.join(path, "adapter_config.json"), "w") as f:
        json.dump({"peft_type": "LORA", "r": 2, "lora_alpha": 4, "target_modules": ["q_proj"], "bias": "none"}, f)


with tempfile.TemporaryDirectory() as td:
    zero, big = os.path.join(td, "zero"), os.path.join(td, "big")
    write_adapter(zero, 0.0)
    write_adapter(big, 3.0)
    base_args = ["generate", "--model", mha, "--prompt", "Hello there", "-n", "24", "--temp", "0"]
    rc0, out0, err0 = run(*base_args)
    rcz, outz, errz = run(*base_args, "--adapter", zero)
    rcb, outb, errb = run(*base_args, "--adapter", big)
    check(rc0 == 0 and rcz == 0 and outz == out0, f"--adapter with B = 0 leaves the output as it is: {errz!r}")
    check(rcb == 0 and outb != out0, f"--adapter with a large B changes it: {outb!r} vs {out0!r} {errb!r}")
    rc, out, err = run(*base_args, "--adapter", td)
    check(rc == 1 and "adapter_config.json" in err and err.count("\n") == 1, f"a bad adapter dir: exit {rc}, {err!r}")
    # export --merge: the merged checkpoint generates what base + adapter generate
    merged = os.path.join(td, "merged")
    rc, out, err = run("export", "--model", mha, "--adapter", big, "--merge", "--out", merged)
    check(rc == 0 and os.path.exists(os.path.join(merged, "model.safetensors")), f"export --merge: {rc} {err!r}")
    rcm, outm, errm = run("generate", "--model", merged, "--prompt", "Hello there", "-n", "24", "--temp", "0")
    check(rcm == 0 and outm == outb, f"the merged checkpoint generates as base + adapter: {outm!r} vs {outb!r}")
    rc, out, err = run("export", "--model", mha, "--adapter", big, "--out", merged)
    check(rc == 2 and "--merge" in err, f"export without --merge: exit {rc}, {err!r}")

# --uio: a UIO-LLM (tests/fixtures/uio). The gqa_c12_m3 prompt is this text (its ids round-trip through the
# tokenizer, checked first); greedy generation from both checkpoint formats gives the reference's ids, with two
# compressions during generation; -v reports the memory; a mismatched or broken UIO directory is refused naming
# the file.
gqa = os.path.join(FIX, "models", "gqa")
uio_ref = json.load(open(os.path.join(FIX, "uio", "gqa_c12_m3", "reference.json")))
uio_text = ("him with\na cudgel; and yet my mind gave me his clothes made a\nfalse report of him.\n\nFirst Servingman:\n"
            "What an arm he has! he turned me about with")
rc, out, err = run("tokenize", "--model", gqa, uio_text)
check(rc == 0 and [int(x) for x in out.split()] == uio_ref["prompt"]["ids"], "--uio: the prompt text gives the fixture's ids")
n_new = len(uio_ref["greedy"])
outs = []
for flavour in ("uio_pth", "uio_st"):
    udir = os.path.join(FIX, "uio", "gqa_c12_m3", flavour)
    rc, out, err = run("generate", "--model", gqa, "--uio", udir, "--prompt", uio_text, "-n", str(n_new), "--temp", "0",
                       "--json")
    toks = [json.loads(l)["token"] for l in out.splitlines() if l.strip() and "token" in json.loads(l)]
    check(rc == 0 and toks == uio_ref["greedy"], f"--uio {flavour}: greedy ids {toks} vs the reference's: {err!r}")
    outs.append(out)
rc, out, err = run("generate", "--model", gqa, "--prompt", uio_text, "-n", str(n_new), "--temp", "0", "--json")
check(rc == 0 and out != outs[0], "--uio changes the base model's generation")
rc, out, err = run("generate", "--model", gqa, "--uio", os.path.join(FIX, "uio", "gqa_c12_m3", "uio_st"), "--prompt",
                   uio_text, "-n", str(n_new), "--temp", "0", "-v")
# 77 prompt + 24 generated tokens fed (generate keeps its last token too): 8 segments of 12 -> 24 entries, 5 raw
check(rc == 0 and "UIO memory: 96 tokens compressed into 24 <mem> entries per layer (12 -> 3), 5 raw tokens" in err,
      f"--uio -v reports the memory: {err!r}")
rc, out, err = run("generate", "--model", mha, "--uio", os.path.join(FIX, "uio", "gqa_c12_m3", "uio_pth"), "--prompt",
                   "x")
check(rc == 1 and "uio.pth" in err and "expected (1, 1, 64)" in err and err.count("\n") == 1,
      f"--uio for another base model: exit {rc}, {err!r}")
with tempfile.TemporaryDirectory() as td:
    with open(os.path.join(td, "uio_config.json"), "w") as f:
        f.write('{"num_memory": 3, "chunk_size": 16, "lora_rank": 4, "lora_alpha": 8}')
    rc, out, err = run("generate", "--model", mha, "--uio", td, "--prompt", "x")
    check(rc == 1 and "uio_config.json" in err and "not a multiple" in err, f"--uio with a bad config: exit {rc}, {err!r}")
rc, out, err = run("generate", "--help")
check(rc == 0 and "--uio DIR" in out and "--uio-keep-raw W" in out, "generate --help names --uio, --uio-keep-raw")
# option (a): keeping raw tokens after a compression changes what follows it; past chunk_size it is refused
mha_uio = os.path.join(FIX, "uio", "mha_c16_m4", "uio_st")
gen = ["generate", "--model", mha, "--uio", mha_uio, "--prompt", uio_text, "-n", "30", "--temp", "0", "--json"]
rc0, out0, _ = run(*gen)
rc, out, err = run(*gen, "--uio-keep-raw", "4")
check(rc0 == 0 and rc == 0 and out != out0, f"--uio-keep-raw 4 runs and changes the text: {err!r}")
rc, out, err = run(*gen, "--uio-keep-raw", "17")
check(rc == 1 and "uio_keep_raw 17 outside 0..16" in err, f"--uio-keep-raw past chunk_size: exit {rc}, {err!r}")

# passkey --uio: a UIO-LLM's prompts are compressed as they go, so they reach past --ctx; the default lengths are
# fractions of what its positions take (128 positions, 16 -> 4: 13 + ... segments), longer ones are refused saying so
pk = ["passkey", "--model", mha, "--uio", mha_uio, "--trials", "1", "--depths", "0.5", "--json"]
rc, out, err = run(*pk)
rows = [json.loads(l) for l in out.splitlines() if l.strip()]
lens = [r["length"] for r in rows if "length" in r]
check(rc == 0 and len(lens) >= 2 and max(lens) > 128 and all(r["tokens"] <= 468 for r in rows if "tokens" in r),
      f"passkey --uio: exit {rc}, lengths {lens}, {err[-200:]!r}")
rc, out, err = run(*pk, "--ctx", "64", "--uio-keep-raw", "4", "--lengths", "196")
check(rc == 0 and '"length":196' in out, f"passkey --uio at the capacity of 64 positions keeping 4: {rc} {err!r}")
rc, out, err = run(*pk, "--ctx", "64", "--uio-keep-raw", "4", "--lengths", "197")
check(rc == 2 and "UIO context of 64 positions" in err and "at most 196" in err,
      f"passkey --uio past its positions says what fits: exit {rc}, {err!r}")
# with a memory budget (option (b)) old entries leave the positions, so no length is refused for them; option (a)
# is not combined with it (nor with batched compression)
rc, out, err = run(*pk, "--ctx", "64", "--uio-mem-budget", "16", "--lengths", "400")
check(rc == 0 and '"length":400' in out, f"passkey --uio with a memory budget past 64 positions: {rc} {err!r}")
for opt in ("--uio-mem-budget", "--uio-encode-batch"):
    rc, out, err = run(*gen, "--uio-keep-raw", "4", opt, "8")
    check(rc == 1 and "cannot be combined" in err and opt[2:].replace("-", "_") in err,
          f"--uio-keep-raw with {opt} is refused: exit {rc}, {err!r}")

finish()
