#!/usr/bin/env python3
"""Generate mnemo's reference fixtures (tokenizer + tiny LLaMA models + logits).

Run once by hand (never in CI), from the repository root:

    build/train-venv/bin/python tests/reference/make_fixtures.py [path/to/tinyshakespeare.txt]

Needs: `spm_train` on PATH (Debian package `sentencepiece`) and a Python with
torch, transformers, sentencepiece, safetensors, numpy (versions used are
recorded in every reference.json; see tests/reference/README.md).
Default corpus: data/tinyshakespeare.txt.

Writes (everything deterministic: fixed seeds, 1 torch thread, relative paths
for spm_train so the .model bytes do not embed a temp dir):

  tests/fixtures/tokenizer.model          SentencePiece BPE, vocab 512, byte fallback
  tests/fixtures/tokenizer_cases.json     encode/decode cases from the sentencepiece library
  tests/fixtures/models/<name>/           HF-style model dirs, for name in
        mha gqa rope_scaled tied bf16 torch_bin sharded
      config.json, generation_config.json, tokenizer.model, tokenizer_config.json,
      weights (model.safetensors | pytorch_model.bin | model-0000k-of-0000n.safetensors
               + model.safetensors.index.json),
      logits.bin      fp32 logits at every prompt position (format below)
      reference.json  prompts, ids (with BOS), transformers' greedy continuation

logits.bin (little-endian): char[8] "MNFXLGT1", uint32 version=1, uint32 n_prompts,
then per prompt: uint32 n_tokens, uint32 n_vocab, float32[n_tokens*n_vocab] row-major.

It never touches tests/fixtures/loader/ (owned by the loader tests).
"""
import copy
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
FIX = os.path.join(ROOT, "tests", "fixtures")
MODELS_DIR = os.path.join(FIX, "models")
TOK_PATH = os.path.join(FIX, "tokenizer.model")
DEFAULT_CORPUS = os.path.join(ROOT, "data", "tinyshakespeare.txt")

BOS, EOS = 1, 2
VOCAB = 512
MAX_NEW = 32
# Required top1-top2 logit gap along every greedy step (the brief asks > 1e-3;
# we demand 10x that so fp32 reordering in the engine can never flip a token).
MIN_MARGIN = 1e-2


# --------------------------------------------------------------------------- 1
def dump_json(obj, path):
    """Indented JSON, but lists of numbers kept on one line (readable diffs)."""
    import re
    txt = json.dumps(obj, ensure_ascii=False, indent=1)
    txt = re.sub(r"\[\s*([-0-9.e, \n]*?)\s*\]",
                 lambda m: "[" + re.sub(r"\s*,\s*", ", ", m.group(1).strip()) + "]", txt)
    assert json.loads(txt) == obj
    with open(path, "w", encoding="utf-8") as f:
        f.write(txt + "\n")


def train_tokenizer(corpus):
    os.makedirs(FIX, exist_ok=True)
    with tempfile.TemporaryDirectory() as td:
        # Run inside a temp dir with relative paths: the trainer_spec embedded
        # in the .model records --input/--model_prefix verbatim, so absolute
        # (random) temp paths would make the output bytes non-reproducible.
        shutil.copyfile(corpus, os.path.join(td, "tinyshakespeare.txt"))
        cmd = ["spm_train", "--input=tinyshakespeare.txt", "--model_prefix=tok",
               "--model_type=bpe", "--vocab_size=%d" % VOCAB, "--byte_fallback=true",
               "--split_digits=true", "--add_dummy_prefix=true",
               "--normalization_rule_name=identity", "--remove_extra_whitespaces=false",
               "--allow_whitespace_only_pieces=true", "--unk_id=0", "--bos_id=1",
               "--eos_id=2", "--pad_id=-1", "--character_coverage=1.0",
               "--input_sentence_size=100000", "--shuffle_input_sentence=false",
               "--num_threads=1", "--random_seed=1234"]
        subprocess.run(cmd, check=True, cwd=td,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.copyfile(os.path.join(td, "tok.model"), TOK_PATH)
    print("wrote %s (%d bytes)" % (TOK_PATH, os.path.getsize(TOK_PATH)))


# --------------------------------------------------------------------------- 2
TOKENIZER_TEXTS = [
    "",
    "Hello world",
    "First Citizen:\nBefore we proceed any further, hear me speak.",
    "To be, or not to be, that is the question.",
    "café naïve résumé façade",
    "東京 北京 中文",
    "emoji: 🙂🚀 and ❤️",
    "12345 and 3.14159",
    "a    b",
    "  leading and trailing  ",
    " ",
    "line one\nline two\n\n\tindented\ttab",
    "<s> literal </s> and <unk> text",
    "ROMEO:\nBut, soft! what light through yonder window breaks? It is the east, "
    "and Juliet is the sun. Arise, fair sun, and kill the envious moon, who is "
    "already sick and pale with grief, that thou her maid art far more fair than she.",
    "Mixed: naïve 東京 12:30, x=-7.5e3 🙂\n",
    "\u00a0non-breaking\u00a0space and zero\u200bwidth",
]


def write_tokenizer_cases():
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=TOK_PATH)
    assert sp.vocab_size() == VOCAB and sp.bos_id() == BOS and sp.eos_id() == EOS
    cases = []
    for t in TOKENIZER_TEXTS:
        ids = sp.encode(t)
        cases.append({"text": t, "ids": ids, "decoded": sp.decode(ids)})
    out = {"format": "mnemo-tokenizer-cases", "version": 1,
           "tokenizer": "tokenizer.model",
           "notes": "ids from sentencepiece %s SentencePieceProcessor.encode(text) "
                    "(no BOS/EOS); decoded = decode(ids). Byte-fallback pieces are "
                    "<0xXX>; the identity normalizer keeps runs of spaces." % spm.__version__,
           "cases": cases}
    p = os.path.join(FIX, "tokenizer_cases.json")
    dump_json(out, p)
    print("wrote %s (%d cases)" % (p, len(cases)))
    return sp


# --------------------------------------------------------------------------- 3/4
# Each model: name, seed, config overrides, weight dtype, save format.
# head_dim = hidden/heads everywhere (classic LLaMA); several are not powers of two.
MODELS = [
    dict(name="mha", seed=101, fmt="safetensors", dtype="float32",
         cfg=dict(hidden_size=64, intermediate_size=88, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=4, rms_norm_eps=1e-5,
                  rope_theta=10000.0)),
    dict(name="gqa", seed=202, fmt="safetensors", dtype="float32",
         cfg=dict(hidden_size=96, intermediate_size=72, num_hidden_layers=2,
                  num_attention_heads=8, num_key_value_heads=2, rms_norm_eps=1e-6,
                  rope_theta=10000.0)),
    dict(name="rope_scaled", seed=303, fmt="safetensors", dtype="float32",
         cfg=dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  num_attention_heads=2, num_key_value_heads=2, rms_norm_eps=1e-5,
                  rope_theta=500000.0, rope_scaling={"type": "linear", "factor": 2.0})),
    dict(name="tied", seed=404, fmt="safetensors", dtype="float32",
         cfg=dict(hidden_size=48, intermediate_size=72, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5,
                  rope_theta=10000.0, tie_word_embeddings=True)),
    dict(name="bf16", seed=505, fmt="safetensors", dtype="bfloat16",
         cfg=dict(hidden_size=64, intermediate_size=88, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=4, rms_norm_eps=1e-5,
                  rope_theta=10000.0)),
    dict(name="torch_bin", seed=606, fmt="bin", dtype="float32",
         cfg=dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  num_attention_heads=2, num_key_value_heads=2, rms_norm_eps=1e-6,
                  rope_theta=10000.0)),
    dict(name="sharded", seed=707, fmt="sharded", dtype="float32",
         cfg=dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  num_attention_heads=2, num_key_value_heads=2, rms_norm_eps=1e-5,
                  rope_theta=10000.0)),
]
SHARD_SIZE = "80KB"   # -> 3 shards

# Weight init (instead of HF's std 0.02, which gives near-flat logits): every
# matrix ~ N(0, std^2), RMSNorm weights ~ 1 + N(0, 0.1^2) so the engine's norm
# gain is actually exercised. q/k at 0.2 make attention scores O(1) so the
# softmax is far from uniform; lm_head at 0.3 gives logit std ~2.
INIT_STD = {"embed_tokens": 0.5, "q_proj": 0.2, "k_proj": 0.2, "v_proj": 0.15,
            "o_proj": 0.15, "gate_proj": 0.15, "up_proj": 0.15, "down_proj": 0.15,
            "lm_head": 0.3}

PROMPTS = [
    "All:\nSpeak, speak.",                                                  # 14 ids with BOS
    "You are all resolved rather to die than to famish?\n\nAll:\nResolved.",  # 40
    "3 men, 1599 \u2014 caf\u00e9 \u6771 \U0001F642",   # 29: digits + byte fallback
]


def init_weights(model, seed, tied):
    import torch
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
                continue
            key = [k for k in INIT_STD if k in name]
            assert len(key) == 1, name
            std = INIT_STD[key[0]]
            if tied and key[0] == "embed_tokens":
                # shared matrix: lm_head's std (larger makes greedy collapse
                # into repeating the input token)
                std = INIT_STD["lm_head"]
            p.copy_(std * torch.randn(p.shape, generator=g))


def build_model(spec, seed):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    cfg = dict(vocab_size=VOCAB, max_position_embeddings=128, hidden_act="silu",
               bos_token_id=BOS, eos_token_id=EOS, pad_token_id=None,
               tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
               initializer_range=0.02)
    cfg.update(spec["cfg"])
    config = LlamaConfig(**cfg)
    config._attn_implementation = "eager"
    model = LlamaForCausalLM(config).to(torch.float32)
    init_weights(model, seed, cfg["tie_word_embeddings"])
    if spec["dtype"] == "bfloat16":
        # The reference is computed in fp32 from the bf16-ROUNDED weights,
        # exactly what an engine that widens bf16->fp32 sees.
        # Round the PARAMETERS only: model.to(bfloat16) would also round the
        # non-persistent rotary inv_freq buffer (not stored in the checkpoint;
        # recomputed in fp32 on load), which shifts logits by ~0.1.
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.to(torch.bfloat16).to(torch.float32))
    model.eval()
    if cfg["tie_word_embeddings"]:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    return model


def all_logits(model, ids):
    import torch
    with torch.no_grad():
        x = torch.tensor([ids], dtype=torch.long)
        return model(input_ids=x, attention_mask=torch.ones_like(x)).logits[0].float()


def greedy(model, ids):
    """transformers' greedy continuation + robustness margin along the path."""
    import torch
    x = torch.tensor([ids], dtype=torch.long)
    with torch.no_grad():
        out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=MAX_NEW,
                             do_sample=False, num_beams=1, eos_token_id=EOS,
                             pad_token_id=EOS, temperature=None, top_p=None, top_k=None)
    new = out[0, len(ids):].tolist()
    if EOS in new:
        new = new[:new.index(EOS) + 1]
    # Full (uncached) forward over prompt + generated prefix: the logits that
    # chose generated token j sit at position len(ids)-1+j.
    full = all_logits(model, ids + new[:-1]) if new else all_logits(model, ids)
    margins = []
    for j, tok in enumerate(new):
        row = full[len(ids) - 1 + j]
        top2 = torch.topk(row, 2)
        assert int(top2.indices[0]) == tok, "cached vs uncached argmax mismatch"
        margins.append(float(top2.values[0] - top2.values[1]))
    return new, min(margins)


def patch_config(d, spec, model):
    """Make config.json look like a classic HF LLaMA config as well as a
    transformers-5 one: v5 writes "dtype" (not "torch_dtype") and folds
    rope_theta/rope_scaling into "rope_parameters"."""
    p = os.path.join(d, "config.json")
    with open(p) as f:
        c = json.load(f)
    c["architectures"] = ["LlamaForCausalLM"]
    c["torch_dtype"] = spec["dtype"]
    c["dtype"] = spec["dtype"]
    c["rope_theta"] = spec["cfg"]["rope_theta"]
    rs = spec["cfg"].get("rope_scaling")
    c["rope_scaling"] = None if rs is None else {"type": rs["type"], "rope_type": rs["type"],
                                                 "factor": rs["factor"]}
    c["tie_word_embeddings"] = bool(spec["cfg"].get("tie_word_embeddings", False))
    c["bos_token_id"], c["eos_token_id"] = BOS, EOS
    c["model_type"] = "llama"
    for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "rms_norm_eps", "max_position_embeddings", "vocab_size"):
        assert k in c, k
    with open(p, "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)
        f.write("\n")


def save_model(model, spec, d):
    import torch
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    fmt = spec["fmt"]
    if spec["dtype"] == "bfloat16":
        copy.deepcopy(model).to(torch.bfloat16).save_pretrained(d)
    elif fmt == "safetensors":
        model.save_pretrained(d)
    elif fmt == "sharded":
        model.save_pretrained(d, max_shard_size=SHARD_SIZE)
    elif fmt == "bin":
        # transformers 5 silently ignores safe_serialization=False and still
        # writes model.safetensors, so write the classic pickle checkpoint
        # ourselves (torch zip format, plain state_dict).
        model.save_pretrained(d)
        os.remove(os.path.join(d, "model.safetensors"))
        sd = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
        torch.save(sd, os.path.join(d, "pytorch_model.bin"))
    patch_config(d, spec, model)
    shutil.copyfile(TOK_PATH, os.path.join(d, "tokenizer.model"))
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>",
                   "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True,
                   "add_eos_token": False}, f, indent=2)
        f.write("\n")


def write_logits(path, rows):
    with open(path, "wb") as f:
        f.write(b"MNFXLGT1")
        f.write(struct.pack("<II", 1, len(rows)))
        for a in rows:
            a = a.astype("<f4", copy=False)
            f.write(struct.pack("<II", a.shape[0], a.shape[1]))
            f.write(a.tobytes(order="C"))


def read_logits(path):
    import numpy as np
    with open(path, "rb") as f:
        b = f.read()
    assert b[:8] == b"MNFXLGT1"
    ver, n = struct.unpack_from("<II", b, 8)
    assert ver == 1
    off, rows = 16, []
    for _ in range(n):
        t, v = struct.unpack_from("<II", b, off)
        off += 8
        rows.append(np.frombuffer(b, dtype="<f4", count=t * v, offset=off).reshape(t, v))
        off += 4 * t * v
    assert off == len(b)
    return rows


def check_rope_scaling(model, spec):
    """Linear scaling must really be applied: inv_freq = base/factor and the
    logits must differ from the same weights without scaling."""
    import torch
    from transformers import LlamaForCausalLM
    rs = spec["cfg"].get("rope_scaling")
    if not rs:
        return ""
    hd = spec["cfg"]["hidden_size"] // spec["cfg"]["num_attention_heads"]
    base = 1.0 / (spec["cfg"]["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
    got = model.model.rotary_emb.inv_freq.float()
    assert torch.allclose(got, base / rs["factor"], rtol=1e-6), (got, base)
    assert float(model.model.rotary_emb.attention_scaling) == 1.0
    cfg = model.config.to_dict()
    cfg.pop("rope_scaling", None)
    cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": spec["cfg"]["rope_theta"]}
    from transformers import LlamaConfig
    c2 = LlamaConfig(**{k: v for k, v in cfg.items() if k not in ("architectures",)})
    c2._attn_implementation = "eager"
    m2 = LlamaForCausalLM(c2).to(torch.float32).eval()
    m2.load_state_dict(model.state_dict())
    assert torch.allclose(m2.model.rotary_emb.inv_freq.float(), base, rtol=1e-6)
    ids = [BOS] + list(range(10, 60))
    d = float((all_logits(model, ids) - all_logits(m2, ids)).abs().max())
    assert d > 1e-2, "rope scaling has no effect on logits?"
    return "linear rope scaling verified: inv_freq == base/%.1f; max|dlogit| vs unscaled = %.3f" % (
        rs["factor"], d)


def make_model(spec, sp, versions):
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM
    name = spec["name"]
    d = os.path.join(MODELS_DIR, name)
    prompt_ids = [[BOS] + sp.encode(t) for t in PROMPTS]
    for attempt in range(50):
        seed = spec["seed"] + 1000 * attempt
        model = build_model(spec, seed)
        gens = [greedy(model, ids) for ids in prompt_ids]
        if min(m for _, m in gens) > MIN_MARGIN:
            break
        print("  %s: seed %d min margin %.2e too small, reseeding" % (
            name, seed, min(m for _, m in gens)))
    else:
        raise RuntimeError("no robust seed for " + name)
    rope_note = check_rope_scaling(model, spec)
    # Attention must matter: change one early token, the last position moves.
    alt = list(prompt_ids[1]); alt[2] = (alt[2] + 7) % VOCAB
    ctx = float((all_logits(model, alt)[-1] - all_logits(model, prompt_ids[1])[-1]).abs().mean())
    logits = [all_logits(model, ids).numpy() for ids in prompt_ids]
    save_model(model, spec, d)
    write_logits(os.path.join(d, "logits.bin"), logits)

    files = sorted(os.listdir(d))
    weight_files = [f for f in files if f.endswith((".safetensors", ".bin")) and f != "logits.bin"]
    notes = ("Tiny random LlamaForCausalLM (seed %d, weights ~N(0,0.15-0.5^2), norm gains "
             "1+N(0,0.1^2)), eager attention, fp32 compute. Weights: %s (%s). "
             "logits.bin = model(ids).logits at every prompt position (ids include BOS). "
             "greedy = model.generate(max_new_tokens=%d, do_sample=False, eos=2), stops "
             "after EOS (included if produced). min_greedy_margin = smallest top1-top2 "
             "logit gap along the greedy path (uncached forward). Greedy ids may include "
             "control ids (0/1) and partial byte-fallback sequences; greedy_text is "
             "sentencepiece decode() of them (U+FFFD for invalid UTF-8, controls dropped)." % (
                 seed, ", ".join(weight_files), spec["dtype"], MAX_NEW))
    if spec["dtype"] == "bfloat16":
        notes += " Reference logits are fp32 compute on the bf16-rounded weights."
    if spec["cfg"].get("tie_word_embeddings"):
        notes += " tie_word_embeddings: no lm_head.weight stored; lm_head = embed_tokens."
    if rope_note:
        notes += " " + rope_note + "."
    c = spec["cfg"]
    ref = {"format": "mnemo-fixture", "version": 1, "model": name,
           "torch": versions["torch"], "transformers": versions["transformers"],
           "seed": seed,
           "config": {"hidden_size": c["hidden_size"], "intermediate_size": c["intermediate_size"],
                      "num_hidden_layers": c["num_hidden_layers"],
                      "num_attention_heads": c["num_attention_heads"],
                      "num_key_value_heads": c["num_key_value_heads"],
                      "head_dim": c["hidden_size"] // c["num_attention_heads"],
                      "rms_norm_eps": c["rms_norm_eps"], "rope_theta": c["rope_theta"],
                      "rope_scaling": c.get("rope_scaling"),
                      "tie_word_embeddings": bool(c.get("tie_word_embeddings", False)),
                      "vocab_size": VOCAB, "max_position_embeddings": 128,
                      "weights_dtype": spec["dtype"], "weights_format": spec["fmt"]},
           "prompts": [], "logits_file": "logits.bin", "notes": notes}
    for t, ids, (new, margin) in zip(PROMPTS, prompt_ids, gens):
        ref["prompts"].append({"text": t, "ids": ids, "greedy": new,
                               "greedy_text": sp.decode(new), "min_greedy_margin": margin})
    dump_json(ref, os.path.join(d, "reference.json"))
    files = sorted(os.listdir(d))

    # ---- 5: reload from disk with transformers, compare with recorded logits
    del model
    m = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    m.eval()
    assert type(m).__name__ == "LlamaForCausalLM"
    if spec["cfg"].get("rope_scaling"):
        hd = c["hidden_size"] // c["num_attention_heads"]
        base = 1.0 / (c["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        assert torch.allclose(m.model.rotary_emb.inv_freq.float(),
                              base / c["rope_scaling"]["factor"], rtol=1e-6)
    rec = read_logits(os.path.join(d, "logits.bin"))
    maxdiff = 0.0
    for ids, r in zip(prompt_ids, rec):
        maxdiff = max(maxdiff, float(np.abs(all_logits(m, ids).numpy() - r).max()))
    regen = [greedy(m, ids)[0] for ids in prompt_ids]
    assert regen == [g for g, _ in gens], "reloaded greedy differs"
    assert maxdiff < 1e-5, maxdiff
    allr = np.concatenate(rec)
    size = sum(os.path.getsize(os.path.join(d, f)) for f in files)
    # How much do positions differ? mean over positions of the std across positions.
    pos_spread = float(np.mean([r.std(axis=0).mean() for r in rec]))
    return dict(name=name, files=len(files), bytes=size, maxabs=float(np.abs(allr).max()),
                std=float(allr.std()), pos_spread=pos_spread, ctx=ctx,
                margin=min(m_ for _, m_ in gens), reload_diff=maxdiff,
                ntok=[len(i) for i in prompt_ids], ngen=[len(g) for g, _ in gens],
                weights=",".join(weight_files))


def dir_size(p):
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(p) for f in fs)


def main():
    corpus = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_CORPUS
    train_tokenizer(corpus)                       # step 1 first: others depend on it
    sp = write_tokenizer_cases()

    import torch
    import transformers
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    try:
        transformers.utils.logging.disable_progress_bar()
    except Exception:
        pass
    versions = {"torch": torch.__version__, "transformers": transformers.__version__}
    os.makedirs(MODELS_DIR, exist_ok=True)
    rows = [make_model(spec, sp, versions) for spec in MODELS]

    print()
    print("posvar = mean std of a logit across positions; ctx = mean |dlogit| at the last "
          "position when token 2 of prompt 2 changes (attention matters)")
    print("%-12s %5s %9s %9s %7s %7s %7s %10s %10s  %s" % (
        "model", "files", "bytes", "max|lgt|", "std", "posvar", "ctx", "minmargin", "reloaddiff",
        "weights"))
    for r in rows:
        print("%-12s %5d %9d %9.3f %7.3f %7.3f %7.3f %10.4f %10.2e  %s" % (
            r["name"], r["files"], r["bytes"], r["maxabs"], r["std"], r["pos_spread"], r["ctx"],
            r["margin"], r["reload_diff"], r["weights"]))
    print("prompt tokens (with BOS):", rows[0]["ntok"])
    print("greedy lengths:", {r["name"]: r["ngen"] for r in rows})
    fixtures_own = dir_size(MODELS_DIR) + os.path.getsize(TOK_PATH) + \
        os.path.getsize(os.path.join(FIX, "tokenizer_cases.json"))
    print("fixtures written by this script: %.2f MB; tests/fixtures total: %.2f MB" % (
        fixtures_own / 1e6, dir_size(FIX) / 1e6))
    assert dir_size(FIX) < 5e6


if __name__ == "__main__":
    main()
