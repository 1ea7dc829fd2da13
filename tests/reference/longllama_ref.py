#!/usr/bin/env python3
"""A small PyTorch reference of LongLLaMA's (Focused Transformer) inference forward, written from
the LongLLaMA paper and modeling_longllama.py for mnemo's tests. Not a copy of the upstream code; the facts it relies on were
checked against CStanKonrad/long_llama src/modeling_longllama.py (function names below refer to that file).

Model: LLaMA blocks (pre-RMSNorm, attention, residual; RMSNorm, down(silu(gate(x)) * up(x)), residual; final
RMSNorm; lm_head), HF "rotate_half" RoPE, no GQA. Layers listed in `mem_layers` additionally own a memory of
(key, value) pairs. Everything runs in float32; memory is stored rounded to `mem_dtype` and read back as fp32.

Session state, per layer: local cache (K before RoPE, V, absolute position ids) and, for memory layers, memory
(K unrotated, V, both in mem_dtype).

prefill(ids, lcl) == LongLlamaForCausalLM.forward -> _handle_long_input:
  * absolute ids for the whole call: next = max(local ids) + 1 (0 without a local cache), ids next..next+L-1
    (_prepare_pos_ids is called once for the whole input).
  * prefix = the first max(L - lcl, 0) tokens, in chunks of W = max_position_embeddings.
      - fresh session (no local cache): every chunk runs with use_cache=False and no past ("chunk mode"):
        ordinary layers see the chunk causally; memory layers see the chunk causally + ALL memory (memory as
        it was before the chunk) in one softmax; afterwards the chunk's K (unrotated) and V are appended to the
        layer's memory (LongLlamaAttention.forward, mem_no_local_cache). RoPE ids are relative to the chunk's
        minimum id, i.e. each chunk starts at RoPE position 0. No local cache is created.
      - session that already has a local cache: the chunks go through the cached path below (use_cache=True
        because past_key_values is not None), so they can overflow the local cache into memory.
  * the last min(L, lcl) tokens: one call through the cached path.
decode(tok) == prefill([tok]) (an input of length 1 has no prefix).

Cached path (LongLlamaAttention.forward with use_cache): K, V, ids = cat(local, new). If the total exceeds
W, the ENTIRE old local cache (past_local_cache_size entries) is dropped before the attention: memory layers
append it to memory first (so it is visible through memory in this very call), ordinary layers lose it. The
new tokens then see each other causally (and the old local cache if it was not dropped). RoPE ids are
relative to min(ids in the current local cache), for keys and queries alike; memory keys use RoPE position 0
(identity) so they are stored unrotated. mem_positionals=False: memory layers apply no RoPE at all.

Scores q.k / sqrt(head_dim); masked entries get finfo.min, then scores are clamped from below at
max(finfo.min, -1e6) (== -1e6 in fp32); local and memory scores share ONE fp32 softmax.

kNN option (FoT §3.1; not in the released code): knn_k=k makes each memory-layer query (per head) see its
causal local keys plus only the top-k memory keys by inner product q.k_mem (q rotated exactly as the dense
path uses it against memory, memory keys unrotated and rounded to mem_dtype), merged in one softmax.
knn_k >= |memory| is identical to dense. Ties are broken by torch.topk; `min_knn_gap` tracks the smallest
(k-th minus (k+1)-th) inner product seen, so a caller can judge whether the selection is stable.
"""
import math

import torch
import torch.nn.functional as F

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


class Config:
    def __init__(self, d):
        self.vocab_size = d["vocab_size"]
        self.hidden_size = d["hidden_size"]
        self.intermediate_size = d["intermediate_size"]
        self.num_hidden_layers = d["num_hidden_layers"]
        self.num_attention_heads = d["num_attention_heads"]
        assert d.get("num_key_value_heads", self.num_attention_heads) == self.num_attention_heads, "no GQA"
        self.head_dim = self.hidden_size // self.num_attention_heads
        assert self.head_dim * self.num_attention_heads == self.hidden_size
        assert self.head_dim % 2 == 0, "rotate_half RoPE needs an even head_dim"
        self.max_position_embeddings = d["max_position_embeddings"]  # the window W
        self.rms_norm_eps = d.get("rms_norm_eps", 1e-6)
        self.rope_theta = d.get("rope_theta", 10000.0)
        assert d.get("rope_scaling") is None
        self.mem_layers = list(d.get("mem_layers", []))
        for i in self.mem_layers:
            assert 0 <= i < self.num_hidden_layers, f"mem layer {i} out of range"
        self.mem_positionals = d.get("mem_positionals", True)
        self.mem_dtype = DTYPES[d.get("mem_dtype", "bfloat16")]
        self.last_context_length = d.get("last_context_length", 1024)
        # qk_norm (mnemo's option, Qwen3's layout): every layer RMS-normalizes each head of q and k with its own
        # weights self_attn.q_norm / k_norm [head_dim] before RoPE and before the memory sees the keys
        self.qk_norm = d.get("qk_norm", False)


def rms_norm(x, w, eps):
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return w * xf.to(x.dtype)


class LongLlamaRef:
    """Weights: dict of HF-named fp32 tensors (model.embed_tokens.weight, model.layers.{i}.self_attn.q_proj.weight, ...)."""

    def __init__(self, cfg, weights):
        self.cfg = cfg
        self.w = {k: v.float() for k, v in weights.items()}
        d, W = cfg.head_dim, cfg.max_position_embeddings
        inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2).float() / d))
        ang = torch.outer(torch.arange(W).float(), inv)
        ang = torch.cat([ang, ang], dim=-1)  # rotate_half layout: element i pairs with i + d/2
        self.cos, self.sin = ang.cos(), ang.sin()

    def session(self, knn_k=None):
        return Session(self, knn_k)

    def rope(self, x, rel):  # x [H, n, d], rel [n] (relative ids, < W)
        h = x.shape[-1] // 2
        rot = torch.cat([-x[..., h:], x[..., :h]], dim=-1)
        return x * self.cos[rel] + rot * self.sin[rel]


class Session:
    def __init__(self, model, knn_k=None):
        self.m = model
        self.knn_k = knn_k
        n = model.cfg.num_hidden_layers
        self.local = [None] * n  # (k_raw [H,n,d], v [H,n,d], ids [n])
        self.mem = [None] * n  # (k [H,m,d], v [H,m,d]) in mem_dtype
        self.min_knn_gap = math.inf

    def mem_tokens(self):
        i = self.m.cfg.mem_layers[0] if self.m.cfg.mem_layers else None
        return 0 if i is None or self.mem[i] is None else self.mem[i][0].shape[1]

    def local_tokens(self):
        return 0 if self.local[0] is None else self.local[0][2].shape[0]

    # ---- public API ----
    def prefill(self, ids, last_context_length=None):
        cfg = self.m.cfg
        lcl = cfg.last_context_length if last_context_length is None else last_context_length
        assert 1 <= lcl <= cfg.max_position_embeddings
        L, W = len(ids), cfg.max_position_embeddings
        nxt = 0 if self.local[0] is None else int(self.local[0][2].max()) + 1
        pos = torch.arange(L) + nxt
        ids = torch.tensor(ids, dtype=torch.long)
        n_pre = max(L - lcl, 0)
        out = []
        for b in range(0, n_pre, W):
            e = min(n_pre, b + W)
            out.append(self._forward(ids[b:e], pos[b:e], cached=self.local[0] is not None))
        out.append(self._forward(ids[n_pre:], pos[n_pre:], cached=True))
        return torch.cat(out, dim=0)

    def decode(self, token):
        return self.prefill([int(token)])[-1]

    # ---- internals ----
    def _forward(self, ids, pos, cached):
        cfg, w = self.m.cfg, self.m.w
        x = w["model.embed_tokens.weight"][ids]
        for i in range(cfg.num_hidden_layers):
            p = f"model.layers.{i}."
            h = rms_norm(x, w[p + "input_layernorm.weight"], cfg.rms_norm_eps)
            x = x + self._attention(i, h, pos, cached)
            h = rms_norm(x, w[p + "post_attention_layernorm.weight"], cfg.rms_norm_eps)
            g = F.silu(F.linear(h, w[p + "mlp.gate_proj.weight"]))
            x = x + F.linear(g * F.linear(h, w[p + "mlp.up_proj.weight"]), w[p + "mlp.down_proj.weight"])
        x = rms_norm(x, w["model.norm.weight"], cfg.rms_norm_eps)
        return F.linear(x, w["lm_head.weight"])

    def _append_mem(self, i, k, v):
        dt = self.m.cfg.mem_dtype
        k, v = k.to(dt), v.to(dt)
        if self.mem[i] is None:
            self.mem[i] = (k, v)
        else:
            self.mem[i] = (torch.cat([self.mem[i][0], k], 1), torch.cat([self.mem[i][1], v], 1))

    def _attention(self, i, h, pos, cached):
        cfg, w = self.m.cfg, self.m.w
        H, d, n, W = cfg.num_attention_heads, cfg.head_dim, h.shape[0], cfg.max_position_embeddings
        p = f"model.layers.{i}.self_attn."
        q = F.linear(h, w[p + "q_proj.weight"]).view(n, H, d).transpose(0, 1)
        k = F.linear(h, w[p + "k_proj.weight"]).view(n, H, d).transpose(0, 1)
        v = F.linear(h, w[p + "v_proj.weight"]).view(n, H, d).transpose(0, 1)
        if cfg.qk_norm:
            q = rms_norm(q, w[p + "q_norm.weight"], cfg.rms_norm_eps)
            k = rms_norm(k, w[p + "k_norm.weight"], cfg.rms_norm_eps)
        is_mem = i in cfg.mem_layers
        use_rope = (not is_mem) or cfg.mem_positionals
        mem = self.mem[i] if is_mem else None  # memory visible to this call (chunk mode: before the chunk)

        if cached and self.local[i] is not None:
            lk, lv, lp = self.local[i]
            K, V, P = torch.cat([lk, k], 1), torch.cat([lv, v], 1), torch.cat([lp, pos])
            if K.shape[1] > W:  # overflow: drop the whole old local cache (memory layers: into memory first)
                n_old = lk.shape[1]
                if is_mem:
                    self._append_mem(i, lk, lv)
                    mem = self.mem[i]
                K, V, P = K[:, n_old:], V[:, n_old:], P[n_old:]
        else:
            K, V, P = k, v, pos
        if cached:
            self.local[i] = (K, V, P)

        m = K.shape[1]  # keys in the local part; the queries are its last n
        if use_rope:
            rel = P - P.min()
            qr, Kr = self.m.rope(q, rel[m - n:]), self.m.rope(K, rel)
        else:
            qr, Kr = q, K
        sd = math.sqrt(d)
        fmin = torch.finfo(torch.float32).min
        clamp = max(fmin, -1e6)
        s = (qr @ Kr.transpose(1, 2)) / sd  # [H, n, m]
        causal = torch.arange(m)[None, :] > (torch.arange(n)[:, None] + (m - n))
        s = torch.clamp(s + torch.where(causal, fmin, 0.0), min=clamp)
        vals = V
        if mem is not None:
            mk, mv = mem[0].float(), mem[1].float()
            dots = qr @ mk.transpose(1, 2)  # [H, n, M] inner products q.k_mem
            ms = torch.clamp(dots / sd, min=clamp)  # + mask 0 (no padding)
            M = mk.shape[1]
            if self.knn_k is not None:
                kk = min(self.knn_k, M)
                top = torch.topk(dots, min(kk + 1, M), dim=-1)
                if kk < M:
                    gap = float((top.values[..., kk - 1] - top.values[..., kk]).min())
                    self.min_knn_gap = min(self.min_knn_gap, gap)
                keep = torch.zeros_like(ms, dtype=torch.bool).scatter_(-1, top.indices[..., :kk], True)
                ms = torch.where(keep, ms, -math.inf)
            s = torch.cat([s, ms], dim=-1)
            vals = torch.cat([V, mv], dim=1)
        a = torch.softmax(s, dim=-1, dtype=torch.float32)
        o = (a @ vals).transpose(0, 1).reshape(n, H * d)
        if not cached and is_mem:  # chunk mode: the chunk goes to memory after its attention
            self._append_mem(i, k, v)
        return F.linear(o, w[p + "o_proj.weight"])
