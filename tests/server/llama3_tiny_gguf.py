"""A tiny random-weight LLaMA GGUF that carries a real vocabulary: every tokenizer.* key of a vocabulary-only GGUF
(llama.cpp's ggml-vocab-llama-bpe.gguf: Llama 3's 128256 tokens, 280147 merges, pre-tokenizer llama-bpe) copied
byte for byte, Meta's Llama 3 Instruct chat template added as tokenizer.chat_template, and 2 layers of hidden 64.
The 128K-row embedding (q8_0, tied output) makes it ~9 MB: written at test time, never committed. Stdlib only.
"""
import random
import struct

ALIGN = 32
GGML_F32, GGML_Q8_0 = 0, 8
GGUF_U32, GGUF_F32, GGUF_STR, GGUF_ARR = 4, 6, 8, 9
SCALAR_BYTES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
# Meta-Llama-3-8B-Instruct's tokenizer_config.json chat_template
LLAMA3_TEMPLATE = ("{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
                   "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
                   "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
                   "{{ content }}{% endfor %}{% if add_generation_prompt %}"
                   "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")
HIDDEN, FFN, HEADS, KV_HEADS, LAYERS, CTX = 64, 128, 4, 2, 2, 512


def _gstr(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _skip_value(buf, o, t):
    """Offset just past a GGUF value of type t starting at o."""
    if t == GGUF_STR:
        return o + 8 + struct.unpack_from("<Q", buf, o)[0]
    if t == GGUF_ARR:
        at, n = struct.unpack_from("<IQ", buf, o)
        o += 12
        if at == GGUF_STR:
            for _ in range(n):
                o += 8 + struct.unpack_from("<Q", buf, o)[0]
            return o
        return o + SCALAR_BYTES[at] * n
    return o + SCALAR_BYTES[t]


def tokenizer_kvs(vocab_path):
    """The raw bytes (key, type, value) of every tokenizer.* key of a GGUF file, and how many there are."""
    with open(vocab_path, "rb") as f:
        buf = f.read()
    if buf[:4] != b"GGUF":
        raise ValueError(vocab_path + ": not a GGUF file")
    _, _, n_kv = struct.unpack_from("<IQQ", buf, 4)
    o, out, n = 24, [], 0
    for _ in range(n_kv):
        start = o
        klen = struct.unpack_from("<Q", buf, o)[0]
        key = buf[o + 8:o + 8 + klen].decode("utf-8")
        o += 8 + klen
        t = struct.unpack_from("<I", buf, o)[0]
        o = _skip_value(buf, o + 4, t)
        if key.startswith("tokenizer."):
            out.append(buf[start:o])
            n += 1
    return b"".join(out), n


def _f32(rng, n, scale):
    return struct.pack("<%df" % n, *(rng.gauss(0.0, scale) for _ in range(n)))


def _q8_0(rng, rows, cols):
    """rows x cols q8_0 blocks: scale 1/254 (values within +-0.5), int8 levels uniform in [-127, 127]."""
    nb = rows * cols // 32
    levels = rng.randbytes(nb * 32).translate(bytes(((i % 255) - 127) & 0xFF for i in range(256)))
    d = struct.pack("<e", 1.0 / 254)
    return b"".join(d + levels[32 * i:32 * i + 32] for i in range(nb))


def write(vocab_path, out_path, seed=1):
    """Writes the model; returns its vocabulary size."""
    tok_kv, n_tok_kv = tokenizer_kvs(vocab_path)
    # the vocabulary size is the tokens array's length
    n_vocab = None
    o = 0
    while o < len(tok_kv):
        klen = struct.unpack_from("<Q", tok_kv, o)[0]
        key = tok_kv[o + 8:o + 8 + klen].decode()
        t = struct.unpack_from("<I", tok_kv, o + 8 + klen)[0]
        if key == "tokenizer.ggml.tokens":
            n_vocab = struct.unpack_from("<IQ", tok_kv, o + 12 + klen)[1]
        o = _skip_value(tok_kv, o + 12 + klen, t)
    rng = random.Random(seed)
    kv = [(_gstr("general.architecture") + struct.pack("<I", GGUF_STR) + _gstr("llama")),
          (_gstr("llama.block_count") + struct.pack("<II", GGUF_U32, LAYERS)),
          (_gstr("llama.context_length") + struct.pack("<II", GGUF_U32, CTX)),
          (_gstr("llama.embedding_length") + struct.pack("<II", GGUF_U32, HIDDEN)),
          (_gstr("llama.feed_forward_length") + struct.pack("<II", GGUF_U32, FFN)),
          (_gstr("llama.attention.head_count") + struct.pack("<II", GGUF_U32, HEADS)),
          (_gstr("llama.attention.head_count_kv") + struct.pack("<II", GGUF_U32, KV_HEADS)),
          (_gstr("llama.rope.dimension_count") + struct.pack("<II", GGUF_U32, HIDDEN // HEADS)),
          (_gstr("llama.rope.freq_base") + struct.pack("<If", GGUF_F32, 500000.0)),
          (_gstr("llama.attention.layer_norm_rms_epsilon") + struct.pack("<If", GGUF_F32, 1e-5)),
          (_gstr("tokenizer.chat_template") + struct.pack("<I", GGUF_STR) + _gstr(LLAMA3_TEMPLATE))]
    hd, kvd = HIDDEN // HEADS, KV_HEADS * (HIDDEN // HEADS)
    tensors = [("token_embd.weight", GGML_Q8_0, (HIDDEN, n_vocab), _q8_0(rng, n_vocab, HIDDEN)),
               ("output_norm.weight", GGML_F32, (HIDDEN,), struct.pack("<%df" % HIDDEN, *[1.0] * HIDDEN))]
    for L in range(LAYERS):
        ones = struct.pack("<%df" % HIDDEN, *[1.0] * HIDDEN)
        for name, shape, data in (
                ("attn_norm", (HIDDEN,), ones),
                ("attn_q", (HIDDEN, HIDDEN), _f32(rng, HIDDEN * HIDDEN, 0.2)),
                ("attn_k", (HIDDEN, kvd), _f32(rng, HIDDEN * kvd, 0.2)),
                ("attn_v", (HIDDEN, kvd), _f32(rng, HIDDEN * kvd, 0.2)),
                ("attn_output", (HIDDEN, HIDDEN), _f32(rng, HIDDEN * HIDDEN, 0.2)),
                ("ffn_norm", (HIDDEN,), ones),
                ("ffn_gate", (HIDDEN, FFN), _f32(rng, HIDDEN * FFN, 0.2)),
                ("ffn_up", (HIDDEN, FFN), _f32(rng, HIDDEN * FFN, 0.2)),
                ("ffn_down", (FFN, HIDDEN), _f32(rng, FFN * HIDDEN, 0.2))):
            tensors.append(("blk.%d.%s.weight" % (L, name), GGML_F32, shape, data))
    assert hd * HEADS == HIDDEN
    with open(out_path, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv) + n_tok_kv))
        f.write(b"".join(kv) + tok_kv)
        off = 0
        for name, typ, shape, data in tensors:
            f.write(_gstr(name) + struct.pack("<I", len(shape)) + struct.pack("<%dQ" % len(shape), *shape) +
                    struct.pack("<IQ", typ, off))
            off += (len(data) + ALIGN - 1) // ALIGN * ALIGN
        f.write(b"\0" * (-f.tell() % ALIGN))
        for _, _, _, data in tensors:
            f.write(data + b"\0" * (-len(data) % ALIGN))
    return n_vocab
