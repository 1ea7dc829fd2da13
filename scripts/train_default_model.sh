#!/usr/bin/env bash
# Trains mnemo's embedded default model: a small LongLLaMA-layout model (one memory layer, local
# context 128) trained by `mnemo train --fot` from random weights on tiny shakespeare (public domain), with the
# SentencePiece tokenizer trained on that corpus (models/tiny-shakespeare/tokenizer.model, 512 pieces), then written
# as bf16 into models/longllama-shakespeare.
#
#   scripts/train_default_model.sh [CORPUS] [WORK_DIR]
#       CORPUS    default data/tinyshakespeare.txt (1115394 bytes)
#       WORK_DIR  default ~/.cache/mnemo-default-model; training continues there through --resume
#   STEPS, BATCH, LR, THREADS override the defaults below; BUILD=build.
#
# The corpus is split by lines: the first 90% trains, the last 10% (tests/fixtures/shakespeare_heldout.txt) is never
# seen in training and gives the perplexity in docs/evaluation.md with and without memory.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$SRC/build}
MNEMO=$BUILD/mnemo
CORPUS=${1:-$SRC/data/tinyshakespeare.txt}
W=${2:-$HOME/.cache/mnemo-default-model}
STEPS=${STEPS:-700}
BATCH=${BATCH:-8}
LR=${LR:-2e-3}
THREADS=${THREADS:-2}
OUT=$SRC/models/longllama-shakespeare
mkdir -p "$W"

lines=$(wc -l < "$CORPUS")
train_lines=$((lines * 9 / 10))
head -n "$train_lines" "$CORPUS" > "$W/train.txt"
tail -n +"$((train_lines + 1))" "$CORPUS" > "$W/heldout.txt"
cmp -s "$W/heldout.txt" "$SRC/tests/fixtures/shakespeare_heldout.txt" || cp "$W/heldout.txt" "$SRC/tests/fixtures/shakespeare_heldout.txt"

# 4 layers, hidden 256, 4 heads of 64, tied embeddings; memory layer 2 (0-based) with positionals as LongLLaMA-3B;
# local context 128
cat > "$W/config.json" <<'JSON'
{"architectures": ["LongLlamaForCausalLM"], "model_type": "longllama", "vocab_size": 512, "hidden_size": 256,
 "intermediate_size": 688, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 4,
 "max_position_embeddings": 128, "mem_layers": [2], "last_context_length": 128, "mem_positionals": true,
 "mem_dtype": "float32", "rms_norm_eps": 1e-5, "tie_word_embeddings": true,
 "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}
JSON

resume=()
[ -f "$W/run/train_state.mnemo" ] && resume=(--resume)
# each document: 4 consecutive contexts of 128 tokens; per quarter of the batch the contexts see 0, 1 (+1 other
# document's), 2 (+1), 3 previous contexts of their own document: LongLLaMA-3B's schedule
"$MNEMO" train --init random --config "$W/config.json" --tokenizer "$SRC/models/tiny-shakespeare/tokenizer.model" \
    --seed 1 --data "$W/train.txt" --out "$W/run" --full --seq-len 128 --batch "$BATCH" \
    --fot "1/4(0,0),1/4(1,1),1/4(2,1),1/4(3,0)" --steps "$STEPS" --lr "$LR" --schedule cosine --warmup 100 \
    --weight-decay 0.1 --checkpoint-every 50 --threads "$THREADS" --json "${resume[@]}" | tee -a "$W/train.jsonl"

# the shipped copy: bf16 weights, the run's config and tokenizer
/usr/bin/python3 "$SRC/scripts/safetensors_bf16.py" "$W/run" "$OUT"
cp "$SRC/models/tiny-shakespeare/generation_config.json" "$OUT/"
