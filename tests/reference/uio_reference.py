#!/usr/bin/env python3
"""A small PyTorch reference of UIO-LLMs inference, written for mnemo's tests from
the reference code wenhaoli-xmu/UIO-LLMs @d486c3e
and the UIO-LLMs paper. No code is copied from the reference; function names below refer to its
src/modifiers/modify_llama_ccf.py and src/modifier.py, where the facts were confirmed.

Model = a base LLaMA (HF LlamaForCausalLM weights: pre-RMSNorm blocks, rotate_half RoPE, SwiGLU MLP, final
RMSNorm, lm_head) + UIO weights:
  retrieval_token (1,1,H)    the learned <mem> embedding: ONE vector, repeated for all M slots of a segment
  encoder LoRA on q_proj, v_proj of every layer: A (r, H), B (out, r), scale s = lora_alpha / lora_rank
  repeat_token (1,1,H)       stored in the checkpoint, unused by inference (the reference prepends it only in
                             its copy/auto-encoding task, `prefix_repeat_token=True`)
  transfer-head LoRA on k_proj, v_proj of every layer: A (r, H), B (kv_dim, r), same scale s
  config: chunk_size C (segment length), num_memory M (<mem> slots per segment), c = C / M (C % M == 0).
A LoRA'd projection is y = x W^T + s * (x A^T) B^T (peft's Linear with dropout 0).

Encoder (encode_segment; reference Encoder.forward + encoder_attn_forward): input = embed(segment) (C tokens)
followed by M copies of retrieval_token; the base model with encoder LoRA on q and v for ALL C+M tokens (k plain).
  positions: ordinary token t at RoPE position t (0..C-1); <mem> slot i at (i+1)*c  (slot M-1 at C).
  mask: ordinary token t sees ordinary tokens 0..t (causal) and no <mem>; <mem> slot i sees ordinary tokens
        [0, (i+1)*c) and itself, no other <mem>.
  scores q.k / sqrt(head_dim) (the reference writes sqrt(128) = sqrt(head_dim) of LLaMA-2-7B), fp softmax.
  Each segment is encoded alone: the encoder never sees memory or earlier segments.
  Kept per layer l: h_l = RMSNorm_l(x_l)[C:C+M], the attention INPUT (after the layer's input RMSNorm) at the M
  <mem> positions (M, H). The encoder's output logits are never used.
Transfer head (memory_kv): memory K_l = h_l (Wk_l + s Bk_l Ak_l)^T, V_l = h_l (Wv_l + s Bv_l Av_l)^T, computed
  once per segment, stored BEFORE RoPE like every cached key.
Decoder (the base model, plain weights for ordinary tokens; q_proj never has LoRA) per layer attends over the
  concatenation [memory slots of all earlier segments, in order | raw cache | new tokens]; with N the total
  length, key j sits at RoPE position j (memory slot j at j, raw tokens from M_total on), the n new queries at
  N-n..N-1; causal with the new queries aligned at the end (new query i sees keys 0..N-n+i). RoPE is applied at
  attention time to the pre-RoPE cached keys, so positions of raw tokens shift down when memory replaces them.
  GQA (not in the reference, whose attention asserts kv heads == q heads): kv head g serves q heads
  g*rep..(g+1)*rep-1 (repeat_kv), in the encoder and the decoder alike.
Session (EncoderDecoder.forward + transfer_kv_cache): step(ids) with len(ids) <= C
  1. decoder on ids over [memory | raw | ids] -> logits for every id; the new K (pre-RoPE) and V join the raw cache;
  2. ids join the accumulator; while the accumulator holds >= C tokens: its first C tokens are encoded, M memory
     slots are appended to every layer's memory, those C tokens leave the accumulator and THEIR raw K/V leave
     the raw cache (the first C raw entries: raw cache == accumulator at all times).
  So the decoder runs on an input before that input is compressed.
feed(ids) (one call of any length) = step() on slices cut where the accumulator reaches C: the first slice has
  min(len, C - len(acc)) ids, then C at a time. It therefore equals feeding the ids one at a time, and equals the
  reference's generate() prefill (which cuts the prompt from a fresh state into C-slices: the same cuts).
  Note: the reference's transfer_kv_cache drops the LAST C raw entries; with these aligned cuts the raw cache
  holds exactly C tokens whenever compression runs, so "last C" == "first C" == all of them. Unaligned calls
  (which the reference never makes in generate) follow the spec: the compressed tokens' raw K/V are dropped.
generate(prompt, n) (SegmentRecurrentModifier.generate): fresh session; prompt[:-1] fed in C-slices from its
  start; then the last prompt token alone; greedy argmax; each generated token is fed (decoder, raw cache,
  accumulator, compression when the accumulator reaches C) to produce the next; stop after n new tokens or
  after EOS (id 2 unless told); the last new token is not fed.

Beyond the reference, mnemo's kNN memory (session(budget=B), B > 0): the reference's RoPE table
bounds memory + raw (4096 positions). With a memory budget B, after every compression the oldest mem_slots - B
memory slots of every layer leave [memory | raw] for a per-layer STORE, and stay there for good. The decoder then
attends over [store | memory | raw | new] in one softmax: memory, raw and new keep positions 0..N_local-1 exactly as
above (the remaining memory slots shift down: their keys are pre-RoPE, so they are simply rotated at the new
positions), and every store slot sits at RoPE position 0 — unrotated, as LongLLaMA's memory keys — seen by every
query (no causal mask: all of it is older than any query). This is the DENSE statement; mnemo's top-k retrieval
(mem_knn_k = k) keeps, per query and head, the k store slots of largest q_rot . k (k >= the store: this statement).
B = 0 or B >= every slot ever made: the reference itself (no slot ever leaves).

Raw tokens kept beside the memory, beyond the reference (keep_raw W, 0 <= W <= C; W = 0 is everything above, unchanged):
  "keep the last W raw tokens after a compression so the next token does not see only memory". When a segment is
  compressed, the raw K/V of its LAST W tokens stay in the raw cache (ahead of any raw tokens that follow them);
  the rest of its raw K/V leave as before. The accumulator is unchanged (the kept tokens are never compressed
  again), so the raw cache now holds [kept | accumulator]. Positions follow the rule above, key j at position j
  over [memory | raw | new]: the kept tokens sit right after the memory, at M_total .. M_total + W - 1, their
  pre-RoPE keys rotated there at attention time. A context needs M_total + W + C positions before a compression.

Options (a) and (b) are stated independently; this code would also run them together (the kept tokens simply
follow the remaining memory slots), but mnemo refuses keep_raw W > 0 with a budget B > 0, so no fixture checks it.

Everything runs in one dtype (float32 or float64), on the CPU.
"""
import json
import math
import os

import torch

REF_KEYS = ("num_memory", "lora_rank", "lora_alpha", "lora_dropout", "chunk_size")


# ----------------------------------------------------------------------------------------------- base model
class BaseModel:
    """LLaMA weights (HF names) and the config fields the forward needs."""

    def __init__(self, config, weights, dtype=torch.float32):
        c = config
        self.H = c["hidden_size"]
        self.n_layers = c["num_hidden_layers"]
        self.n_heads = c["num_attention_heads"]
        self.n_kv = c.get("num_key_value_heads") or self.n_heads
        self.hd = c.get("head_dim") or self.H // self.n_heads
        assert self.n_heads % self.n_kv == 0
        assert self.hd % 2 == 0, "rotate_half RoPE needs an even head_dim"
        self.eps = c.get("rms_norm_eps", 1e-6)
        rp = c.get("rope_parameters") or {}
        self.theta = float(rp.get("rope_theta", c.get("rope_theta", 10000.0)))
        assert c.get("rope_scaling") is None and rp.get("rope_type", "default") == "default", \
            "only unscaled RoPE (the fixtures' bases)"
        self.vocab = c["vocab_size"]
        self.dtype = dtype
        w = {k: v.to(dtype) for k, v in weights.items()}
        self.embed = w["model.embed_tokens.weight"]
        self.lm_head = w["lm_head.weight"] if "lm_head.weight" in w else self.embed
        self.norm = w["model.norm.weight"]
        self.layers = []
        for l in range(self.n_layers):
            p = "model.layers.%d." % l
            self.layers.append({k: w[p + n] for k, n in [
                ("in_norm", "input_layernorm.weight"), ("post_norm", "post_attention_layernorm.weight"),
                ("wq", "self_attn.q_proj.weight"), ("wk", "self_attn.k_proj.weight"),
                ("wv", "self_attn.v_proj.weight"), ("wo", "self_attn.o_proj.weight"),
                ("gate", "mlp.gate_proj.weight"), ("up", "mlp.up_proj.weight"), ("down", "mlp.down_proj.weight")]})
        self.inv_freq = 1.0 / (self.theta ** (torch.arange(0, self.hd, 2, dtype=torch.float64) / self.hd))

    @classmethod
    def from_dir(cls, model_dir, dtype=torch.float32):
        from safetensors.torch import load_file
        with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
            config = json.load(f)
        return cls(config, load_file(os.path.join(model_dir, "model.safetensors")), dtype)

    def rms(self, x, w):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))

    def rope(self, x, pos):
        """x (heads, n, hd), pos (n,) integer positions -> rotated x (HF rotate_half convention)."""
        f = pos.to(torch.float64)[:, None] * self.inv_freq[None, :]
        emb = torch.cat([f, f], dim=-1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        x1, x2 = x[..., : self.hd // 2], x[..., self.hd // 2:]
        return x * cos + torch.cat([-x2, x1], dim=-1) * sin

    def attend(self, q, k, v, q_pos, k_pos, allowed):
        """q (n, n_heads*hd), k/v (N, n_kv*hd) pre-RoPE, allowed (n, N) bool -> (n, n_heads*hd)."""
        n, N = q.shape[0], k.shape[0]
        q = self.rope(q.view(n, self.n_heads, self.hd).transpose(0, 1), q_pos)
        k = self.rope(k.view(N, self.n_kv, self.hd).transpose(0, 1), k_pos)
        v = v.view(N, self.n_kv, self.hd).transpose(0, 1)
        rep = self.n_heads // self.n_kv
        k = k.repeat_interleave(rep, dim=0)          # (n_heads, N, hd): q head h uses kv head h // rep
        v = v.repeat_interleave(rep, dim=0)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(self.hd)
        s = s.masked_fill(~allowed[None], float("-inf"))
        p = torch.softmax(s, dim=-1)
        return (p @ v).transpose(0, 1).reshape(n, self.n_heads * self.hd)

    def mlp(self, L, x):
        hn = self.rms(x, L["post_norm"])
        return (torch.nn.functional.silu(hn @ L["gate"].T) * (hn @ L["up"].T)) @ L["down"].T

    def logits(self, x):
        return self.rms(x, self.norm) @ self.lm_head.T

    def plain_forward(self, ids):
        """The base model alone on ids (positions 0..n-1, causal): for the self-checks."""
        ids = torch.as_tensor(ids, dtype=torch.long)
        n = len(ids)
        x = self.embed[ids]
        pos = torch.arange(n)
        allowed = torch.ones(n, n, dtype=torch.bool).tril()
        for L in self.layers:
            hn = self.rms(x, L["in_norm"])
            a = self.attend(hn @ L["wq"].T, hn @ L["wk"].T, hn @ L["wv"].T, pos, pos, allowed)
            x = x + a @ L["wo"].T
            x = x + self.mlp(L, x)
        return self.logits(x)


# ----------------------------------------------------------------------------------------------- UIO weights
class UioWeights:
    """UIO parameters in the reference's shapes. Lists are indexed by layer."""

    ENC = ("q_proj", "v_proj")
    DEC = ("k_proj", "v_proj")

    def __init__(self, config, retrieval_token, enc, repeat_token, dec):
        self.config = {k: config[k] for k in REF_KEYS}
        self.retrieval_token = retrieval_token     # (1, 1, H)
        self.enc = enc                             # [ {"q_proj": (A, B), "v_proj": (A, B)} per layer ]
        self.repeat_token = repeat_token           # (1, 1, H)
        self.dec = dec                             # [ {"k_proj": (A, B), "v_proj": (A, B)} per layer ]
        r, alpha = self.config["lora_rank"], self.config["lora_alpha"]
        self.scale = alpha / r
        assert self.config["chunk_size"] % self.config["num_memory"] == 0, "chunk_size must be a multiple of M"

    def as_list(self):
        """The reference checkpoint order (CCF.ft_params = Encoder.ft_params + Decoder.ft_params)."""
        out = [self.retrieval_token]
        for e in self.enc:
            out += [e["q_proj"][0], e["q_proj"][1], e["v_proj"][0], e["v_proj"][1]]
        out.append(self.repeat_token)
        for d in self.dec:
            out += [d["k_proj"][0], d["k_proj"][1], d["v_proj"][0], d["v_proj"][1]]
        return out

    @classmethod
    def from_list(cls, config, tensors):
        n = (len(tensors) - 2) // 8
        assert len(tensors) == 2 + 8 * n, "a UIO checkpoint holds 2 + 8 * n_layers tensors, got %d" % len(tensors)
        t = [x.detach() for x in tensors]
        enc = [{"q_proj": (t[1 + 4 * l], t[2 + 4 * l]), "v_proj": (t[3 + 4 * l], t[4 + 4 * l])} for l in range(n)]
        o = 2 + 4 * n
        dec = [{"k_proj": (t[o + 4 * l], t[o + 1 + 4 * l]), "v_proj": (t[o + 2 + 4 * l], t[o + 3 + 4 * l])}
               for l in range(n)]
        return cls(config, t[0], enc, t[1 + 4 * n], dec)

    def as_named(self):
        """mnemo's uio.safetensors names."""
        out = {"encoder.retrieval_token": self.retrieval_token, "decoder.repeat_token": self.repeat_token}
        for l, e in enumerate(self.enc):
            for p in self.ENC:
                out["encoder.layers.%d.%s.lora_A" % (l, p)] = e[p][0]
                out["encoder.layers.%d.%s.lora_B" % (l, p)] = e[p][1]
        for l, d in enumerate(self.dec):
            for p in self.DEC:
                out["decoder.layers.%d.%s.lora_A" % (l, p)] = d[p][0]
                out["decoder.layers.%d.%s.lora_B" % (l, p)] = d[p][1]
        return out

    @classmethod
    def from_named(cls, config, t):
        n = sum(1 for k in t if k.startswith("encoder.layers.") and k.endswith("q_proj.lora_A"))
        assert len(t) == 2 + 8 * n, "uio.safetensors: expected %d tensors, got %d" % (2 + 8 * n, len(t))
        enc = [{p: (t["encoder.layers.%d.%s.lora_A" % (l, p)], t["encoder.layers.%d.%s.lora_B" % (l, p)])
                for p in cls.ENC} for l in range(n)]
        dec = [{p: (t["decoder.layers.%d.%s.lora_A" % (l, p)], t["decoder.layers.%d.%s.lora_B" % (l, p)])
                for p in cls.DEC} for l in range(n)]
        return cls(config, t["encoder.retrieval_token"], enc, t["decoder.repeat_token"], dec)

    @classmethod
    def from_dir(cls, uio_dir):
        """uio_config.json + uio.safetensors (preferred when both exist) or uio.pth."""
        with open(os.path.join(uio_dir, "uio_config.json"), encoding="utf-8") as f:
            config = json.load(f)
        st = os.path.join(uio_dir, "uio.safetensors")
        if os.path.exists(st):
            from safetensors.torch import load_file
            return cls.from_named(config, load_file(st))
        return cls.from_list(config, torch.load(os.path.join(uio_dir, "uio.pth"), map_location="cpu",
                                                weights_only=True))

    def check_shapes(self, base):
        H, kvd, qd = base.H, base.n_kv * base.hd, base.n_heads * base.hd
        r = self.config["lora_rank"]
        assert len(self.enc) == len(self.dec) == base.n_layers
        assert tuple(self.retrieval_token.shape) == (1, 1, H) and tuple(self.repeat_token.shape) == (1, 1, H)
        for e, d in zip(self.enc, self.dec):
            assert tuple(e["q_proj"][0].shape) == (r, H) and tuple(e["q_proj"][1].shape) == (qd, r)
            assert tuple(e["v_proj"][0].shape) == (r, H) and tuple(e["v_proj"][1].shape) == (kvd, r)
            assert tuple(d["k_proj"][0].shape) == (r, H) and tuple(d["k_proj"][1].shape) == (kvd, r)
            assert tuple(d["v_proj"][0].shape) == (r, H) and tuple(d["v_proj"][1].shape) == (kvd, r)


# ----------------------------------------------------------------------------------------------- UIO model
class UioRef:
    def __init__(self, base, uio, keep_raw=0):
        uio.check_shapes(base)
        self.base = base
        dt = base.dtype
        self.C = uio.config["chunk_size"]
        self.M = uio.config["num_memory"]
        self.c = self.C // self.M
        assert 0 <= keep_raw <= self.C, "keep_raw must be 0..chunk_size"
        self.W = keep_raw                               # option (a); 0 = the reference
        self.s = uio.scale
        self.mem_vec = uio.retrieval_token.reshape(-1).to(dt)
        self.enc = [{p: (a.to(dt), b.to(dt)) for p, (a, b) in e.items()} for e in uio.enc]
        self.dec = [{p: (a.to(dt), b.to(dt)) for p, (a, b) in d.items()} for d in uio.dec]

    def lora(self, x, W, AB):
        A, B = AB
        return x @ W.T + self.s * ((x @ A.T) @ B.T)

    def encoder_layout(self, n_ord):
        """Positions (n_ord + M,) and the allowed mask (n_ord + M, n_ord + M) of the encoder."""
        M, c = self.M, n_ord // self.M
        pos = torch.cat([torch.arange(n_ord), (torch.arange(M) + 1) * c])
        allowed = torch.zeros(n_ord + M, n_ord + M, dtype=torch.bool)
        allowed[:n_ord, :n_ord] = torch.ones(n_ord, n_ord, dtype=torch.bool).tril()
        for i in range(M):
            allowed[n_ord + i, : (i + 1) * c] = True
            allowed[n_ord + i, n_ord + i] = True
        return pos, allowed

    def encode_segment(self, seg_ids):
        """seg_ids (C,) -> [h_l (M, H) per layer]: the normed attention inputs at the <mem> positions."""
        b = self.base
        seg_ids = torch.as_tensor(seg_ids, dtype=torch.long)
        assert len(seg_ids) == self.C
        x = torch.cat([b.embed[seg_ids], self.mem_vec[None, :].expand(self.M, -1)], dim=0)
        pos, allowed = self.encoder_layout(self.C)
        hs = []
        for L, E in zip(b.layers, self.enc):
            hn = b.rms(x, L["in_norm"])
            hs.append(hn[self.C:].clone())
            q = self.lora(hn, L["wq"], E["q_proj"])
            k = hn @ L["wk"].T
            v = self.lora(hn, L["wv"], E["v_proj"])
            x = x + b.attend(q, k, v, pos, pos, allowed) @ L["wo"].T
            x = x + b.mlp(L, x)
        return hs

    def memory_kv(self, hs):
        """Transfer head: [h_l] -> [(K_l pre-RoPE (M, kv_dim), V_l (M, kv_dim))]."""
        return [(self.lora(h, L["wk"], D["k_proj"]), self.lora(h, L["wv"], D["v_proj"]))
                for h, L, D in zip(hs, self.base.layers, self.dec)]

    def session(self, budget=0):
        return UioSession(self, budget)

    def generate(self, prompt, max_new_tokens, eos=(2,), on_step=None, budget=0):
        """Reference generate(): returns (new token ids, list of logits rows that chose them, session)."""
        sess = self.session(budget)
        prompt = list(prompt)
        ctx = prompt[:-1]
        for s in range(0, len(ctx), self.C):            # the reference's chunker: C-slices from the start
            sess.step(ctx[s: s + self.C])
        tok, new, rows = prompt[-1], [], []
        while len(new) < max_new_tokens:
            lg = sess.step([tok])[-1]
            rows.append(lg)
            tok = int(torch.argmax(lg))
            new.append(tok)
            if on_step is not None:
                on_step(sess)
            if tok in eos:
                break
        return new, rows, sess


class UioSession:
    """Decoder cache per layer: memory K/V (pre-RoPE), raw K/V (pre-RoPE); accumulator of token ids."""

    def __init__(self, model, budget=0):
        self.m = model
        self.budget = budget  # mnemo's option (b): memory slots kept before the store (0: no store)
        b = model.base
        kvd = b.n_kv * b.hd
        z = lambda: torch.zeros(0, kvd, dtype=b.dtype)  # noqa: E731
        self.store_k = [z() for _ in range(b.n_layers)]
        self.store_v = [z() for _ in range(b.n_layers)]
        self.mem_k = [z() for _ in range(b.n_layers)]
        self.mem_v = [z() for _ in range(b.n_layers)]
        self.raw_k = [z() for _ in range(b.n_layers)]
        self.raw_v = [z() for _ in range(b.n_layers)]
        self.acc = []
        self.n_kept = 0       # option (a): raw entries kept from the last compression, ahead of the accumulator's
        self.n_fed = 0
        self.events = []      # one per compression: sizes after it
        self.memories = []    # one per compression: (hs, kv)

    @property
    def mem_slots(self):
        return self.mem_k[0].shape[0]

    @property
    def store_slots(self):
        return self.store_k[0].shape[0]

    @property
    def raw_tokens(self):
        return self.raw_k[0].shape[0]

    def decode(self, ids):
        """Decoder on new ids over [memory | raw | new]; appends their K/V to the raw cache."""
        b = self.m.base
        ids = torch.as_tensor(ids, dtype=torch.long)
        n = len(ids)
        x = b.embed[ids]
        for l, L in enumerate(b.layers):
            hn = b.rms(x, L["in_norm"])
            q, k, v = hn @ L["wq"].T, hn @ L["wk"].T, hn @ L["wv"].T
            K = torch.cat([self.store_k[l], self.mem_k[l], self.raw_k[l], k])
            V = torch.cat([self.store_v[l], self.mem_v[l], self.raw_v[l], v])
            S = self.store_slots                   # option (b): store slots at position 0, always visible
            N = K.shape[0] - S
            local = torch.arange(N)
            k_pos = torch.cat([torch.zeros(S, dtype=torch.long), local])
            q_pos = local[N - n:]
            allowed = torch.cat([torch.ones(n, S, dtype=torch.bool), local[None, :] <= q_pos[:, None]], dim=1)
            x = x + b.attend(q, K, V, q_pos, k_pos, allowed) @ L["wo"].T
            x = x + b.mlp(L, x)
            self.raw_k[l] = torch.cat([self.raw_k[l], k])
            self.raw_v[l] = torch.cat([self.raw_v[l], v])
        return b.logits(x)

    def compress(self):
        m = self.m
        seg, self.acc = self.acc[: m.C], self.acc[m.C:]
        assert self.raw_tokens == self.n_kept + len(seg) + len(self.acc), "raw cache and accumulator out of step"
        hs = m.encode_segment(seg)
        kv = m.memory_kv(hs)
        drop = self.n_kept + m.C - m.W                   # raw cache: [kept | seg | rest]: keep seg[C-W:] and rest
        for l, (k, v) in enumerate(kv):
            self.mem_k[l] = torch.cat([self.mem_k[l], k])
            self.mem_v[l] = torch.cat([self.mem_v[l], v])
            self.raw_k[l] = self.raw_k[l][drop:]         # the compressed tokens' raw K/V leave (but the last W)
            self.raw_v[l] = self.raw_v[l][drop:]
            e = self.mem_k[l].shape[0] - self.budget     # option (b): the oldest slots past the budget leave
            if self.budget and e > 0:
                self.store_k[l] = torch.cat([self.store_k[l], self.mem_k[l][:e]])
                self.store_v[l] = torch.cat([self.store_v[l], self.mem_v[l][:e]])
                self.mem_k[l], self.mem_v[l] = self.mem_k[l][e:], self.mem_v[l][e:]
        self.n_kept = m.W
        self.memories.append((hs, kv))
        ev = {"after_tokens": self.n_fed, "segment": len(self.events), "mem_slots": self.mem_slots,
              "raw_tokens": self.raw_tokens, "acc_tokens": len(self.acc)}
        if self.budget:
            ev["store_slots"] = self.store_slots
        self.events.append(ev)

    def step(self, ids):
        """Reference EncoderDecoder.forward: decoder first, then accumulate and compress."""
        ids = [int(t) for t in ids]
        assert 0 < len(ids) <= self.m.C
        logits = self.decode(ids)
        self.n_fed += len(ids)
        self.acc += ids
        while len(self.acc) >= self.m.C:
            self.compress()
        return logits

    def feed(self, ids):
        """One call of any length: slices cut where the accumulator reaches C (== one token at a time)."""
        ids = [int(t) for t in ids]
        out, i = [], 0
        while i < len(ids):
            n = min(len(ids) - i, self.m.C - len(self.acc))
            out.append(self.step(ids[i: i + n]))
            i += n
        return torch.cat(out) if out else torch.zeros(0, self.m.base.vocab, dtype=self.m.base.dtype)

    def state(self):
        st = {"tokens_fed": self.n_fed, "mem_slots": self.mem_slots, "raw_tokens": self.raw_tokens,
              "acc_tokens": len(self.acc), "segments_compressed": len(self.events)}
        if self.budget:
            st["store_slots"] = self.store_slots
        return st


# ----------------------------------------------------------------------------------------------- CLI
def _read_logits(path):
    """MNFXLGT1 records (tests/reference/README.md) -> list of (rows, vocab) float32 tensors."""
    import struct
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"MNFXLGT1", "%s: not an MNFXLGT1 file" % path
    version, n = struct.unpack_from("<II", data, 8)
    assert version == 1
    out, o = [], 16
    for _ in range(n):
        r, v = struct.unpack_from("<II", data, o)
        o += 8
        out.append(torch.frombuffer(bytearray(data[o: o + 4 * r * v]), dtype=torch.float32).view(r, v))
        o += 4 * r * v
    return out


def main(argv=None):
    """Replay a UIO model on ids: print the greedy continuation and the compressions; optionally compare the
    logits of every fed token with an MNFXLGT1 file (e.g. mnemo's) or write them."""
    import argparse
    import struct
    import sys
    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("model_dir", help="base LLaMA directory (config.json, model.safetensors)")
    ap.add_argument("uio_dir", help="uio_config.json + uio.safetensors or uio.pth")
    ap.add_argument("--ids", help="comma-separated prompt ids")
    ap.add_argument("--reference", help="a fixture reference.json: take its prompt and greedy length")
    ap.add_argument("--new", type=int, default=0, help="greedy tokens to generate")
    ap.add_argument("--dtype", choices=["float32", "float64"], default="float64")
    ap.add_argument("--logits", help="MNFXLGT1 file whose first record holds the rows of prompt + greedy[:-1]")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--budget", type=int, default=0,
                    help="mnemo's option (b): memory slots kept before the store (0: the reference)")
    ap.add_argument("--write", help="write the rows of prompt + greedy[:-1] as MNFXLGT1")
    ap.add_argument("--keep-raw", type=int, default=0, help="option (a): raw tokens kept after a compression")
    a = ap.parse_args(argv)
    n_new = a.new
    if a.reference:
        with open(a.reference, encoding="utf-8") as f:
            ref = json.load(f)
        ids, n_new = ref["prompt"]["ids"], a.new or len(ref["greedy"])
    else:
        ids = [int(t) for t in a.ids.split(",")]
    dt = {"float32": torch.float32, "float64": torch.float64}[a.dtype]
    model = UioRef(BaseModel.from_dir(a.model_dir, dt), UioWeights.from_dir(a.uio_dir), keep_raw=a.keep_raw)
    new = []
    if n_new:
        new, _, _ = model.generate(ids, n_new, budget=a.budget)
    sess = model.session(a.budget)
    rows = sess.feed(ids + new[:-1])
    print("greedy:", ",".join(map(str, new)))
    for e in sess.events:
        print("compression: after %(after_tokens)d tokens -> mem_slots %(mem_slots)d raw %(raw_tokens)d" % e)
    if a.write:
        with open(a.write, "wb") as f:
            f.write(b"MNFXLGT1" + struct.pack("<III", 1, 1, rows.shape[0], rows.shape[1]))
            f.write(rows.to(torch.float32).numpy().astype("<f4").tobytes())
    if a.logits:
        other = _read_logits(a.logits)[0]
        assert other.shape == rows.shape, "shape %s, expected %s" % (tuple(other.shape), tuple(rows.shape))
        d = (other.double() - rows.double()).abs().max().item()
        print("max |dlogit| = %.3g (tol %g)" % (d, a.tol))
        return 0 if d <= a.tol else 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
