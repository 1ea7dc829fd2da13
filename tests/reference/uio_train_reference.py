#!/usr/bin/env python3
"""PyTorch reference of UIO-LLMs training: the gradient of one document's segment losses with
respect to every UIO parameter, by full BPTT and by the paper's (unbiased) incremental TBPTT with a reservoir.
Written from the UIO-LLMs paper (3.3, appendices A and B) and its reference code
("Training"), on top of uio_reference.py's forward (the same model as inference). No code is copied.

Semantics (mnemo's engine/src/train/uio_train.h says the same):
  A document of n ids is cut into segments of C (the last may be shorter). For segment t = 0, 1, ...:
    1. decoder over [memory of segments 0..t-1 | segment t] (memory slot j at position j, token i at t*M + i);
       J_t = mean cross-entropy of seg[i+1] given seg[..i], i < len-1 (the reference's language-modelling task:
       a segment's first token is not predicted), backpropagated at once. The memory of segment s is a leaf
       (h_s: each layer's <mem> attention inputs, detached); the transfer head turns the leaves into K/V inside
       the step's graph, so its LoRA gets J_t's gradient directly. The gradient J_t gives each leaf is multiplied
       by the compensation factor max(1, t/S) (the paper's max(1, (t-1)/S) with 1-based t; appendix B's
       `factor = max(xid / S, 1)`) when compensation is on, and added to what the leaf had.
    2. unless t is the last segment, the encoder compresses it (h_t with its graph; a detached leaf copy).
    3. reservoir with S slots (train.py): t < S joins; else j = draw % (t+1); j < S: evict reservoir[j]
       (backward of its h with its leaf's gradient) and t takes slot j; else t's graph is dropped.
  After the last segment the reservoir is backpropagated, last slot first. S = None: full BPTT (no draws, no
  factor, every graph backpropagated at the end) = autograd of sum_t J_t (checked by full_bptt_autograd).
  Draws: splitmix64 from the given 64-bit state, one per compressed segment t >= S, in order.
"""
import torch

import uio_reference as U

MASK64 = (1 << 64) - 1


def splitmix64(state):
    """-> (new state, output), as uio_splitmix64 in C."""
    state = (state + 0x9E3779B97F4A7C15) & MASK64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return state, z ^ (z >> 31)


def leaf_weights(uio, dtype):
    """A copy of UioWeights whose tensors are leaves requiring grad, in dtype."""
    def leaf(x):
        return x.detach().to(dtype).clone().requires_grad_(True)
    enc = [{p: (leaf(a), leaf(b)) for p, (a, b) in e.items()} for e in uio.enc]
    dec = [{p: (leaf(a), leaf(b)) for p, (a, b) in d.items()} for d in uio.dec]
    return U.UioWeights(uio.config, leaf(uio.retrieval_token), enc, leaf(uio.repeat_token), dec)


def decode_loss(model, mem_kv, seg):
    """J_t: the decoder over [memory | seg]; mem_kv: per layer (K pre-RoPE, V) of all earlier memory rows."""
    b = model.base
    ids = torch.as_tensor(seg, dtype=torch.long)
    n = len(ids)
    P = mem_kv[0][0].shape[0] if mem_kv else 0
    x = b.embed[ids]
    k_pos = torch.arange(P + n)
    q_pos = k_pos[P:]
    allowed = k_pos[None, :] <= q_pos[:, None]
    for l, L in enumerate(b.layers):
        hn = b.rms(x, L["in_norm"])
        q, k, v = hn @ L["wq"].T, hn @ L["wk"].T, hn @ L["wv"].T
        if P:
            k, v = torch.cat([mem_kv[l][0], k]), torch.cat([mem_kv[l][1], v])
        x = x + b.attend(q, k, v, q_pos, k_pos, allowed) @ L["wo"].T
        x = x + b.mlp(L, x)
    logits = b.logits(x)
    return torch.nn.functional.cross_entropy(logits[:-1], ids[1:])


def segments(ids, C):
    return [list(ids[s: s + C]) for s in range(0, len(ids), C)]


def cat_kv(model, leaves):
    """Memory K/V per layer from the leaves of every earlier segment, concatenated in order."""
    if not leaves:
        return []
    per_seg = [model.memory_kv(hs) for hs in leaves]
    return [(torch.cat([p[l][0] for p in per_seg]), torch.cat([p[l][1] for p in per_seg]))
            for l in range(len(per_seg[0]))]


def tbptt_grads(base, uio, ids, slots=None, compensate=True, state=0, dtype=torch.float64):
    """Incremental TBPTT (slots None: full BPTT). -> (UioWeights of leaves with .grad, losses, evictions log)."""
    W = leaf_weights(uio, dtype)
    model = U.UioRef(base, W)
    C = model.C
    segs = segments(ids, C)
    T = len(segs)
    leaves, graphs, reservoir, losses, log = [], [], [], [], []
    for t, seg in enumerate(segs):
        if len(seg) > 1:
            old = [[h.grad for h in hs] for hs in leaves]
            for hs in leaves:
                for h in hs:
                    h.grad = None
            loss = decode_loss(model, cat_kv(model, leaves), seg)
            if loss.requires_grad:          # segment 0 reads no memory: nothing trainable in its graph
                loss.backward()
            losses.append(loss.item())
            f = max(1.0, t / slots) if (slots and compensate) else 1.0
            for hs, olds in zip(leaves, old):
                for h, o in zip(hs, olds):
                    g = h.grad if h.grad is not None else torch.zeros_like(h)
                    h.grad = g * f + (o if o is not None else 0)
        if t == T - 1:
            break
        hs = model.encode_segment(seg)
        graphs.append(hs)
        leaves.append([h.detach().clone().requires_grad_(True) for h in hs])

        def flush(e):
            grads = [h.grad if h.grad is not None else torch.zeros_like(h) for h in leaves[e]]
            torch.autograd.backward(graphs[e], grad_tensors=grads)
            graphs[e] = None
        if slots is None or t < slots:
            reservoir.append(t)
            continue
        state, z = splitmix64(state)
        j = z % (t + 1)
        if j < slots:
            e = reservoir[j]
            flush(e)
            reservoir[j] = t
            log.append({"segment": t, "draw_j": j, "evicted": e})
        else:
            graphs[t] = None
            log.append({"segment": t, "draw_j": j, "dropped": t})
    for e in reversed(reservoir):
        grads = [h.grad if h.grad is not None else torch.zeros_like(h) for h in leaves[e]]
        torch.autograd.backward(graphs[e], grad_tensors=grads)
    return W, losses, log


def full_bptt_autograd(base, uio, ids, dtype=torch.float64):
    """The same gradient as tbptt_grads(slots=None) by one graph: autograd of sum_t J_t."""
    W = leaf_weights(uio, dtype)
    model = U.UioRef(base, W)
    segs = segments(ids, model.C)
    mems, total = [], 0
    for t, seg in enumerate(segs):
        if len(seg) > 1:
            total = total + decode_loss(model, cat_kv(model, mems), seg)
        if t < len(segs) - 1:
            mems.append(model.encode_segment(seg))
    total.backward()
    return W


def named_grads(W):
    """mnemo's names -> gradient (zeros for a tensor nothing reached, e.g. repeat_token)."""
    out = {}
    for name, t in W.as_named().items():
        out[name] = t.grad.detach().clone() if t.grad is not None else torch.zeros_like(t)
    return out


def grad_norm(W):
    return float(torch.sqrt(sum((g.double() ** 2).sum() for g in named_grads(W).values())))
