#!/usr/bin/env python3
"""One FoT cross-batch training step (loss and autograd gradients) in PyTorch, written for mnemo's tests from the
Focused Transformer paper (§3.2, Appendix A.2, B.3, Listing 1) and modeling_longllama.py. The model pieces
(config, RMSNorm, rotate_half RoPE tables) are longllama_ref.py's; nothing here is shared with the C code.

The statement:
  * A batch is D documents, each K consecutive contexts (rows) of T tokens: document g's run of K*T + 1 ids is cut
    into rows j = 0..K-1 reading ids[j*T : j*T + T] and predicting ids[j*T + 1 : j*T + T + 1]. Every row runs
    through the whole model (all rows are "embedded in the same step"); loss = mean cross-entropy over all D*K*T
    predictions.
  * Schedule "F(P,N),...": row j of every document gets the segment that row j falls in when the K rows are handed
    out in the order written (K = least common denominator of the fractions). In a memory layer, row (g, j) sees,
    besides its own causal local context, the whole of: its P previous contexts (g, j-1) .. (g, j-P) (positives)
    and the N rows that come just before document g's first row in the batch, cyclically (negatives: contexts of
    other documents), and with a third number M ("F(P,N,M)") rows (h, j-1) .. (h, j-P) of the M documents
    h = g-1 .. g-M, cyclically (the paper's §3.2 negatives: other documents' previous contexts).
  * Memory layers: queries and local keys RoPE-rotated at positions 0..T-1 (no RoPE at all when mem_positionals is
    false); keys of extra contexts are "encoded as if they were the first in the context" = RoPE position 0 =
    unrotated; local and extra scores go through ONE softmax; values of extra contexts are their rows' values.
    Everything differentiable: gradients reach the extra contexts' keys and values (and so their rows).
  * Written as a [rows, rows] visibility matrix over every row's unrotated keys (not the gather of the C code).
"""
import math
from fractions import Fraction

import torch
import torch.nn.functional as F

import longllama_ref


def parse_schedule(text):
    """'1/4(0,0),1/4(1,1,2)' -> (K, [(P, N, M) for each row of a document]); M defaults to 0."""
    segs = []
    for part in text.replace(" ", "").split("),"):
        part = part.rstrip(")")
        frac, pn = part.split("(")
        nums = [int(x) for x in pn.split(",")]
        assert len(nums) in (2, 3), text
        p, n, m = nums + [0] * (3 - len(nums))
        assert m == 0 or p >= 1, text
        segs.append((Fraction(frac), p, n, m))
    assert sum(seg[0] for seg in segs) == 1, text
    K = math.lcm(*(seg[0].denominator for seg in segs))
    rows = []
    for f, p, n, m in segs:
        rows += [(p, n, m)] * int(f * K)
    for j, (p, _, _) in enumerate(rows):
        assert p <= j, f"row {j} cannot have {p} previous contexts"
    return K, rows


def visibility(K, rows, D):
    """vis[r, s] = True when row r's memory layers see row s as an extra context."""
    R = D * K
    vis = torch.zeros(R, R, dtype=torch.bool)
    for g in range(D):
        for j, (p, n, m) in enumerate(rows):
            r = g * K + j
            for i in range(1, p + 1):
                vis[r, g * K + j - i] = True
            for i in range(1, n + 1):
                s = (g * K - i) % R
                assert s // K != g, "a negative from the row's own document"
                vis[r, s] = True
            for o in range(1, m + 1):
                h = (g - o) % D
                assert h != g, "a mirrored negative from the row's own document"
                for i in range(1, p + 1):
                    vis[r, h * K + j - i] = True
    return vis


def rows_of(docs, K, T):
    """docs: [D][K*T + 1] ids -> (inp [D*K, T], tgt [D*K, T])."""
    inp, tgt = [], []
    for d in docs:
        assert len(d) == K * T + 1
        for j in range(K):
            inp.append(d[j * T: j * T + T])
            tgt.append(d[j * T + 1: j * T + T + 1])
    return torch.tensor(inp, dtype=torch.long), torch.tensor(tgt, dtype=torch.long)


LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def loss_fn(cfg, w, inp, tgt, vis, dtype=torch.float32, lora=None, lora_scale=1.0):
    """w: dict of HF-named tensors. lora: None, or {"model.layers.{i}.{self_attn|mlp}.{target}": (A [r, in], B [out, r])}
    adding lora_scale * (x A^T) B^T to that projection (peft's arithmetic). Returns the mean cross-entropy."""

    def lin(h, name):
        y = F.linear(h, w[name + ".weight"])
        if lora is not None and name in lora:
            a, b = lora[name]
            y = y + lora_scale * F.linear(F.linear(h, a), b)
        return y

    R, T = inp.shape
    H, d = cfg.num_attention_heads, cfg.head_dim
    rope = longllama_ref.LongLlamaRef.__new__(longllama_ref.LongLlamaRef)  # only its RoPE tables
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    ang = torch.outer(torch.arange(T, dtype=torch.float64), inv)
    ang = torch.cat([ang, ang], dim=-1)
    rope.cos, rope.sin = ang.cos().to(dtype), ang.sin().to(dtype)
    pos = torch.arange(T)
    causal = torch.arange(T)[None, :] > torch.arange(T)[:, None]  # [T, T] True = masked
    x = w["model.embed_tokens.weight"][inp]  # [R, T, hidden]
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        h = longllama_ref.rms_norm(x, w[p + "input_layernorm.weight"], cfg.rms_norm_eps)
        q = lin(h, p + "self_attn.q_proj").view(R, T, H, d).transpose(1, 2)  # [R, H, T, d]
        k = lin(h, p + "self_attn.k_proj").view(R, T, H, d).transpose(1, 2)
        if cfg.qk_norm:  # each head of q and k, before RoPE (longllama_ref's qk_norm)
            q = longllama_ref.rms_norm(q, w[p + "self_attn.q_norm.weight"], cfg.rms_norm_eps)
            k = longllama_ref.rms_norm(k, w[p + "self_attn.k_norm.weight"], cfg.rms_norm_eps)
        v = lin(h, p + "self_attn.v_proj").view(R, T, H, d).transpose(1, 2)
        is_mem = i in cfg.mem_layers
        if not is_mem or cfg.mem_positionals:
            qr, kr = rope.rope(q, pos), rope.rope(k, pos)
        else:
            qr, kr = q, k
        s_loc = (qr @ kr.transpose(-1, -2)) / math.sqrt(d)  # [R, H, T, T]
        s_loc = s_loc.masked_fill(causal, -math.inf)
        if is_mem:
            # every row's unrotated keys, seen by row r where vis[r, s]: [R, H, T, R*T]
            k_all = k.permute(1, 0, 2, 3).reshape(H, R * T, d)
            v_all = v.permute(1, 0, 2, 3).reshape(H, R * T, d)
            s_x = torch.einsum("rhtd,hnd->rhtn", qr, k_all) / math.sqrt(d)
            mask = (~vis).repeat_interleave(T, dim=1)  # [R, R*T]
            s_x = s_x.masked_fill(mask[:, None, None, :], -math.inf)
            a = torch.softmax(torch.cat([s_loc, s_x], dim=-1), dim=-1)
            o = a[..., :T] @ v + torch.einsum("rhtn,hnd->rhtd", a[..., T:], v_all)
        else:
            o = torch.softmax(s_loc, dim=-1) @ v
        o = o.transpose(1, 2).reshape(R, T, H * d)
        x = x + lin(o, p + "self_attn.o_proj")
        h = longllama_ref.rms_norm(x, w[p + "post_attention_layernorm.weight"], cfg.rms_norm_eps)
        g = F.silu(lin(h, p + "mlp.gate_proj"))
        x = x + lin(g * lin(h, p + "mlp.up_proj"), p + "mlp.down_proj")
    x = longllama_ref.rms_norm(x, w["model.norm.weight"], cfg.rms_norm_eps)
    logits = F.linear(x, w["lm_head.weight"])
    return F.cross_entropy(logits.reshape(R * T, -1), tgt.reshape(-1))


def step(cfg, weights, docs, schedule, T, dtype=torch.float32, lora=None, lora_scale=1.0):
    """(loss, {name: grad}) of one cross-batch step; weights: dict of HF-named tensors. Without lora: every
    weight's gradient; with lora ({module: (A, B)}): the base frozen, the gradients of "<module>.lora_A" / "_B"."""
    K, rows = parse_schedule(schedule)
    inp, tgt = rows_of(docs, K, T)
    vis = visibility(K, rows, len(docs))
    train = lora is None
    w = {n: t.detach().to(dtype).clone().requires_grad_(train) for n, t in weights.items()}
    ad = None if train else {n: tuple(x.detach().to(dtype).clone().requires_grad_(True) for x in ab)
                             for n, ab in lora.items()}
    loss = loss_fn(cfg, w, inp, tgt, vis, dtype, ad, lora_scale)
    loss.backward()
    if train:
        return loss.detach(), {n: t.grad.detach() for n, t in w.items()}
    grads = {}
    for n, (a, b) in ad.items():
        grads[n + ".lora_A"], grads[n + ".lora_B"] = a.grad.detach(), b.grad.detach()
    return loss.detach(), grads
