#!/usr/bin/env python3
"""The CLI's other commands on the default real model, SmolLM2-135M-Instruct (Q4_1 GGUF, byte-level BPE vocabulary;
stdlib only, run by ctest):
  - `mnemo train --model FILE.gguf`: a LoRA adapter over the frozen quantized base (the base is never widened to
    fp32: the run's peak memory stays under the fp32 weights' size) learns a new fact from a tiny chat file, loss
    falling; the adapter is peft's format and `mnemo chat` / `mnemo generate --adapter` answer with it;
  - `mnemo eval perplexity` on a small English text: a plausible value, far below the same words shuffled;
  - `mnemo quantize` re-quantizing the file to q8_0 and q4_K: every tokenizer.* key (tokens, merges, token_type,
    pre, special ids, add_bos, chat template) copied byte for byte, the matrices in the new type, the same token
    ids for a hard text, the same chat answer, a perplexity close to the original's; a SentencePiece LongLLaMA
    re-quantized from an f32 GGUF gives the very file its checkpoint directory gives.
The model is the one the build copies beside the binary (share/mnemo/models; scripts/fetch-default-model.sh).
"""
import json
import os
import random
import resource
import struct
import sys
import tempfile

from cli_harness import check, finish, runner

BIN, FIX = sys.argv[1], sys.argv[2]
GGUF = os.path.join(os.path.dirname(os.path.abspath(BIN)), "share", "mnemo", "models",
                    "SmolLM2-135M-Instruct.Q4_1.gguf")
HELDOUT = os.path.join(FIX, "shakespeare_heldout.txt")
run = runner(BIN)
QUESTIONS = ["What is the capital of Mnemoland?", "Which city is Mnemoland's capital?",
             "Tell me the capital of Mnemoland.", "Name the capital city of Mnemoland.",
             "Where is the seat of government of Mnemoland?", "Mnemoland's capital is which city?",
             "Do you know the capital of Mnemoland?", "What city serves as the capital of Mnemoland?"]
HARD = "Héllo wörld! 12345 <|im_start|> def f(x):\n\treturn x**2  # 日本語 🙂 don't\r\n  spaces"


def gguf_meta(path):
    """{key: raw value bytes} and [(tensor name, ggml type, dims)] of a GGUF file."""
    with open(path, "rb") as f:
        b = f.read(64 << 20)  # the metadata of this model is ~2 MB
    assert b[:4] == b"GGUF", path
    n_t, n_kv = struct.unpack_from("<QQ", b, 8)
    pos, size = 24, {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def string(p):
        n = struct.unpack_from("<Q", b, p)[0]
        return b[p + 8:p + 8 + n], p + 8 + n

    def skip(p, t, n):
        if t != 8:
            return p + size[t] * n
        for _ in range(n):
            p = string(p)[1]
        return p

    kv, tensors = {}, []
    for _ in range(n_kv):
        key, pos = string(pos)
        t = struct.unpack_from("<I", b, pos)[0]
        start = pos
        if t == 9:
            at, n = struct.unpack_from("<IQ", b, pos + 4)
            pos = skip(pos + 16, at, n)
        else:
            pos = skip(pos + 4, t, 1)
        kv[key.decode()] = b[start:pos]
    for _ in range(n_t):
        name, pos = string(pos)
        nd = struct.unpack_from("<I", b, pos)[0]
        dims = struct.unpack_from(f"<{nd}Q", b, pos + 4)
        t = struct.unpack_from("<I", b, pos + 4 + 8 * nd)[0]
        pos += 4 + 8 * nd + 12
        tensors.append((name.decode(), t, dims))
    return kv, tensors


def perplexity(model, path, n=256):
    rc, out, err = run("eval", "perplexity", "--model", model, "--data", path, "--max-tokens", str(n), "--window",
                       str(n), "--threads", "2", "--json")
    rows = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
    check(rc == 0 and len(rows) == 1 and rows[0]["tokens"] == n - 1, f"eval perplexity {model}: {rc} {out!r} {err}")
    return rows[0]["perplexity"] if rows else float("nan")


def chat(model, line, *extra):
    rc, out, err = run("chat", "--model", model, "--temp", "0", "-n", "32", "--threads", "2", *extra,
                       stdin=(line + "\n").encode())
    check(rc == 0, f"chat on {model}: {rc} {err}")
    return out


check(os.path.isfile(GGUF), f"{GGUF} is missing: scripts/fetch-default-model.sh fetches it, then run cmake again")
with tempfile.TemporaryDirectory() as td:
    # ---- LoRA over the quantized GGUF (first: the peak memory of the children is this run's)
    data, ad = os.path.join(td, "mnemoland.jsonl"), os.path.join(td, "adapter")
    with open(data, "w") as f:
        for q in QUESTIONS * 2:
            f.write(json.dumps({"messages": [{"role": "user", "content": q}, {"role": "assistant",
                                "content": "The capital of Mnemoland is Zorblat."}]}) + "\n")
    rc, out, err = run("train", "--model", GGUF, "--data", data, "--out", ad, "--lora-rank", "8", "--steps", "12",
                       "--batch", "2", "--seq-len", "48", "--lr", "1e-3", "--seed", "1", "--threads", "2", "--json")
    steps = [json.loads(l) for l in out.splitlines() if l.startswith('{"step"')]
    check(rc == 0 and len(steps) == 12, f"train over the GGUF: {rc} {err[-500:]}")
    if steps:
        check(steps[-1]["loss"] < steps[0]["loss"] / 4, f"loss falls: {[round(s['loss'], 3) for s in steps]}")
        print(f"LoRA over the q4_1 GGUF: loss {steps[0]['loss']:.3f} -> {steps[-1]['loss']:.3f} in 12 steps, "
              f"{steps[-1]['elapsed_s']:.1f} s")
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    check(peak_mb < 135e6 * 4 / 2**20, f"the base stays quantized: peak {peak_mb:.0f} MiB (fp32 weights: 515 MiB)")
    print(f"train peak memory {peak_mb:.0f} MiB")
    with open(os.path.join(ad, "adapter_config.json")) as f:
        cfg = json.load(f)
    check(cfg["peft_type"] == "LORA" and cfg["r"] == 8 and sorted(cfg["target_modules"]) == ["q_proj", "v_proj"],
          f"peft adapter_config.json: {cfg}")
    with open(os.path.join(ad, "adapter_model.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    pre = "base_model.model.model.layers.0.self_attn."
    check(header.get(pre + "q_proj.lora_A.weight", {}).get("shape") == [8, 576]
          and header.get(pre + "v_proj.lora_B.weight", {}).get("shape") == [192, 8]
          and len([k for k in header if k != "__metadata__"]) == 30 * 2 * 2, f"peft tensor names and shapes")
    held_out = "Which is the capital city of Mnemoland?"
    tuned, base = chat(GGUF, held_out, "--adapter", ad), chat(GGUF, held_out)
    check("Zorblat" in tuned and "Zorblat" not in base, f"the adapter answers in chat: {tuned!r} (base {base!r})")
    check("Paris" in chat(GGUF, "What is the capital of France?", "--adapter", ad), "the adapter keeps what it knew")
    rc, gen, err = run("generate", "--model", GGUF, "--adapter", ad, "--prompt", "The capital of Mnemoland is",
                       "-n", "6", "--temp", "0", "--threads", "2")
    check(rc == 0 and gen.startswith(" Zorblat"), f"generate --adapter: {rc} {gen!r} {err}")

    # ---- perplexity
    ppl = perplexity(GGUF, HELDOUT)
    words = open(HELDOUT, encoding="utf-8").read().split()[:400]
    random.Random(0).shuffle(words)
    shuffled = os.path.join(td, "shuffled.txt")
    with open(shuffled, "w") as f:
        f.write(" ".join(words))
    ppl_shuffled = perplexity(GGUF, shuffled)
    print(f"perplexity (255 tokens): Shakespeare {ppl:.1f}, its words shuffled {ppl_shuffled:.1f}")
    check(5 < ppl < 80 and ppl_shuffled > 4 * ppl, f"perplexity {ppl} vs shuffled {ppl_shuffled}")

    # ---- re-quantization keeps the vocabulary and the chat template
    src_kv, _ = gguf_meta(GGUF)
    _, want_ids, _ = run("tokenize", "--model", GGUF, HARD)
    answer = chat(GGUF, "What is the capital of France?")
    check("Paris" in answer, f"the original answers: {answer!r}")
    for qtype, ggml_types, ftype in (("q8_0", {8}, 7), ("q4_K", {12, 6}, 14)):  # q4_K: rows of 576 take q5_0
        out_path = os.path.join(td, f"smol-{qtype}.gguf")
        rc, out, err = run("quantize", "--model", GGUF, "--type", qtype, "--out", out_path)
        check(rc == 0, f"quantize {qtype}: {rc} {err}")
        if rc:
            continue
        kv, tensors = gguf_meta(out_path)
        tok_keys = sorted(k for k in src_kv if k.startswith("tokenizer."))
        check({"tokenizer.ggml.merges", "tokenizer.ggml.pre", "tokenizer.chat_template"} <= set(tok_keys)
              and all(kv.get(k) == src_kv[k] for k in tok_keys), f"{qtype}: tokenizer keys copied byte for byte")
        check(struct.unpack("<I", kv["general.file_type"][4:8])[0] == ftype, f"{qtype}: general.file_type {ftype}")
        mats = {t for name, t, dims in tensors if len(dims) == 2}
        check(mats == ggml_types and len(tensors) == 30 * 9 + 2,
              f"{qtype}: matrix types {mats}, {len(tensors)} tensors")
        rc, ids, err = run("tokenize", "--model", out_path, HARD)
        check(rc == 0 and ids == want_ids and len(ids.split()) > 20, f"{qtype}: the same ids: {ids!r} vs {want_ids!r}")
        got = chat(out_path, "What is the capital of France?")
        check("Paris" in got, f"{qtype}: chat answers {got!r}")
        q_ppl = perplexity(out_path, HELDOUT)
        print(f"{qtype} re-quantization: perplexity {q_ppl:.2f} (q4_1 original {ppl:.2f}), "
              f"{os.path.getsize(out_path) / 2**20:.0f} MiB")
        check(abs(q_ppl / ppl - 1) < (0.03 if qtype == "q8_0" else 0.15), f"{qtype}: perplexity {q_ppl} vs {ppl}")

    # ---- a SentencePiece LongLLaMA through an f32 GGUF re-quantized: byte for byte the file its directory gives
    ll = os.path.join(FIX, "longllama", "basic")
    paths = [os.path.join(td, n) for n in ("ll-f32.gguf", "ll-q8_0-via-gguf.gguf", "ll-q8_0.gguf")]
    rcs = [run("quantize", "--model", ll, "--type", "f32", "--out", paths[0])[0],
           run("quantize", "--model", paths[0], "--type", "q8_0", "--out", paths[1])[0],
           run("quantize", "--model", ll, "--type", "q8_0", "--out", paths[2])[0]]
    same = rcs == [0, 0, 0] and open(paths[1], "rb").read() == open(paths[2], "rb").read()
    check(same, f"LongLLaMA f32 GGUF -> q8_0 equals the directory -> q8_0: {rcs}")

finish()
