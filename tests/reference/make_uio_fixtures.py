#!/usr/bin/env python3
"""Generate mnemo's UIO-LLMs inference fixtures into tests/fixtures/uio/.

Run by hand (never in CI), from the repository root, in the venv of setup_train_venv.sh:

    bash tests/reference/setup_train_venv.sh              # once: build/train-venv
    build/train-venv/bin/python tests/reference/make_uio_fixtures.py [--check]

The expected outputs come from tests/reference/uio_reference.py (written from the spec) run in float64 and
stored as float32. tests/fixtures/uio/README.md (hand-written, kept across regenerations) documents every file
and the semantics. Bases are the existing tiny models tests/fixtures/models/{mha,gqa} (not copied; their
model.safetensors sha256 is recorded). Deterministic: fixed seeds, 1 thread; --check regenerates into a temp
dir and compares the bytes with the committed ones (exit 1 on a difference).

Self-checks (any failure aborts):
  * base equivalence: with chunk_size larger than the input (no compression) the UIO model's logits equal the
    base model's, both the reference's own LLaMA forward and transformers' LlamaForCausalLM (fp32, 1e-5),
    with the fixture's NON-zero LoRA and with zero LoRA;
  * one call == token by token == arbitrary call splits (fp32 and fp64);
  * an independent construction from transformers + peft (fp32): every compressed segment's <mem> hidden
    states (a separate forward per slot i over [segment[:(i+1)c], <mem>] at positions [0..(i+1)c-1, (i+1)c],
    which is the encoder mask's row for slot i), the transfer head as peft LoRA modules on k_proj/v_proj, and
    every logit row of the sequence from LlamaForCausalLM with a DynamicCache seeded with the rotated memory
    keys of the earlier segments (positions 0..M_total-1) and position_ids continuing after them;
  * generation: the logits of every greedy step equal the one-call logits of prompt + greedy[:-1];
  * fp32 reference vs fp64 reference; both weight files reload to the same tensors;
  * sensitivity: zeroing the encoder LoRA, the transfer-head LoRA, or replacing <mem> changes the logits.
"""
import argparse
import copy
import filecmp
import hashlib
import json
import os
import re
import shutil
import struct
import sys
import tempfile

import torch
from safetensors.torch import load_file, save_file

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import uio_reference as U  # noqa: E402

ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
MODELS = "tests/fixtures/models"
CORPUS = os.path.join(ROOT, "data", "tinyshakespeare.txt")
TOKENIZER = "tests/fixtures/tokenizer.model"
EOS = 2

# name, base, chunk_size, num_memory, lora_rank, lora_alpha, weight dtype, pth flavour, prompt segments + rest,
# new tokens, seed, call splits (cycled until the prompt is used up)
CASES = [
    dict(name="mha_c16_m4", base="mha", chunk_size=16, num_memory=4, lora_rank=4, lora_alpha=8,
         dtype="float32", pth="parameters", prompt_len=6 * 16 + 7, new_tokens=30, seed=1900,
         splits=[5, 20, 1, 16, 33, 2, 9]),
    dict(name="mha_c16_m2_bf16", base="mha", chunk_size=16, num_memory=2, lora_rank=8, lora_alpha=32,
         dtype="bfloat16", pth="parameters_shared_storage", prompt_len=6 * 16 + 11, new_tokens=26, seed=1910,
         splits=[16, 3, 13, 40, 1, 7]),
    dict(name="gqa_c12_m3", base="gqa", chunk_size=12, num_memory=3, lora_rank=4, lora_alpha=16,
         dtype="float32", pth="tensors", prompt_len=6 * 12 + 5, new_tokens=24, seed=1920,
         splits=[11, 2, 25, 12, 6]),
]
# Option (a) (uio_reference.py, keep_raw W): the weights of an existing case, a shorter prompt, W = 5 (the kept rows
# move down) and W = 14 (> C - M: the first time they move up); only reference.json and logits.bin per case.
KEEP_CASES = [
    dict(name="mha_c16_m4_keep5", uio_case="mha_c16_m4", keep_raw=5, prompt_len=3 * 16 + 2, new_tokens=16,
         seed=1930),
    dict(name="mha_c16_m4_keep14", uio_case="mha_c16_m4", keep_raw=14, prompt_len=3 * 16 + 9, new_tokens=16,
         seed=1940),
]
TOL_F32 = 5e-5     # reference fp32 self-consistency (logits up to ~|20|)
TOL_HF = 1e-4      # reference vs transformers + peft (fp32 both)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def dump_json(obj, path):
    """Indented JSON with lists of numbers on one line."""
    txt = json.dumps(obj, ensure_ascii=False, indent=1)
    txt = re.sub(r"\[\s*([-0-9.e+, \n]*?)\s*\]",
                 lambda m: "[" + re.sub(r"\s*,\s*", ", ", m.group(1).strip()) + "]", txt)
    assert json.loads(txt) == obj
    with open(path, "w", encoding="utf-8") as f:
        f.write(txt + "\n")


def versions():
    import numpy
    import peft
    import safetensors
    import transformers
    return {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__,
            "safetensors": safetensors.__version__, "numpy": numpy.__version__}


def write_logits(path, records):
    """MNFXLGT1 (tests/reference/README.md): magic, version 1, n_records, then n_rows, n_vocab, f32 rows."""
    with open(path, "wb") as f:
        f.write(b"MNFXLGT1")
        f.write(struct.pack("<II", 1, len(records)))
        for lg in records:
            a = lg.detach().to(torch.float32).contiguous().numpy()
            f.write(struct.pack("<II", a.shape[0], a.shape[1]))
            f.write(a.astype("<f4").tobytes())


def maxdiff(a, b):
    return (a.double() - b.double()).abs().max().item()


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


# ----------------------------------------------------------------------------------------------- weights
def make_uio_weights(case, base_sd, cfg):
    """Random NON-zero LoRA A and B, a <mem> vector = embedding row 2 (the reference's init) + noise."""
    g = torch.Generator().manual_seed(case["seed"])
    H = cfg["hidden_size"]
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or H // nh
    r = case["lora_rank"]
    dt = DTYPES[case["dtype"]]

    def rnd(*shape, std):
        return (torch.randn(*shape, generator=g) * std).to(dt)

    emb = base_sd["model.embed_tokens.weight"].float()
    mem = emb[2] + torch.randn(H, generator=g) * emb.std()
    rep = emb[2] + torch.randn(H, generator=g) * emb.std()
    # A ~ N(0, 0.3), B ~ N(0, 0.3/sqrt(r)) * 2/scale: s*B*A has entries ~ 0.2, the base weights' scale
    s = case["lora_alpha"] / r
    sb = 0.3 / r ** 0.5 * 2.0 / s
    enc = [{"q_proj": (rnd(r, H, std=0.3), rnd(nh * hd, r, std=sb)),
            "v_proj": (rnd(r, H, std=0.3), rnd(nkv * hd, r, std=sb))} for _ in range(cfg["num_hidden_layers"])]
    dec = [{"k_proj": (rnd(r, H, std=0.3), rnd(nkv * hd, r, std=sb)),
            "v_proj": (rnd(r, H, std=0.3), rnd(nkv * hd, r, std=sb))} for _ in range(cfg["num_hidden_layers"])]
    config = {"num_memory": case["num_memory"], "lora_rank": r, "lora_alpha": case["lora_alpha"],
              "lora_dropout": 0, "chunk_size": case["chunk_size"]}
    if case["pth"] == "parameters_shared_storage":
        # As the reference's CCF builds them: both tokens are Parameters made from views of one storage (the
        # embedding matrix, row 2). Here rows 2 and 5 of one (8, H) storage, so they differ and a reader must
        # honour storage offsets.
        store = torch.randn(8, H, generator=g).to(dt)
        store[2] = mem.to(dt)
        store[5] = rep.to(dt)
        mem_t, rep_t = store[2][None, None, :], store[5][None, None, :]
    else:
        mem_t, rep_t = mem.to(dt)[None, None, :].clone(), rep.to(dt)[None, None, :].clone()
    return U.UioWeights(config, mem_t, enc, rep_t, dec)


def save_uio_dirs(case, uio, out):
    """<case>/uio_pth/{uio_config.json, uio.pth} and <case>/uio_st/{uio_config.json, uio.safetensors}."""
    pth_dir, st_dir = os.path.join(out, "uio_pth"), os.path.join(out, "uio_st")
    os.makedirs(pth_dir)
    os.makedirs(st_dir)
    for d in (pth_dir, st_dir):
        with open(os.path.join(d, "uio_config.json"), "w", encoding="utf-8") as f:
            json.dump(uio.config, f, indent=4)   # the reference's config/*.json layout
            f.write("\n")
    tensors = uio.as_list()
    if case["pth"] == "tensors":
        obj = [t.clone() for t in tensors]
    else:  # the reference saves ft_params(): a list of nn.Parameter (requires_grad True)
        obj = [torch.nn.Parameter(t, requires_grad=True) for t in tensors]
        if case["pth"] == "parameters_shared_storage":
            assert obj[0].untyped_storage().data_ptr() == obj[1 + 4 * len(uio.enc)].untyped_storage().data_ptr()
            assert obj[0].storage_offset() == 2 * obj[0].shape[-1]
    torch.save(obj, os.path.join(pth_dir, "uio.pth"))
    # one metadata key only: safetensors writes the metadata map in hash order (PYTHONHASHSEED-dependent)
    save_file({k: v.contiguous() for k, v in uio.as_named().items()}, os.path.join(st_dir, "uio.safetensors"),
              metadata={"format": "mnemo-uio/1"})
    # both reload to exactly these tensors
    for d in (pth_dir, st_dir):
        back = U.UioWeights.from_dir(d)
        assert back.config == uio.config
        for a, b in zip(back.as_list(), uio.as_list()):
            assert a.dtype == b.dtype and torch.equal(a, b), d
    return pth_dir, st_dir


# ----------------------------------------------------------------------------------------------- prompts
def pick_prompt(model64, model32, tokens, case):
    """First corpus window whose greedy continuation has no EOS and top1-top2 margins >= 2e-2 everywhere."""
    P, n_new = case["prompt_len"], case["new_tokens"]
    g = torch.Generator().manual_seed(case["seed"] + 1)
    for attempt in range(200):
        off = int(torch.randint(0, len(tokens) - P, (1,), generator=g))
        prompt = [1] + tokens[off: off + P - 1]
        new, rows, _ = model64.generate(prompt, n_new, eos=(EOS,))
        if len(new) < n_new or EOS in new:
            continue
        margin = min(float(r.topk(2).values[0] - r.topk(2).values[1]) for r in rows)
        new32, _, _ = model32.generate(prompt, n_new, eos=(EOS,))
        if margin >= 2e-2 and new32 == new:
            return prompt, off, new, margin, attempt
    raise SystemExit("no prompt with a clean greedy path for " + case["name"])


# ----------------------------------------------------------------------------------------------- transformers + peft
def hf_models(base_dir, uio):
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaForCausalLM
    load = lambda: LlamaForCausalLM.from_pretrained(base_dir, dtype=torch.float32,  # noqa: E731
                                                    attn_implementation="eager").eval()
    base = load()
    r, alpha = uio.config["lora_rank"], uio.config["lora_alpha"]
    enc = get_peft_model(load(), LoraConfig(r=r, lora_alpha=alpha, lora_dropout=0.0,
                                            target_modules=["q_proj", "v_proj"])).eval()
    dec = get_peft_model(load(), LoraConfig(r=r, lora_alpha=alpha, lora_dropout=0.0,
                                            target_modules=["k_proj", "v_proj"])).eval()
    for pm, parts in ((enc, uio.enc), (dec, uio.dec)):
        for layer, w in zip(pm.base_model.model.model.layers, parts):
            for p, (A, B) in w.items():
                mod = getattr(layer.self_attn, p)
                assert abs(mod.scaling["default"] - alpha / r) < 1e-12
                mod.lora_A["default"].weight.data.copy_(A.float())
                mod.lora_B["default"].weight.data.copy_(B.float())
    return base, enc, dec


@torch.no_grad()
def hf_check(base_dir, uio, seq, ref_logits, ref_memories):
    """Rebuild every logit row of seq (fed from a fresh state) from transformers + peft; returns max diffs."""
    from transformers import DynamicCache
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb
    base, enc, dec = hf_models(base_dir, uio)
    C, M = uio.config["chunk_size"], uio.config["num_memory"]
    c = C // M
    mem_vec = uio.retrieval_token.float().reshape(1, 1, -1)
    emb = base.model.embed_tokens
    n_layers = base.config.num_hidden_layers
    nkv, hd = base.config.num_key_value_heads, base.config.head_dim
    mem_h = [[] for _ in range(n_layers)]
    d_h = d_kv = d_logit = 0.0
    for s in range(0, (len(seq) + C - 1) // C):
        seg = seq[s * C: (s + 1) * C]
        # decoder rows of segment s: memory of segments < s in a seeded cache, then the segment's tokens
        Mt = s * M
        cache = DynamicCache(config=base.config)
        if Mt:
            pos = torch.arange(Mt)[None]
            for l, layer in enumerate(dec.base_model.model.model.layers):
                h = torch.cat(mem_h[l])[None]                                  # (1, Mt, H)
                k = layer.self_attn.k_proj(h).view(1, Mt, nkv, hd).transpose(1, 2)
                v = layer.self_attn.v_proj(h).view(1, Mt, nkv, hd).transpose(1, 2)
                cos, sin = base.model.rotary_emb(v, pos)
                k_rot, _ = apply_rotary_pos_emb(k, k, cos, sin)
                cache.update(k_rot, v, l)
        out = base(input_ids=torch.tensor([seg]), past_key_values=cache, use_cache=True,
                   position_ids=(Mt + torch.arange(len(seg)))[None]).logits[0]
        d_logit = max(d_logit, maxdiff(out, ref_logits[s * C: s * C + len(seg)]))
        if len(seg) < C or s >= len(ref_memories):
            continue   # this segment is not compressed within seq
        # encoder: one forward per <mem> slot i over [seg[:(i+1)c], <mem>] at [0..(i+1)c-1, (i+1)c]
        for i in range(M):
            n = (i + 1) * c
            x = torch.cat([emb(torch.tensor([seg[:n]])), mem_vec], dim=1)
            hs = enc(inputs_embeds=x, position_ids=torch.arange(n + 1)[None], output_hidden_states=True)
            for l, layer in enumerate(enc.base_model.model.model.layers):
                h = layer.input_layernorm(hs.hidden_states[l][0, -1:])
                d_h = max(d_h, maxdiff(h[0], ref_memories[s][0][l][i]))
                mem_h[l].append(h)
        for l, layer in enumerate(dec.base_model.model.model.layers):
            h = torch.cat(mem_h[l][-M:])
            d_kv = max(d_kv, maxdiff(layer.self_attn.k_proj(h), ref_memories[s][1][l][0]),
                       maxdiff(layer.self_attn.v_proj(h), ref_memories[s][1][l][1]))
    # base equivalence through transformers: no compression when chunk_size exceeds the input
    plain = base(input_ids=torch.tensor([seq])).logits[0]
    return {"max_abs_diff_mem_h": d_h, "max_abs_diff_mem_kv": d_kv, "max_abs_diff_logits": d_logit}, plain


# ----------------------------------------------------------------------------------------------- one case
def with_config(uio, **kw):
    u = copy.copy(uio)
    u.config = dict(uio.config, **kw)
    return u


def zero_lora(parts):
    return [{p: (torch.zeros_like(A), torch.zeros_like(B)) for p, (A, B) in w.items()} for w in parts]


def splits_of(n, pattern):
    out, i = [], 0
    while sum(out) < n:
        out.append(min(pattern[i % len(pattern)], n - sum(out)))
        i += 1
    return out


def run_case(case, tokens, out_root):
    name = case["name"]
    out = os.path.join(out_root, name)
    os.makedirs(out)
    base_dir = os.path.join(MODELS, case["base"])
    with open(os.path.join(base_dir, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    base_sd = load_file(os.path.join(base_dir, "model.safetensors"))
    uio = make_uio_weights(case, base_sd, cfg)
    pth_dir, st_dir = save_uio_dirs(case, uio, out)
    uio = U.UioWeights.from_dir(pth_dir)          # everything below runs on what the file holds
    b64 = U.BaseModel(cfg, base_sd, torch.float64)
    b32 = U.BaseModel(cfg, base_sd, torch.float32)
    m64, m32 = U.UioRef(b64, uio), U.UioRef(b32, uio)
    C, M = case["chunk_size"], case["num_memory"]

    prompt, off, new, margin, attempts = pick_prompt(m64, m32, tokens, case)
    P = len(prompt)
    seq = prompt + new[:-1]                        # every fed token of generate()

    # one call; token by token; call splits (fp64 and fp32)
    s64 = m64.session()
    lg64 = s64.feed(seq)
    lg32 = m32.session().feed(seq)
    tok64 = torch.cat([s.feed([t]) for s in [m64.session()] for t in seq])
    tok32_s = m32.session()
    tok32 = torch.cat([tok32_s.feed([t]) for t in seq])
    assert maxdiff(tok64, lg64) < 1e-10, maxdiff(tok64, lg64)
    assert maxdiff(tok32, lg32) < TOL_F32, maxdiff(tok32, lg32)
    d_f32 = maxdiff(lg32, lg64)
    assert d_f32 < TOL_F32, d_f32
    splits = splits_of(P, case["splits"])
    sp_s, rows, calls = m64.session(), [], []
    for n in splits:
        i = sp_s.n_fed
        rows.append(sp_s.feed(prompt[i: i + n]))
        calls.append(dict(n_tokens=n, **sp_s.state()))
    assert maxdiff(torch.cat(rows), lg64[:P]) < 1e-10
    assert [e for e in s64.events if e["after_tokens"] <= P] == sp_s.events

    # generation: reference generate() path, with the state after every step
    steps = []
    new_g, gen_rows, g_sess = m64.generate(prompt, case["new_tokens"], eos=(EOS,),
                                           on_step=lambda s: steps.append(s.state()))
    assert new_g == new
    assert maxdiff(torch.stack(gen_rows), lg64[P - 1:]) < 1e-10
    assert g_sess.events == s64.events
    gen_events = [e for e in g_sess.events if e["after_tokens"] > P]
    assert gen_events, "no compression during generation"

    # base equivalence: chunk_size beyond the input -> the base model, with this LoRA and with zero LoRA
    huge = len(seq) + 1
    uio_z = U.UioWeights(uio.config, uio.retrieval_token, zero_lora(uio.enc), uio.repeat_token,
                         zero_lora(uio.dec))
    plain64 = b64.plain_forward(seq)
    nocomp = {}
    for tag, u in (("lora", uio), ("zero_lora", uio_z)):
        ses = U.UioRef(b32, with_config(u, chunk_size=huge, num_memory=1)).session()
        lg = ses.feed(seq)
        assert ses.events == [] and ses.raw_tokens == len(seq)
        nocomp[tag] = lg
        assert maxdiff(lg, plain64) < TOL_F32

    # transformers + peft
    hf, hf_plain = hf_check(base_dir, uio, seq, lg32, s64.memories)
    assert max(hf.values()) < TOL_HF, hf
    for tag, lg in nocomp.items():
        assert maxdiff(lg, hf_plain) < TOL_F32, (tag, maxdiff(lg, hf_plain))
    d_plain = maxdiff(plain64, hf_plain)

    # sensitivity: each UIO component changes the logits
    def alt_logits(u):
        return U.UioRef(b64, u).session().feed(seq)
    emb2 = base_sd["model.embed_tokens.weight"][2].to(uio.retrieval_token.dtype)[None, None, :]
    sens = {
        "vs_base_model": maxdiff(lg64, plain64),
        "encoder_lora_zeroed": maxdiff(lg64, alt_logits(U.UioWeights(uio.config, uio.retrieval_token,
                                                                     zero_lora(uio.enc), uio.repeat_token,
                                                                     uio.dec))),
        "transfer_lora_zeroed": maxdiff(lg64, alt_logits(U.UioWeights(uio.config, uio.retrieval_token, uio.enc,
                                                                      uio.repeat_token, zero_lora(uio.dec)))),
        "mem_vector_is_embedding_row_2": maxdiff(lg64, alt_logits(U.UioWeights(uio.config, emb2, uio.enc,
                                                                               uio.repeat_token, uio.dec))),
    }
    for k, v in sens.items():
        assert v > 1e-2, (k, v)

    # files
    write_logits(os.path.join(out, "logits.bin"), [lg64])
    mem = {}
    for k, (hs, kv) in enumerate(s64.memories):
        for l in range(len(hs)):
            mem["seg%d.layers.%d.h" % (k, l)] = hs[l].float().contiguous()
            mem["seg%d.layers.%d.k" % (k, l)] = kv[l][0].float().contiguous()
            mem["seg%d.layers.%d.v" % (k, l)] = kv[l][1].float().contiguous()
    save_file(mem, os.path.join(out, "memory.safetensors"), metadata={"format": "mnemo-uio-memory"})
    ref = {
        "format": "mnemo-uio-fixture", "version": 1, "name": name,
        "base": base_dir, "base_sha256": sha256(os.path.join(base_dir, "model.safetensors")),
        "uio_dirs": {"pth": "uio_pth", "safetensors": "uio_st"},
        "uio_config": uio.config, "lora_scale": uio.scale, "weights_dtype": case["dtype"],
        "pth_flavour": case["pth"], "weight_seed": case["seed"],
        "encoder_attention_scale": "1/sqrt(head_dim)",
        "eos_token_id": EOS,
        "prompt": {"corpus_offset": off, "ids": prompt, "n_tokens": P, "attempts": attempts},
        "greedy": new, "min_greedy_margin": margin,
        "fed": "ids = prompt + greedy[:-1]; logits.bin row t = logits after fed token t",
        "n_rows": len(seq),
        "calls": calls,
        "compressions": s64.events,
        "generation_steps": steps,
        "final_state": s64.state(),
        "checks": {
            "fp32_vs_fp64_max_abs": d_f32,
            "token_by_token_vs_one_call_fp32_max_abs": maxdiff(tok32, lg32),
            "transformers_peft": hf,
            "no_compression_vs_transformers_max_abs": {k: maxdiff(v, hf_plain) for k, v in nocomp.items()},
            "reference_base_forward_vs_transformers_max_abs": d_plain,
            "sensitivity_max_abs": sens,
        },
    }
    dump_json(ref, os.path.join(out, "reference.json"))
    print("%-16s P=%d new=%d compressions=%d (during generation %d) margin=%.3g hf=%s fp32=%.2g" % (
        name, P, len(new), len(s64.events), len(gen_events), margin,
        {k: "%.1e" % v for k, v in hf.items()}, d_f32))
    return {"prompt_tokens": P, "greedy": len(new), "compressions": len(s64.events),
            "compressions_during_generation": len(gen_events), "checks": ref["checks"]}


def run_keep_case(case, tokens, out_root):
    """Option (a): greedy generation and the logits of every fed token with keep_raw W, on a case's weights."""
    name, W = case["name"], case["keep_raw"]
    out = os.path.join(out_root, "keep_raw", name)
    os.makedirs(out)
    uio_rel = os.path.join(out_root, case["uio_case"], "uio_st")
    base_dir = os.path.join(MODELS, [c for c in CASES if c["name"] == case["uio_case"]][0]["base"])
    with open(os.path.join(base_dir, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    base_sd = load_file(os.path.join(base_dir, "model.safetensors"))
    uio = U.UioWeights.from_dir(uio_rel)
    b64, b32 = U.BaseModel(cfg, base_sd, torch.float64), U.BaseModel(cfg, base_sd, torch.float32)
    m64, m32 = U.UioRef(b64, uio, keep_raw=W), U.UioRef(b32, uio, keep_raw=W)
    prompt, off, new, margin, attempts = pick_prompt(m64, m32, tokens, case)
    P, seq = len(prompt), prompt + new[:-1]
    s64 = m64.session()
    lg64 = s64.feed(seq)
    tok64 = torch.cat([s.feed([t]) for s in [m64.session()] for t in seq])
    assert maxdiff(tok64, lg64) < 1e-10
    d_f32 = maxdiff(m32.session().feed(seq), lg64)
    assert d_f32 < TOL_F32, d_f32
    _, gen_rows, g_sess = m64.generate(prompt, case["new_tokens"], eos=(EOS,))
    assert maxdiff(torch.stack(gen_rows), lg64[P - 1:]) < 1e-10 and g_sess.events == s64.events
    assert any(e["after_tokens"] > P for e in s64.events), "no compression during generation"
    assert all(e["raw_tokens"] == W + e["acc_tokens"] for e in s64.events)
    d_w0 = maxdiff(lg64, U.UioRef(b64, uio).session().feed(seq))
    assert d_w0 > 1e-2, d_w0  # W changes the logits after a compression
    first = s64.events[0]["after_tokens"]
    assert maxdiff(lg64[:first], U.UioRef(b64, uio).session().feed(seq)[:first]) < 1e-12  # and nothing before
    write_logits(os.path.join(out, "logits.bin"), [lg64])
    ref = {
        "format": "mnemo-uio-keep-fixture", "version": 1, "name": name, "keep_raw": W,
        "base": base_dir, "uio_dir": os.path.join("tests/fixtures/uio", case["uio_case"], "uio_st"),
        "uio_config": uio.config,
        "prompt": {"corpus_offset": off, "ids": prompt, "n_tokens": P, "attempts": attempts},
        "greedy": new, "min_greedy_margin": margin,
        "fed": "ids = prompt + greedy[:-1]; logits.bin row t = logits after fed token t",
        "n_rows": len(seq),
        "compressions": s64.events,
        "final_state": dict(s64.state(), kept_tokens=s64.n_kept),
        "checks": {"fp32_vs_fp64_max_abs": d_f32, "vs_keep_raw_0_max_abs": d_w0},
    }
    dump_json(ref, os.path.join(out, "reference.json"))
    print("%-18s W=%d P=%d new=%d compressions=%d margin=%.3g vs W=0 %.3g" % (
        name, W, P, len(new), len(s64.events), margin, d_w0))
    return {"prompt_tokens": P, "greedy": len(new), "compressions": len(s64.events), "checks": ref["checks"]}


def generate(out):
    import sentencepiece as spm
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.chdir(ROOT)
    os.makedirs(out)
    sp = spm.SentencePieceProcessor(model_file=TOKENIZER)
    with open(CORPUS, encoding="utf-8") as f:
        tokens = sp.encode(f.read()[:200000])
    summary = {"format": "mnemo-uio-fixtures", "version": 1, "versions": versions(), "cases": {}}
    for case in CASES:
        summary["cases"][case["name"]] = run_case(case, tokens, out)
    summary["keep_raw_cases"] = {c["name"]: run_keep_case(c, tokens, out) for c in KEEP_CASES}
    dump_json(summary, os.path.join(out, "summary.json"))


def same_tree(a, b):
    da = sorted(os.path.relpath(os.path.join(r, f), a) for r, _, fs in os.walk(a) for f in fs)
    db = sorted(os.path.relpath(os.path.join(r, f), b) for r, _, fs in os.walk(b) for f in fs)
    bad = sorted(set(da) ^ set(db))
    bad += [f for f in sorted(set(da) & set(db))
            if not filecmp.cmp(os.path.join(a, f), os.path.join(b, f), shallow=False)]
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "uio"))
    ap.add_argument("--check", action="store_true", help="regenerate into a temp dir and compare bytes")
    args = ap.parse_args()
    out = os.path.abspath(args.out)
    tmp = tempfile.mkdtemp(prefix="mnemo-uio-fix-")
    try:
        gen = os.path.join(tmp, "uio")
        generate(gen)
        if args.check:
            bad = [f for f in same_tree(gen, out) if f != "README.md"]  # README is hand-written
            print("identical" if not bad else "DIFFERENT: " + ", ".join(bad))
            return 1 if bad else 0
        readme = os.path.join(out, "README.md")
        keep = open(readme, encoding="utf-8").read() if os.path.exists(readme) else None
        if os.path.exists(out):
            shutil.rmtree(out)
        shutil.copytree(gen, out)
        if keep is not None:
            with open(readme, "w", encoding="utf-8") as f:
                f.write(keep)
        print("wrote", os.path.relpath(out, ROOT))
        return 0
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    sys.exit(main())
