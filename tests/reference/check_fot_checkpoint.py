#!/usr/bin/env python3
"""Checks that a checkpoint written by `mnemo train --fot --full` loads, unchanged, in the public LongLLaMA code
and computes what mnemo's inference reference computes. Run by hand (needs torch, safetensors, transformers):

    build/train-venv/bin/python tests/reference/check_fot_checkpoint.py OUT_DIR --upstream LONG_LLAMA/src

OUT_DIR: the --out of the training run (config.json + model.safetensors). --upstream: the src/ directory of
CStanKonrad/long_llama (modeling_longllama.py; not committed). The weights go into upstream's
LongLlamaForCausalLM with load_state_dict (nothing unexpected, nothing missing but the rotary buffers), a prompt
three windows long (so memory layers read memory) runs through it and through tests/reference/longllama_ref.py
(whose logits tests/unit/test_longllama.c holds mnemo's inference to), and the largest logit difference is printed;
exit 1 above 1e-3.
"""
import argparse
import json
import os
import sys

import torch
from safetensors.torch import load_file

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import longllama_ref  # noqa: E402
import make_longllama_fixtures as mlf  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--upstream", required=True)
    a = ap.parse_args()
    torch.set_num_threads(1)
    with open(os.path.join(a.out_dir, "config.json")) as f:
        cfg_json = json.load(f)
    weights = {k: v.float() for k, v in load_file(os.path.join(a.out_dir, "model.safetensors")).items()}
    up = mlf.build_upstream(a.upstream, cfg_json, weights)  # asserts a clean load_state_dict
    W = cfg_json["max_position_embeddings"]
    lcl = cfg_json.get("last_context_length", 1024)
    ids = mlf.rand_ids(77, 3 * W, bos=True)
    ids = [i % cfg_json["vocab_size"] for i in ids]
    with torch.no_grad():
        got = up(input_ids=torch.tensor([ids]), use_cache=True, last_context_length=lcl).logits[0]
    ref = longllama_ref.LongLlamaRef(longllama_ref.Config(cfg_json), weights).session().prefill(ids, lcl)
    rows = got.shape[0] - ref.shape[0]  # upstream returns logits for every position; the reference for each call
    diff = float((got[rows:] - ref).abs().max()) if ref.shape[0] <= got.shape[0] else float("inf")
    print(f"{a.out_dir}: {len(weights)} tensors loaded into upstream LongLlamaForCausalLM "
          f"(mem_layers {cfg_json.get('mem_layers')}); prompt {len(ids)} tokens; max |logit upstream - reference| "
          f"{diff:.2e} over {ref.shape[0]} positions")
    sys.exit(0 if diff <= 1e-3 else 1)


if __name__ == "__main__":
    main()
