#!/usr/bin/env python3
"""Load a LoRA adapter (e.g. one written by mnemo) into peft and print / compare the logits.

    build/train-venv/bin/python tests/reference/check_mnemo_adapter.py ADAPTER_DIR BASE_DIR \\
        [--ids 1,296,277 ...] [--logits MNEMO_LOGITS.bin] [--tol 1e-4] [--write PEFT_LOGITS.bin]

ADAPTER_DIR: adapter_config.json + adapter_model.safetensors in peft's format (tensor names like
  base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight). Tensors in the file that are
  not LoRA matrices but name a base parameter (LoRA+: base_model.model.model.embed_tokens.weight,
  ...norm.weight) replace that base parameter before the comparison.
BASE_DIR: a transformers LlamaForCausalLM directory (e.g. tests/fixtures/models/mha); weights are
  widened to fp32, eager attention, CPU, 1 thread.
Prompts: every --ids list (comma-separated, BOS included), else the `ids` of every prompt in
  --prompts-from FILE (default BASE_DIR/reference.json).

Checks, exit 1 on any failure:
  - every tensor of adapter_model.safetensors is used (peft silently ignores unknown names), and
    every LoRA parameter peft created got a value from the file;
  - with --logits (MNFXLGT1, tests/reference/README.md; one record per prompt, same order, as
    mnemo writes them for base + adapter): max |peft - mnemo| <= --tol.
It always prints, per prompt, max |adapter - base| (an adapter that changes nothing is suspicious)
and with --write saves peft's logits as MNFXLGT1 for the C side.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np
import torch


def read_logits(path):
    with open(path, "rb") as f:
        buf = f.read()
    if buf[:8] != b"MNFXLGT1":
        raise SystemExit("%s: not an MNFXLGT1 file" % path)
    version, n = struct.unpack_from("<II", buf, 8)
    if version != 1:
        raise SystemExit("%s: version %d, expected 1" % (path, version))
    off, out = 16, []
    for _ in range(n):
        t, v = struct.unpack_from("<II", buf, off)
        off += 8
        out.append(np.frombuffer(buf, "<f4", t * v, off).reshape(t, v))
        off += 4 * t * v
    if off != len(buf):
        raise SystemExit("%s: %d trailing bytes" % (path, len(buf) - off))
    return out


def write_logits(path, rows):
    with open(path, "wb") as f:
        f.write(b"MNFXLGT1" + struct.pack("<II", 1, len(rows)))
        for a in rows:
            f.write(struct.pack("<II", a.shape[0], a.shape[1]) + a.astype("<f4").tobytes())


def main():
    ap = argparse.ArgumentParser(description="load an adapter into peft; print/compare logits")
    ap.add_argument("adapter_dir")
    ap.add_argument("base_dir")
    ap.add_argument("--ids", action="append", default=[], help="comma-separated token ids (BOS included)")
    ap.add_argument("--prompts-from", help="a reference.json whose prompts[].ids to use "
                    "(default BASE_DIR/reference.json)")
    ap.add_argument("--logits", help="MNFXLGT1 logits of base + adapter to compare against (e.g. mnemo's)")
    ap.add_argument("--tol", type=float, default=1e-4, help="max |Δlogit| allowed (default 1e-4)")
    ap.add_argument("--write", help="write peft's logits here (MNFXLGT1)")
    args = ap.parse_args()

    torch.set_num_threads(1)
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import LlamaForCausalLM

    if args.ids:
        prompts = [[int(x) for x in s.split(",") if x.strip()] for s in args.ids]
    else:
        with open(args.prompts_from or os.path.join(args.base_dir, "reference.json"), encoding="utf-8") as f:
            prompts = [p["ids"] for p in json.load(f)["prompts"]]

    def base():
        return LlamaForCausalLM.from_pretrained(args.base_dir, dtype=torch.float32,
                                                attn_implementation="eager").eval()

    with open(os.path.join(args.adapter_dir, "adapter_config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    file_tensors = load_file(os.path.join(args.adapter_dir, "adapter_model.safetensors"))
    model = PeftModel.from_pretrained(base(), args.adapter_dir).eval()
    ok = True

    # Which file tensors peft used: its LoRA parameters, with the adapter name dropped as in the file.
    params = {n: p for n, p in model.named_parameters()}
    lora = {n.replace(".default.", "."): p for n, p in params.items() if ".lora_" in n}
    extra = {}
    seen = set()
    for name, t in file_tensors.items():
        if ".lora_" in name and ".default." in name:
            # peft loads such a name too, but its own files never carry the adapter name
            print("NOTE %s: holds peft's adapter name '.default.'; peft accepts it, peft writes it without" % name)
            name = name.replace(".default.", ".")
        seen.add(name)
        if name in lora:
            if not torch.equal(lora[name].detach(), t.to(torch.float32)):
                print("FAIL %s: peft's loaded value differs from the file" % name)
                ok = False
        elif name in params and ".lora_" not in name:  # a base parameter saved beside it (LoRA+)
            extra[name] = t
        else:
            print("FAIL %s: in the file but unknown to peft (not loaded)" % name)
            ok = False
    for name in sorted(set(lora) - seen):
        print("FAIL %s: peft created it but the file does not hold it (left at peft's init)" % name)
        ok = False
    with torch.no_grad():
        for name, t in extra.items():
            params[name].copy_(t.to(torch.float32))
    print("adapter: r=%s lora_alpha=%s targets=%s, %d LoRA tensors, %d extra base tensors%s" % (
        cfg.get("r"), cfg.get("lora_alpha"), cfg.get("target_modules"), len(lora), len(extra),
        (" (" + ", ".join(sorted(extra)) + ")") if extra else ""))

    ref = read_logits(args.logits) if args.logits else None
    if ref is not None and len(ref) != len(prompts):
        print("FAIL %s holds %d prompts, %d given" % (args.logits, len(ref), len(prompts)))
        ok, ref = False, None
    plain = base()
    if extra:  # the base comparison keeps the extra tensors so it isolates the LoRA part
        with torch.no_grad():
            bp = dict(plain.named_parameters())
            for name, t in extra.items():
                bp[name[len("base_model.model."):]].copy_(t.to(torch.float32))
    rows = []
    with torch.no_grad():
        for i, ids in enumerate(prompts):
            x = torch.tensor([ids], dtype=torch.long)
            lg = model(input_ids=x).logits[0].float().numpy()
            rows.append(lg)
            d_base = float(np.abs(lg - plain(input_ids=x).logits[0].float().numpy()).max())
            line = "prompt %d (%d ids): max |adapter - base| %.4g" % (i, len(ids), d_base)
            if d_base == 0:
                line += " (the adapter changes nothing)"
            if ref is not None:
                if ref[i].shape != lg.shape:
                    line += "  FAIL shape %s vs peft %s" % (ref[i].shape, lg.shape)
                    ok = False
                else:
                    d = float(np.abs(ref[i].astype(np.float64) - lg).max())
                    good = d <= args.tol
                    ok = ok and good
                    line += "  max |peft - given| %.3g %s" % (d, "ok" if good else "FAIL (tol %g)" % args.tol)
            print(line)
    if args.write:
        write_logits(args.write, rows)
        print("wrote", args.write)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
