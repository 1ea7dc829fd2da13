#!/usr/bin/env python3
"""What llama.cpp does on the real SmolLM2 file, recorded for test_llamacpp_parity (which runs without llama.cpp).

  python3 tests/reference/make_llamacpp_parity.py [--model models/SmolLM2-135M-Instruct.Q4_1.gguf] \\
      [--out tests/fixtures/llamacpp_parity/smollm2_q4_1.json] [--n-predict 64] [--threads 2] \\
      [--cache ~/.cache/mnemo-bench-llamacpp] [--llama-sdist FILE]

llama.cpp is the one tests/bench/bench_vs_llamacpp.py builds from the llama-cpp-python source package (cached
outside git; --llama-sdist pins one; the committed fixture was made with 0.3.36). llamacpp_parity_record.c, next
to this script, is compiled here against that build's libllama (into the cache, never committed) and, for each
prompt below, prints llama.cpp's
  - tokenization: llama_tokenize with add_special (the file's add_bos_token) and, for chats, parse_special;
  - chats rendered by llama_chat_apply_template with the file's tokenizer.chat_template (ChatML) and the assistant
    prefix: the rendered text is kept, so the test checks mnemo's ChatML rendering too;
  - greedy continuation: the prompt in one batch, then one token at a time, up to --n-predict tokens or the first
    end-of-generation token (kept), with the top-1 and top-2 log-probs of each step ("inc");
  - teacher-forced over prompt + that continuation in one batch: per continuation position, the top-1 and top-2 ids
    with their log-probs and the log-prob of the continuation's token.
llama.cpp runs with its default context settings (f16 KV cache, flash attention auto: on, on the CPU) and its CPU
kernels, which round activations to 8 bits (q8_1 for q4_1 weights, q8_0 for q8_0 weights) before each dot product.
The output is deterministic for a given build and thread count; stdlib only.
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "bench"))
import bench_vs_llamacpp  # noqa: E402  (fetches and builds llama.cpp from the llama-cpp-python sdist)

# (name, kind, payload): kind "text" is a plain prompt; "chat" a list of (role, content) messages.
PROMPTS = [
    ("capital", "text", "The capital of France is"),
    ("story", "text", "Once upon a time, in a small village at the edge of the forest, there lived"),
    ("science", "text", "The mitochondria is the powerhouse of the cell because"),
    ("python", "text", 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'),
    ("c_loop", "text", "#include <stdio.h>\n\nint main(void) {\n    int sum = 0;\n    for (int i = 0; i < 10; i++)"),
    ("javascript", "text", "const add = (a, b) => a + b;\nconsole.log(add(2, 3));\n// Output:"),
    ("arithmetic", "text", "12345 + 67890 = "),
    ("numbers", "text", "Apollo 11 landed on the Moon on July 20, 1969, at 20:17 UTC. In 2024 the world population "
                        "was 8,118,835,999 and pi is 3.14159265358979"),
    ("list", "text", "Shopping list:\n1. Eggs\n2. Milk\n3."),
    ("french", "text", "La tour Eiffel est située à Paris et elle mesure"),
    ("german", "text", "Die Hauptstadt von Deutschland ist Berlin. Sie ist bekannt für"),
    ("spanish", "text", "¿Cuál es la mejor manera de aprender a programar? Primero,"),
    ("russian", "text", "Москва — столица России. Это крупнейший город"),
    ("chinese", "text", "北京是中国的首都，也是"),
    ("japanese", "text", "東京は日本の首都です。今日はとても"),
    ("korean", "text", "안녕하세요, 저는"),
    ("emoji", "text", "I love pizza 🍕 and ice cream 🍦! My favourite emoji is"),
    ("whitespace", "text", "  Leading spaces\tand\ttabs\n\n\nand several newlines   "),
    ("html", "text", "<html>\n  <body>\n    <h1>Hello, world!</h1>"),
    ("json", "text", '{"name": "Alice", "age": 30, "city": '),
    ("chat_capital", "chat", [("user", "What is the capital of France?")]),
    ("chat_system_haiku", "chat", [("system", "You are a helpful assistant."),
                                   ("user", "Write a haiku about the sea.")]),
    ("chat_recursion", "chat", [("user", "Explain recursion in one sentence.")]),
    ("chat_multi_turn", "chat", [("user", "Hi!"), ("assistant", "Hello! How can I help you today?"),
                                 ("user", "What is 12 times 12?")]),
    ("chat_french", "chat", [("user", "Traduis en anglais : « Bonjour, comment ça va ? »")]),
    ("chat_code", "chat", [("user", "Write a Python function that reverses a string.")]),
]


def hexs(s):
    return s.encode("utf-8").hex()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "llamacpp_parity", "smollm2_q4_1.json"))
    ap.add_argument("--n-predict", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cache", default=os.path.join(os.path.expanduser("~"), ".cache", "mnemo-bench-llamacpp"))
    ap.add_argument("--llama-sdist", help="a llama_cpp_python-*.tar.gz to use instead of the newest cached / on PyPI")
    ap.add_argument("--build-jobs", type=int, default=2)
    o = ap.parse_args()
    o.cache = os.path.abspath(o.cache)
    lsrc, _, _, o.version = bench_vs_llamacpp.ensure_llamacpp(o)
    exe = bench_vs_llamacpp.build_against_libllama(o, lsrc, o.version,
                                                   os.path.join(HERE, "llamacpp_parity_record.c"))

    lines = []
    for name, kind, payload in PROMPTS:
        if kind == "text":
            lines.append("P " + hexs(payload))
        else:
            lines.append("C " + " ".join(hexs(r) + " " + hexs(c) for r, c in payload))
    r = subprocess.run([exe, o.model, str(o.n_predict), str(o.threads)], input="\n".join(lines) + "\n",
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise SystemExit("llamacpp_parity_record failed:\n" + r.stderr[-4000:])
    records = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
    if len(records) != len(PROMPTS):
        raise SystemExit("expected %d records, got %d" % (len(PROMPTS), len(records)))

    with open(o.model, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    prompts = []
    for (name, kind, payload), rec in zip(PROMPTS, records):
        p = {"name": name, "kind": kind}
        if kind == "text":
            p["text"] = payload
        else:
            p["messages"] = [{"role": r_, "content": c} for r_, c in payload]
            p["rendered"] = bytes.fromhex(rec["text_hex"]).decode("utf-8")
        p["prompt_ids"] = rec["prompt_ids"]
        p["greedy_ids"] = rec["greedy_ids"]
        p["tf"] = rec["tf"]
        p["inc"] = rec["inc"]
        prompts.append(p)
    doc = {"format": "mnemo-llamacpp-parity", "version": 1,
           "model": {"file": os.path.basename(o.model), "sha256": sha},
           "llama_cpp": {"llama_cpp_python": o.version, "threads": o.threads,
                         "settings": "default context params: f16 KV cache, flash attention auto"},
           "n_predict": o.n_predict,
           "tf_columns": ["top1_id", "top1_logprob", "top2_id", "top2_logprob", "greedy_token_logprob"],
           "inc_columns": ["top1_logprob", "top2_logprob"],
           "prompts": prompts}
    os.makedirs(os.path.dirname(o.out), exist_ok=True)
    with open(o.out, "w", encoding="utf-8") as f:
        # one prompt per line: small diffs when regenerated
        f.write("{\n")
        keys = [k for k in doc if k != "prompts"]
        for k in keys:
            f.write("%s: %s,\n" % (json.dumps(k), json.dumps(doc[k], ensure_ascii=False)))
        f.write('"prompts": [\n')
        f.write(",\n".join(json.dumps(p, ensure_ascii=False) for p in prompts))
        f.write("\n]}\n")
    n_tok = sum(len(p["greedy_ids"]) for p in prompts)
    print("wrote %s: %d prompts, %d continuation tokens (%d bytes)" % (o.out, len(prompts), n_tok,
                                                                       os.path.getsize(o.out)))


if __name__ == "__main__":
    main()
