"""Retrieval memory (InfLLM, arXiv 2402.04617) over a plain LLaMA, stated in float64 numpy.

The statement mnemo's retrieval memory (engine/src/memory/retrieval_*.c) is checked against
(make_retrieval_fixtures.py writes the fixture, tests/unit/test_retrieval_memory.c compares).
It keeps every key before RoPE and rotates at attention time, where the engine keeps its cache
rotated and rotates the window again when it shifts: the same numbers, reached another way.

Per layer:
  cache rows [0, S) the first S tokens (sinks), rows [S, n_rows) the local window; a query's RoPE
  position is its row, and so is a cached key's.
  Before a step of n tokens, while n_rows + n > S + W, the oldest B window tokens leave as one
  block (blocks_due); the window shifts down to row S.
  A block keeps, per KV head, its tokens' keys before RoPE and values, and the sum of its r
  representative keys: the r tokens whose keys get the largest logits (summed over the KV head's
  query heads) from the B queries that follow each, itself included, as far as they are still in
  the cache, at their true relative distances; ties to the earlier token.
  Retrieval: per KV head, the step's queries (every query, every query head of the KV head,
  rotated at their rows) are summed into qs; block b scores qs . R(P) rsum_b with P = S - 1
  (0 when S = 0); the top k (ties to the lower block) are attended, their keys rotated at P.
  Attention: one softmax over [cache rows <= the query's row | retrieved tokens].
"""
import json
import struct

import numpy as np


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in head.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", name
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype="<f4").reshape(t["shape"]).astype(np.float64)
    return out


class Model:
    def __init__(self, model_dir):
        with open(f"{model_dir}/config.json") as f:
            c = json.load(f)
        self.L = c["num_hidden_layers"]
        self.hq = c["num_attention_heads"]
        self.hkv = c["num_key_value_heads"]
        self.hd = c.get("head_dim") or c["hidden_size"] // self.hq
        self.eps = c["rms_norm_eps"]
        self.theta = c.get("rope_theta", 10000.0)
        scaling = c.get("rope_scaling") or {}
        linear = scaling.get("type", scaling.get("rope_type")) == "linear"
        self.pos_scale = scaling.get("factor", 1.0) if linear else 1.0
        w = load_safetensors(f"{model_dir}/model.safetensors")
        self.w = w
        self.lm_head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
        half = self.hd // 2
        self.inv_freq = 1.0 / self.theta ** (np.arange(half) * 2.0 / self.hd) / self.pos_scale

    def rope(self, x, pos):
        """x [..., hd] rotated (HF rotate_half) at positions pos (broadcast over x's leading axes)."""
        ang = np.asarray(pos, dtype=np.float64)[..., None] * self.inv_freq
        c, s = np.cos(ang), np.sin(ang)
        half = self.hd // 2
        a, b = x[..., :half], x[..., half:]
        return np.concatenate([a * c - b * s, b * c + a * s], axis=-1)

    def rmsnorm(self, x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + self.eps) * w


class RetrievalMemory:
    """One context: the cache (keys before RoPE), the memory, and the steps that fill them."""

    def __init__(self, m, S, W, k, B, r):
        self.m, self.S, self.W, self.k, self.B, self.r = m, S, W, k, B, r
        self.P = S - 1 if S > 0 else 0
        rows = S + W
        self.kpre = np.zeros((m.L, rows, m.hkv, m.hd))
        self.v = np.zeros((m.L, rows, m.hkv, m.hd))
        self.qsum = np.zeros((m.L, rows, m.hkv, m.hd))  # per row: its query heads' sum before RoPE
        self.mem_k = [np.zeros((0, m.hkv, m.hd)) for _ in range(m.L)]
        self.mem_v = [np.zeros((0, m.hkv, m.hd)) for _ in range(m.L)]
        self.reps = [np.zeros((0, m.hkv, m.hd)) for _ in range(m.L)]
        self.n_rows = 0
        self.margins = {"retrieval": np.inf, "representatives": np.inf}

    def blocks_due(self, n):
        over = self.n_rows + n - (self.S + self.W)
        return max(0, -(-over // self.B))

    def representatives(self, l, m0):
        m, B = self.m, self.B
        n_q = min(self.n_rows - m0, 2 * B - 1)
        out = np.zeros((m.hkv, m.hd))
        for g in range(m.hkv):
            keys = m.rope(self.kpre[l, m0:m0 + B, g], np.arange(B))
            qs = m.rope(self.qsum[l, m0:m0 + n_q, g], np.arange(n_q))
            score = np.array([sum(qs[t] @ keys[j] for t in range(j, min(j + B, n_q))) for j in range(B)])
            order = sorted(range(B), key=lambda j: (-score[j], j))
            if self.r < B:
                gap = score[order[self.r - 1]] - score[order[self.r]]
                self.margins["representatives"] = min(self.margins["representatives"], gap / (abs(score).max() + 1e-30))
            out[g] = self.kpre[l, m0 + np.array(order[:self.r]), g].sum(0)
        return out

    def evict(self, e):
        S, B = self.S, self.B
        moved = e * B
        for l in range(self.m.L):
            self.mem_k[l] = np.concatenate([self.mem_k[l], self.kpre[l, S:S + moved]])
            self.mem_v[l] = np.concatenate([self.mem_v[l], self.v[l, S:S + moved]])
            new = [self.representatives(l, S + j * B) for j in range(e)]
            self.reps[l] = np.concatenate([self.reps[l], np.array(new)])
        keep = self.n_rows - S - moved
        for a in (self.kpre, self.v, self.qsum):
            a[:, S:S + keep] = a[:, S + moved:S + moved + keep].copy()
        self.n_rows -= moved

    def attend(self, l, q, q_pos0):
        """q [n, hq, hd] before RoPE at rows q_pos0..; the cache already holds the step's rows."""
        m = self.m
        n, grp = q.shape[0], m.hq // m.hkv
        rows = np.arange(q_pos0, q_pos0 + n)
        qr = m.rope(q, rows[:, None])
        nkv = q_pos0 + n
        kr = m.rope(self.kpre[l, :nkv], np.arange(nkv)[:, None])
        vv = self.v[l, :nkv]
        nb = self.reps[l].shape[0]
        out = np.zeros_like(q)
        for g in range(m.hkv):
            keys, vals = kr[:, g], vv[:, g]
            mask = np.arange(nkv)[None, :] <= rows[:, None]
            if nb > 0:
                kk = min(self.k, nb)
                qs = qr[:, g * grp:(g + 1) * grp].sum((0, 1))
                score = m.rope(self.reps[l][:, g], self.P) @ qs
                order = sorted(range(nb), key=lambda b: (-score[b], b))
                if kk < nb:
                    gap = score[order[kk - 1]] - score[order[kk]]
                    self.margins["retrieval"] = min(self.margins["retrieval"], gap / (abs(score).max() + 1e-30))
                chosen = sorted(order[:kk])
                idx = np.concatenate([np.arange(b * self.B, (b + 1) * self.B) for b in chosen])
                keys = np.concatenate([keys, m.rope(self.mem_k[l][idx, g], self.P)])
                vals = np.concatenate([vals, self.mem_v[l][idx, g]])
                mask = np.concatenate([mask, np.ones((n, len(idx)), dtype=bool)], axis=1)
            for h in range(g * grp, (g + 1) * grp):
                s = qr[:, h] @ keys.T / np.sqrt(m.hd)
                s = np.where(mask, s, -np.inf)
                s = np.exp(s - s.max(1, keepdims=True))
                out[:, h] = (s / s.sum(1, keepdims=True)) @ vals
        return out

    def step(self, tokens):
        """One forward step (n <= W - B + 1 tokens): logits [n, vocab]."""
        m, w = self.m, self.m.w
        n = len(tokens)
        e = self.blocks_due(n)
        if e:
            self.evict(e)
        p0 = self.n_rows
        x = w["model.embed_tokens.weight"][np.array(tokens)]
        for l in range(m.L):
            pre = f"model.layers.{l}."
            xn = m.rmsnorm(x, w[pre + "input_layernorm.weight"])
            q = (xn @ w[pre + "self_attn.q_proj.weight"].T).reshape(n, m.hq, m.hd)
            k = (xn @ w[pre + "self_attn.k_proj.weight"].T).reshape(n, m.hkv, m.hd)
            v = (xn @ w[pre + "self_attn.v_proj.weight"].T).reshape(n, m.hkv, m.hd)
            self.kpre[l, p0:p0 + n], self.v[l, p0:p0 + n] = k, v
            self.qsum[l, p0:p0 + n] = q.reshape(n, m.hkv, m.hq // m.hkv, m.hd).sum(2)
            att = self.attend(l, q, p0).reshape(n, m.hq * m.hd)
            x = x + att @ w[pre + "self_attn.o_proj.weight"].T
            xn = m.rmsnorm(x, w[pre + "post_attention_layernorm.weight"])
            g_ = xn @ w[pre + "mlp.gate_proj.weight"].T
            u = xn @ w[pre + "mlp.up_proj.weight"].T
            x = x + (g_ / (1 + np.exp(-g_)) * u) @ w[pre + "mlp.down_proj.weight"].T
        self.n_rows += n
        return m.rmsnorm(x, w["model.norm.weight"]) @ m.lm_head.T

    def decode(self, tokens, step_max):
        """A call of any length, cut into steps of step_max tokens (mnemo_decode): logits of every token."""
        return np.concatenate([self.step(tokens[i:i + step_max]) for i in range(0, len(tokens), step_max)])

    def mem_tokens(self):
        return self.mem_k[0].shape[0]
