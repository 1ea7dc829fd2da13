#!/usr/bin/env python3
"""PyTorch statements of S²-Attn (LongLoRA) and sparse memory training (SMT), and their fixtures.

Run by hand (never in CI), from the repository root, in the venv of setup_train_venv.sh:

    build/train-venv/bin/python tests/reference/make_s2_smt_fixtures.py [--check]

Written from the papers and the spec, not from mnemo's C:
  S²-Attn: an
    explicit boolean mask per head — the first half of the heads sees keys of its own group [kg, (k+1)g), the second
    half groups shifted by g/2 ([0, g/2), [g/2, 3g/2), ..., [T-g/2, T)), causal inside, no wrap-around — applied in
    a plain softmax (a transformers attention function registered as "s2_mask"); RoPE before, global positions.
  SMT: Algorithm 1 in Python over the same
    random stream as the C sampler (splitmix64; Floyd's draws), the sampled memory tokens at their original
    position_ids followed by the target part; loss = mean CE over the target part + beta * mean CE of the plain
    first seq_len + 1 tokens at positions 0..seq_len-1.
Both: full fine-tuning gradients of every parameter (HF names), fp32, 1 thread.

Writes tests/fixtures/train/s2/<model>/ and smt/<model>/: result.json (tokens, settings, sampled positions, loss)
and grads.safetensors. --check regenerates into a temp dir and compares bytes (exit 1 on a difference).
"""
import argparse
import filecmp
import os
import shutil
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_train_fixtures import dump_json, load_base, save_tensors, versions  # noqa: E402

MASK64 = (1 << 64) - 1


# ---------------------------------------------------------------- S²-Attn
def s2_allowed(T, g, hq):
    """[hq, T, T] bool: may query i of head h see key j."""
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    causal = j <= i
    if g >= T:
        return causal.expand(hq, T, T)
    first = (i // g) == (j // g)
    second = ((i + g // 2) // g) == ((j + g // 2) // g)   # ids 0 .. T/g: the last half group is its own
    per_head = [first if h < hq // 2 else second for h in range(hq)]
    return torch.stack(per_head) & causal


S2_GROUP = {"g": None}


def s2_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """query [B, hq, T, hd], key/value [B, hkv, T, hd] (after RoPE): masked softmax attention."""
    B, hq, T, hd = query.shape
    rep = hq // key.shape[1]
    key = key.repeat_interleave(rep, dim=1)
    value = value.repeat_interleave(rep, dim=1)
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling
    scores = scores.masked_fill(~s2_allowed(T, S2_GROUP["g"], hq)[None], float("-inf"))
    p = torch.softmax(scores.float(), dim=-1).to(query.dtype)
    return torch.matmul(p, value).transpose(1, 2).contiguous(), p


def case_s2(name, seed, B, T, out_dir):
    from transformers import AttentionInterface
    AttentionInterface.register("s2_mask", s2_attention)
    os.makedirs(out_dir)
    m = load_base(name)
    m.config._attn_implementation = "s2_mask"
    S2_GROUP["g"] = T // 4
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(3, m.config.vocab_size, (B, T + 1), generator=gen)
    loss = m(input_ids=tokens, labels=tokens).loss
    loss.backward()
    grads = {n: p.grad for n, p in m.named_parameters()}
    save_tensors(grads, os.path.join(out_dir, "grads.safetensors"))
    # the same tokens with full attention: S² must change the loss (else the fixture could not tell)
    m.config._attn_implementation = "eager"
    with torch.no_grad():
        full = m(input_ids=tokens, labels=tokens).loss.item()
    dump_json({"model": name, "base": "tests/fixtures/models/%s" % name, "method": "s2_attn", "batch": B,
               "seq_len": T, "group": T // 4, "tokens": tokens.tolist(), "loss": loss.item(),
               "loss_full_attention": full, "n_tensors": len(grads), "tensors": sorted(grads),
               "notes": "model reads tokens[b][0..T-1], predicts tokens[b][1..T]; S2-Attn mask per head (no-leak "
                        "form); gradients of every parameter"},
              os.path.join(out_dir, "result.json"))


# ---------------------------------------------------------------- SMT
def splitmix(state):
    state = (state + 0x9e3779b97f4a7c15) & MASK64
    z = state
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & MASK64
    return state, z ^ (z >> 31)


def row_seed(seed, row):
    st = (seed ^ ((0xd1b54a32d192ed03 * (row + 1)) & MASK64)) & MASK64
    _, z = splitmix(st)
    return z


def floyd(state, lo, r, k):
    """k distinct positions of [lo, lo + r): for j = r-k .. r-1 draw t in [0, j]; t unless taken, else j."""
    out, seen = [], set()
    for j in range(r - k, r):
        state, z = splitmix(state)
        t = z % (j + 1)
        if t in seen:
            t = j
        seen.add(t)
        out.append(lo + t)
    return state, out


def sparse_sampling(state, M, n, W, iters):
    """Algorithm 1, 0-based: n/2 from the nearest window [M-W, M), the rest recursively with 2W."""
    ids = []
    while not (M < 2 * W or iters == 1 or n < 2):
        near = min(n // 2, W)
        state, got = floyd(state, M - W, W, near)
        ids += got
        n, M, W = n - near, M - W, 2 * W
        iters = iters - 1 if iters > 0 else 0
    state, got = floyd(state, 0, M, n)
    return sorted(ids + got)


def case_smt(name, seed, B, T, M, n, W, decay, beta, out_dir):
    os.makedirs(out_dir)
    m = load_base(name)
    gen = torch.Generator().manual_seed(seed)
    D = M + T + 1 - n                                   # tokens of a document row
    docs = torch.randint(3, m.config.vocab_size, (B, D), generator=gen)
    sampled = [sparse_sampling(row_seed(seed, b), M, n, W, decay) for b in range(B)]
    ids, pos, labels = [], [], []
    for b in range(B):
        idx = sampled[b] + list(range(M, D))            # document index of every id (T + 1 of them)
        ids.append(docs[b, idx])
        pos.append(torch.tensor(idx))
        lab = docs[b, idx].clone()
        lab[:n] = -100                                  # eq. 2: only the target part is predicted
        labels.append(lab)
    ids, pos, labels = torch.stack(ids), torch.stack(pos), torch.stack(labels)
    # an explicit all-ones mask: without one (and without a KV cache) transformers reads the jumps in position_ids
    # as packed sequences and blocks attention across them
    logits = m(input_ids=ids[:, :T], position_ids=pos[:, :T], attention_mask=torch.ones(B, T, dtype=torch.long),
               use_cache=False).logits
    ce = torch.nn.functional.cross_entropy
    l_smt = ce(logits.reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100)
    plain = docs[:, :T + 1]                             # eq. 3's second term: the original window
    lp = m(input_ids=plain[:, :T]).logits
    l_plain = ce(lp.reshape(-1, lp.shape[-1]), plain[:, 1:].reshape(-1))
    loss = l_smt + beta * l_plain
    loss.backward()
    grads = {k: p.grad for k, p in m.named_parameters()}
    save_tensors(grads, os.path.join(out_dir, "grads.safetensors"))
    dump_json({"model": name, "base": "tests/fixtures/models/%s" % name, "method": "smt", "batch": B, "seq_len": T,
               "memory": M, "sampled_n": n, "window": W, "decay": decay, "beta": beta, "seed": seed,
               "docs": docs.tolist(), "sampled": sampled, "loss": loss.item(), "loss_smt": l_smt.item(),
               "loss_plain": l_plain.item(), "n_tensors": len(grads), "tensors": sorted(grads),
               "notes": "row b's sampler state: row_seed(seed, b); ids = docs[b][sampled + M..D-1] at those "
                        "positions; loss = CE(target part) + beta CE(docs[b][0..T] at 0..T-1)"},
              os.path.join(out_dir, "result.json"))


def generate(out):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    case_s2("tied", 21, 2, 32, os.path.join(out, "s2", "tied"))
    case_smt("rope_scaled", 7, 2, 16, 48, 8, 8, 0, 1.0, os.path.join(out, "smt", "rope_scaled"))
    dump_json({"generator": "tests/reference/make_s2_smt_fixtures.py", "versions": versions()},
              os.path.join(out, "s2_smt_versions.json"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    dest = os.path.join("tests", "fixtures", "train")
    if a.check:
        tmp = tempfile.mkdtemp()
        generate(tmp)
        bad = [p for p in ("s2/tied/result.json", "s2/tied/grads.safetensors", "smt/rope_scaled/result.json",
                           "smt/rope_scaled/grads.safetensors")
               if not filecmp.cmp(os.path.join(tmp, p), os.path.join(dest, p), shallow=False)]
        shutil.rmtree(tmp)
        print("differs: %s" % bad if bad else "identical")
        sys.exit(1 if bad else 0)
    for sub in ("s2", "smt"):
        shutil.rmtree(os.path.join(dest, sub), ignore_errors=True)
    generate(dest)


if __name__ == "__main__":
    main()
