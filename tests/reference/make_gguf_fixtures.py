"""Writes tests/fixtures/gguf/: GGUF files made with the upstream gguf-py writer (pip package `gguf`, the one
llama.cpp's convert_hf_to_gguf.py uses), so mnemo's GGUF reader is checked against bytes it did not write.

    build/train-venv/bin/python tests/reference/make_gguf_fixtures.py

- gqa_q8_0.gguf: tests/fixtures/models/gqa (8/2 heads) as convert_hf_to_gguf.py --outtype q8_0 writes it: llama.*
  metadata, the SentencePiece vocabulary as tokenizer.ggml.* (tokens, scores, types, as convert's
  _create_vocab_sentencepiece reads them), Q/K rows permuted with convert's LlamaModel.permute, norms f32, matrices
  q8_0, ffn_down (rows of 72: no whole blocks) f16 as convert falls back.
- rope_q4_0/model.gguf: tests/fixtures/models/rope_scaled (linear RoPE x2) in q4_0 with no tokenizer in the file:
  tokenizer.model beside it, which mnemo then reads.
gguf-py's quantizers are numpy ports of ggml's reference ones. Deterministic: same input, same bytes.
"""
import json
import os
import shutil
import sys

import numpy as np
import sentencepiece as spm
from safetensors.numpy import load_file

import gguf

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures")
OUT = os.path.join(ROOT, "gguf")


def permute(w, n_head, n_head_kv):  # convert_hf_to_gguf.py LlamaModel.permute
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


NAMES = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
         "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
         "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}


def gguf_name(hf):
    top = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
           "lm_head.weight": "output.weight"}
    if hf in top:
        return top[hf]
    parts = hf.split(".")
    assert parts[0] == "model" and parts[1] == "layers", hf
    return "blk.%s.%s.weight" % (parts[2], NAMES[".".join(parts[3:-1])])


def add_vocab(w, tok_path):
    sp = spm.SentencePieceProcessor(model_file=tok_path)
    tokens, scores, types = [], [], []
    for i in range(sp.vocab_size()):
        tokens.append(sp.id_to_piece(i).encode("utf-8"))
        scores.append(sp.get_score(i))
        t = gguf.TokenType.NORMAL
        if sp.is_unknown(i):
            t = gguf.TokenType.UNKNOWN
        elif sp.is_control(i):
            t = gguf.TokenType.CONTROL
        elif sp.is_unused(i):
            t = gguf.TokenType.UNUSED
        elif sp.is_byte(i):
            t = gguf.TokenType.BYTE
        types.append(t)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(sp.bos_id())
    w.add_eos_token_id(sp.eos_id())
    w.add_unk_token_id(sp.unk_id())
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)


def convert(model_dir, path, qtype, with_vocab):
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    tensors = load_file(os.path.join(model_dir, "model.safetensors"))
    w = gguf.GGUFWriter(path, "llama")
    n_head, n_kv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    w.add_name(os.path.basename(model_dir))
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_rope_dimension_count(cfg["hidden_size"] // n_head)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_freq_base(cfg["rope_theta"])
    w.add_vocab_size(cfg["vocab_size"])
    rs = cfg.get("rope_scaling")
    if rs and rs.get("type", rs.get("rope_type")) == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(rs["factor"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0 if qtype == gguf.GGMLQuantizationType.Q8_0
                    else gguf.LlamaFileType.MOSTLY_Q4_0)
    if with_vocab:
        add_vocab(w, os.path.join(model_dir, "tokenizer.model"))
    for hf in sorted(tensors):
        data = tensors[hf].astype(np.float32)
        if hf.endswith("q_proj.weight"):
            data = permute(data, n_head, n_head)
        elif hf.endswith("k_proj.weight"):
            data = permute(data, n_head, n_kv)
        name = gguf_name(hf)
        if data.ndim == 1:
            w.add_tensor(name, data)  # norms stay f32, as in convert
            continue
        try:
            q = gguf.quants.quantize(data, qtype)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qtype)
        except gguf.QuantError:  # rows without whole blocks: convert's fallback
            w.add_tensor(name, data.astype(np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(path, os.path.getsize(path), "bytes")


def seeds():
    """Small GGUF files for tests/fuzz/corpus/fuzz_gguf: every value type, a tokenizer, quantized tensors."""
    d = os.path.join(ROOT, "..", "fuzz", "corpus", "fuzz_gguf")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "seed_tiny_llama")
    w = gguf.GGUFWriter(path, "llama")
    w.add_context_length(64)
    w.add_embedding_length(64)
    w.add_block_count(1)
    w.add_feed_forward_length(32)
    w.add_head_count(2)
    w.add_head_count_kv(1)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(10000.0)
    w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
    w.add_rope_scaling_factor(2.0)
    w.add_string("mnemo.architecture", "LongLlamaForCausalLM")
    w.add_array("mnemo.longllama.mem_layers", [0])
    w.add_bool("mnemo.longllama.mem_positionals", True)
    w.add_uint64("test.u64", 7)
    w.add_int8("test.i8", -3)
    w.add_float64("test.f64", 0.5)
    w.add_tokenizer_model("llama")
    w.add_token_list([b"<unk>", b"<s>", b"</s>", b"<0x00>", b"\xe2\x96\x81a"])
    w.add_token_scores([0.0, 0.0, 0.0, 0.0, -1.0])
    w.add_token_types([2, 3, 3, 6, 1])
    rng = np.random.default_rng(5)
    for name, shape in [("token_embd.weight", (5, 64)), ("blk.0.attn_q.weight", (64, 64)),
                        ("blk.0.attn_k.weight", (32, 64))]:
        q = gguf.quants.quantize(rng.standard_normal(shape).astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
        w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    q = gguf.quants.quantize(rng.standard_normal((4, 64)).astype(np.float32), gguf.GGMLQuantizationType.Q4_0)
    w.add_tensor("output.weight", q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q4_0)
    w.add_tensor("output_norm.weight", np.ones(64, np.float32))
    w.add_tensor("blk.0.ffn_down.weight", np.ones((64, 32), np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    b = open(path, "rb").read()
    v2 = bytearray(b)
    v2[4] = 2
    open(os.path.join(d, "seed_v2"), "wb").write(bytes(v2))
    open(os.path.join(d, "seed_truncated_kv"), "wb").write(b[:200])
    open(os.path.join(d, "seed_header_only"), "wb").write(b[:24])


def kquants():
    """kquants.gguf: q4_K, q6_K, q4_1, q5_0, q5_1 tensors of random blocks (sane f16 scales) with gguf-py's dequantization of each
    beside them as f32 (name + "_ref"), to check mnemo's k-quant dequantizers against an independent port."""
    rng = np.random.default_rng(7)
    path = os.path.join(OUT, "kquants.gguf")
    w = gguf.GGUFWriter(path, "llama")
    Q = gguf.GGMLQuantizationType
    for name, qt, bsz, scale_at, nblk in [("q4_K", Q.Q4_K, 144, (0, 2), 2), ("q6_K", Q.Q6_K, 210, (208,), 2),
                                          ("q4_1", Q.Q4_1, 20, (0, 2), 16), ("q5_0", Q.Q5_0, 22, (0,), 16),
                                          ("q5_1", Q.Q5_1, 24, (0, 2), 16)]:
        raw = rng.integers(0, 256, size=(3, nblk * bsz), dtype=np.uint8)  # 3 rows of 512 weights
        for r in range(3):
            for b in range(nblk):
                for off in scale_at:
                    h = np.array([rng.uniform(0.001, 0.05)], np.float16).view(np.uint8)
                    raw[r, b * bsz + off:b * bsz + off + 2] = h
        w.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=qt)
        w.add_tensor(name + "_ref", gguf.quants.dequantize(raw, qt).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(path, os.path.getsize(path), "bytes")


def main():
    if "--kquants" in sys.argv:
        kquants()
        return
    if "--seeds" in sys.argv:
        seeds()
        return
    os.makedirs(os.path.join(OUT, "rope_q4_0"), exist_ok=True)
    convert(os.path.join(ROOT, "models", "gqa"), os.path.join(OUT, "gqa_q8_0.gguf"), gguf.GGMLQuantizationType.Q8_0,
            True)
    convert(os.path.join(ROOT, "models", "rope_scaled"), os.path.join(OUT, "rope_q4_0", "model.gguf"),
            gguf.GGMLQuantizationType.Q4_0, False)
    shutil.copy(os.path.join(ROOT, "models", "rope_scaled", "tokenizer.model"), os.path.join(OUT, "rope_q4_0"))
    print("gguf-py", gguf.__version__ if hasattr(gguf, "__version__") else "?", file=sys.stderr)


if __name__ == "__main__":
    main()
