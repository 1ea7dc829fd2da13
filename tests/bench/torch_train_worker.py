#!/usr/bin/env python3
"""PyTorch side of bench_train.py: makes the benchmark's tokenizer and random checkpoints, and trains them the way
`mnemo train` does, printing the same JSON lines. Run by bench_train.py with the python of the train venv
(tests/reference/setup_train_venv.sh); not meant to be called by hand, though it can be:

  PY=build/train-venv/bin/python
  $PY tests/bench/torch_train_worker.py tokenizer --corpus C.txt --vocab 8000 --out tokenizer.model
  $PY tests/bench/torch_train_worker.py model --config '{"hidden_size": 512, ...}' --tokenizer tokenizer.model \\
      --seed 1 --out DIR
  $PY tests/bench/torch_train_worker.py train --model DIR --data C.txt --full --steps 4 --batch 1 --seq-len 512 \\
      --lr 1e-4 --seed 1 --threads 2 --json

train mirrors `mnemo train`: the .txt file is one stream, BOS + the SentencePiece ids of the whole file, cut into
windows of seq_len + 1 ids overlapping by one (window i = ids[i*L .. i*L + L]); with --shuffle 0, step s takes
windows s*B .. s*B + B - 1 (wrapping at the end, as train_data.c). The model reads a window's first L ids and
predicts its last L; loss = mean cross-entropy over the step's B*L predictions. AdamW (betas 0.9/0.999, eps 1e-8,
weight decay 0, torch's default implementation unless --adamw says otherwise), clip_grad_norm_(1.0) before each
step, constant lr. LoRA: peft LoraConfig(r, lora_alpha, target_modules, lora_dropout=0), peft's own init after
torch.manual_seed(seed) (A kaiming-uniform, B = 0, so step 1's loss is the base model's). fp32 throughout; attention
through transformers' "sdpa" path (torch's own fused CPU kernel) unless --attn says otherwise; no KV cache.

Output, one JSON line per optimizer step on stdout:
  {"step": 1, "loss": .., "grad_norm": .. (pre-clip), "lr": .., "tokens": B*L*step, "elapsed_s": ..}
where elapsed_s is the wall time from the start of step 1 to the end of this step's optimizer update, then
  {"done": true, "load_s": .., "rss_import_mib": .., ...}
(rss_import_mib: this process's peak RSS after importing torch/transformers/peft, before the model: the fixed cost
of the libraries inside the peak RSS the driver measures).
"""
import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def cmd_tokenizer(a):
    """SentencePiece BPE with byte fallback, the settings of tests/reference/make_fixtures.py (which makes the
    512-piece fixture tokenizer) at another vocabulary size. Trained in a temp dir with relative paths: the
    trainer spec stored in the .model records them, so the bytes do not depend on where the corpus lives."""
    import sentencepiece as spm
    with tempfile.TemporaryDirectory() as td:
        shutil.copyfile(a.corpus, os.path.join(td, "corpus.txt"))
        cwd = os.getcwd()
        os.chdir(td)
        try:
            spm.SentencePieceTrainer.train(
                input="corpus.txt", model_prefix="tok", model_type="bpe", vocab_size=a.vocab,
                byte_fallback=True, split_digits=True, add_dummy_prefix=True,
                normalization_rule_name="identity", remove_extra_whitespaces=False,
                allow_whitespace_only_pieces=True, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
                character_coverage=1.0, input_sentence_size=1000000, shuffle_input_sentence=False,
                num_threads=1, minloglevel=2)
        finally:
            os.chdir(cwd)
        shutil.copyfile(os.path.join(td, "tok.model"), a.out)
    sp = spm.SentencePieceProcessor(model_file=a.out)
    emit({"done": True, "vocab": sp.vocab_size(), "bos": sp.bos_id(), "eos": sp.eos_id()})


def cmd_model(a):
    """A LlamaForCausalLM of the given shape with transformers' random init (normal, std 0.02) after
    torch.manual_seed(seed), saved as fp32 safetensors with the tokenizer beside it."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.set_num_threads(a.threads)
    cfg = dict(bos_token_id=1, eos_token_id=2, pad_token_id=None, hidden_act="silu", rope_theta=10000.0,
               attention_bias=False, mlp_bias=False, tie_word_embeddings=False)
    cfg.update(json.loads(a.config))
    torch.manual_seed(a.seed)
    model = LlamaForCausalLM(LlamaConfig(**cfg)).to(torch.float32)
    os.makedirs(a.out, exist_ok=True)
    model.save_pretrained(a.out)
    shutil.copyfile(a.tokenizer, os.path.join(a.out, "tokenizer.model"))
    with open(os.path.join(a.out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>",
                   "unk_token": "<unk>", "add_bos_token": True, "add_eos_token": False}, f, indent=2)
    emit({"done": True, "params": sum(p.numel() for p in model.parameters())})


def windows_of(model_dir, data, seq_len):
    """BOS + sp.encode(whole file), cut as train_data.c does: n = (len(ids) - 1) // L windows."""
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=os.path.join(model_dir, "tokenizer.model"))
    with open(data, "rb") as f:
        text = f.read().decode("utf-8")
    ids = [sp.bos_id()] + sp.encode(text)
    n = (len(ids) - 1) // seq_len
    if n < 1:
        raise SystemExit("%s: %d ids, shorter than one window of %d" % (data, len(ids), seq_len + 1))
    return ids, n


def cmd_train(a):
    t_start = time.perf_counter()
    import torch
    import torch.nn.functional as F
    from transformers import LlamaForCausalLM
    rss_import = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    torch.set_num_threads(a.threads)
    try:
        torch.set_num_interop_threads(1)  # nothing here runs ops concurrently; one fewer thread pool
    except RuntimeError:
        pass
    if a.shuffle != 0:
        raise SystemExit("only --shuffle 0 is implemented (the benchmark's order)")
    if a.full == bool(a.lora_rank):
        raise SystemExit("give exactly one of --full and --lora-rank R")

    ids, n_win = windows_of(a.model, a.data, a.seq_len)
    L, B = a.seq_len, a.batch
    model = LlamaForCausalLM.from_pretrained(a.model, dtype=torch.float32, attn_implementation=a.attn)
    model.config.use_cache = False
    if a.lora_rank:
        from peft import LoraConfig, get_peft_model
        names = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj", "gate": "gate_proj", "up": "up_proj",
                 "down": "down_proj"}
        targets = [names.get(t, t) for t in a.lora_targets.split(",")]
        torch.manual_seed(a.seed)
        model = get_peft_model(model, LoraConfig(r=a.lora_rank, lora_alpha=a.lora_alpha, target_modules=targets,
                                                 lora_dropout=0.0, bias="none", task_type="CAUSAL_LM"))
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt_kw = {"foreach": True} if a.adamw == "foreach" else {"fused": True} if a.adamw == "fused" else {}
    opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, **opt_kw)
    load_s = time.perf_counter() - t_start

    t0 = time.perf_counter()
    for s in range(a.steps):
        rows = [(s * B + r) % n_win for r in range(B)]
        x = torch.tensor([ids[w * L: w * L + L + 1] for w in rows], dtype=torch.long)  # [B, L + 1]
        logits = model(input_ids=x[:, :-1], use_cache=False).logits                   # [B, L, vocab]
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
        del logits  # the graph keeps log-softmax's output, not the logits: free them before the backward
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, 1.0).item()
        opt.step()
        emit({"step": s + 1, "loss": loss.item(), "grad_norm": norm, "lr": a.lr, "tokens": (s + 1) * B * L,
              "elapsed_s": round(time.perf_counter() - t0, 6)})
    emit({"done": True, "steps": a.steps, "load_s": round(load_s, 3), "rss_import_mib": round(rss_import, 1),
          "windows": n_win, "trainable_params": sum(p.numel() for p in params), "torch": torch.__version__,
          "threads": torch.get_num_threads(), "attn": a.attn, "adamw": a.adamw})


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tokenizer")
    t.add_argument("--corpus", required=True)
    t.add_argument("--vocab", type=int, required=True)
    t.add_argument("--out", required=True)
    m = sub.add_parser("model")
    m.add_argument("--config", required=True, help="LlamaConfig fields as JSON")
    m.add_argument("--tokenizer", required=True)
    m.add_argument("--seed", type=int, default=1)
    m.add_argument("--threads", type=int, default=2)
    m.add_argument("--out", required=True)
    r = sub.add_parser("train", help="the flags of `mnemo train`")
    r.add_argument("--model", required=True)
    r.add_argument("--data", required=True)
    r.add_argument("--out", help="accepted for symmetry with mnemo; nothing is saved")
    r.add_argument("--full", action="store_true")
    r.add_argument("--lora-rank", type=int, default=0)
    r.add_argument("--lora-alpha", type=float, default=16.0)
    r.add_argument("--lora-targets", default="q,v")
    r.add_argument("--steps", type=int, required=True)
    r.add_argument("--batch", type=int, required=True)
    r.add_argument("--seq-len", type=int, required=True)
    r.add_argument("--lr", type=float, default=1e-4)
    r.add_argument("--shuffle", type=int, default=0)
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--threads", type=int, default=2)
    r.add_argument("--json", action="store_true", help="accepted for symmetry; output is always JSON")
    r.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"])
    r.add_argument("--adamw", default="default", choices=["default", "foreach", "fused"])
    a = ap.parse_args()
    {"tokenizer": cmd_tokenizer, "model": cmd_model, "train": cmd_train}[a.cmd](a)


if __name__ == "__main__":
    main()
