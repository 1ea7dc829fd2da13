#!/usr/bin/env bash
# The FoT paper's dictionary-lookup result (Appendix F, Figure 10) at small scale, trained by mnemo itself
# (issue 22, point 2): a LongLLaMA-layout model (one memory layer, local context 256) trained with cross-batch on
# 512-token documents (definitions, then queries), and a plain model of the same size trained at 512 as the baseline;
# then value accuracy with 1K..64K tokens of dictionary, the FoT model's memory dense and kNN (k = 32; flat and
# IVF-grow), the baseline seeing its last 512 tokens.
#
#   tests/bench/proof_dict_lookup.sh [WORK_DIR]      (default ~/.cache/mnemo-proof; BUILD=build)
#
# Stages are skipped when their output exists and training continues through --resume, so the script can be
# stopped and run again. STEPS (and STEPS_C65, STEPS_C129, STEPS_C257, STEPS_NEG), BATCH, LR, THREADS, LENGTHS and
# SAMPLES override the defaults below. Results:
# WORK_DIR/results/*.jsonl (one per model and memory mode) and WORK_DIR/results/dict_lookup.png.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$SRC/build}
MNEMO=$BUILD/mnemo
W=${1:-$HOME/.cache/mnemo-proof}
STEPS=${STEPS:-3000}
THREADS=${THREADS:-2}
LENGTHS=${LENGTHS:-1K,4K,16K,64K}
SAMPLES=${SAMPLES:-10}
LR=${LR:-2e-3}
mkdir -p "$W/results"

# the model: 4 layers, hidden 256, 4 heads of 64, memory layer 2 (0-based), the task's ids inside a 512-id
# vocabulary (the fixtures' tokenizer; the task never tokenizes text)
cat > "$W/fot_config.json" <<'JSON'
{"architectures": ["LongLlamaForCausalLM"], "model_type": "longllama", "vocab_size": 512, "hidden_size": 256,
 "intermediate_size": 688, "num_hidden_layers": 4, "num_attention_heads": 4, "max_position_embeddings": 256,
 "mem_layers": [2], "last_context_length": 256, "mem_dtype": "float32", "rms_norm_eps": 1e-5,
 "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}
JSON
cat > "$W/base_config.json" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 512, "hidden_size": 256,
 "intermediate_size": 688, "num_hidden_layers": 4, "num_attention_heads": 4, "max_position_embeddings": 512,
 "rms_norm_eps": 1e-5, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}
JSON

# Training data. Trained from random weights on 513-token documents alone, neither model left chance (loss 4.07 =
# ln 58 on the values after 900 steps of 16 documents, FoT and plain alike: session 13), so both start with a
# curriculum of shorter documents of the same task, a plain model learning the lookup in its own context: 65 tokens
# (3 definitions, 3 queries), 129 (6), 257 (13). The baseline then trains at 512 on the 513-token documents, and the
# FoT model starts from the same curriculum checkpoint in LongLLaMA layout (the same weights; config.json names the
# memory layer) and learns to answer from memory: first with its positive context alone (d = 1, as the paper starts),
# then with negatives from other documents.
for n in 65 129 257 513; do
    [ -s "$W/dict_$n.jsonl" ] || "$MNEMO" eval dict-lookup --write-data "$W/dict_$n.jsonl" --lengths "$n" \
        --query-tokens $(((n - 1) / 2)) --samples "${DOCS:-10000}" --seed "$n"
done

train() { # OUT DATA SEQ_LEN STEPS BATCH FROM extra args... (FROM: a checkpoint directory, or "random")
    local out=$1 data=$2 seq=$3 steps=$4 batch=$5 from=$6
    shift 6
    grep -q '"done":true' "$W/$out.log" 2>/dev/null && return 0 # finished earlier
    local src=(--model "$from") resume=()
    [ "$from" = random ] && src=(--init random --config "$W/base_config.json" --tokenizer "$SRC/tests/fixtures/tokenizer.model")
    [ -f "$W/$out/train_state.mnemo" ] && resume=(--resume)
    "$MNEMO" train "${src[@]}" --seed 1 --data "$W/$data" --out "$W/$out" --full --seq-len "$seq" --steps "$steps" \
        --batch "$batch" --lr "$LR" --schedule cosine --warmup 50 --checkpoint-every 50 --threads "$THREADS" --json \
        "${resume[@]}" "$@" | tee -a "$W/$out.log"
}
BATCH=${BATCH:-8}
train c65 dict_65.jsonl 64 "${STEPS_C65:-1000}" 32 random
train c129 dict_129.jsonl 128 "${STEPS_C129:-800}" 16 "$W/c65"
train c257 dict_257.jsonl 256 "${STEPS_C257:-2800}" "$BATCH" "$W/c129"
# the baseline: plain, 512 tokens of context
train base dict_513.jsonl 512 "$STEPS" "$BATCH" "$W/c257"
# FoT: the curriculum's weights in LongLLaMA layout (local context 256, memory layer 2); row 0 of a document holds the
# definitions, row 1 the queries: row 1 sees row 0 whole as memory (positive), then also 3 other documents' rows
if [ ! -f "$W/fot_init/config.json" ]; then
    mkdir -p "$W/fot_init" && cp "$W/c257/model.safetensors" "$W/c257/tokenizer.model" "$W/fot_init/" &&
        cp "$W/fot_config.json" "$W/fot_init/config.json"
fi
train fot_d1 dict_513.jsonl 256 "$STEPS" "$BATCH" "$W/fot_init" --fot "1/2(0,0),1/2(1,0)"
train fot dict_513.jsonl 256 "${STEPS_NEG:-1000}" "$BATCH" "$W/fot_d1" --fot "1/2(0,0),1/2(1,3)"

ev() { # NAME MODEL extra args...
    local name=$1 model=$2
    shift 2
    [ -s "$W/results/$name.jsonl" ] || "$MNEMO" eval dict-lookup --model "$W/$model" --lengths "$LENGTHS" \
        --samples "$SAMPLES" --seed 7 --threads "$THREADS" --json "$@" > "$W/results/$name.jsonl"
}
ev fot_dense fot --mem-knn 0
ev fot_knn32_flat fot --mem-knn 32 --mem-dense-rows 0 --mem-index flat
ev fot_knn32_ivfgrow fot --mem-knn 32 --mem-dense-rows 0 --mem-index ivf-grow
ev baseline base
"$SRC/scripts/plot_eval.py" "$W"/results/{fot_dense,fot_knn32_flat,fot_knn32_ivfgrow,baseline}.jsonl \
    -o "$W/results/dict_lookup.png" --title "dictionary lookup: FoT (memory) vs baseline (512 window)"
# the table: accuracy (%) by length, one row per model and memory mode
python3 - "$W"/results/{fot_dense,fot_knn32_flat,fot_knn32_ivfgrow,baseline}.jsonl <<'PY'
import json, os, sys
for path in sys.argv[1:]:
    rows = [json.loads(l) for l in open(path)]
    cells = "  ".join("%s %5.1f%%" % (r["length"], 100 * r["accuracy"]) for r in rows)
    print("%-18s %s" % (os.path.basename(path)[:-6], cells))
PY
