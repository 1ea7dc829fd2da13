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
# stopped and run again. STEPS, BATCH, THREADS, LENGTHS and SAMPLES override the defaults below. Results:
# WORK_DIR/results/*.jsonl (one per model and memory mode) and WORK_DIR/results/dict_lookup.png.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$SRC/build}
MNEMO=$BUILD/mnemo
W=${1:-$HOME/.cache/mnemo-proof}
STEPS=${STEPS:-3000}
BATCH=${BATCH:-16}
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

# training documents: 513 tokens (2 contexts of 256 + 1), the last 256 tokens queries, the loss on their values
[ -s "$W/train.jsonl" ] || "$MNEMO" eval dict-lookup --write-data "$W/train.jsonl" --lengths 513 \
    --query-tokens 256 --samples "${DOCS:-8000}" --seed 1

train() { # OUT CONFIG extra args...
    local out=$1 cfg=$2
    shift 2
    local resume=()
    [ -f "$W/$out/train_state.mnemo" ] && resume=(--resume)
    "$MNEMO" train --init random --config "$cfg" --tokenizer "$SRC/tests/fixtures/tokenizer.model" --seed 1 \
        --data "$W/train.jsonl" --out "$W/$out" --full --steps "$STEPS" --batch "$BATCH" --lr "$LR" \
        --schedule cosine --warmup 100 --checkpoint-every 50 --threads "$THREADS" --json "${resume[@]}" "$@"
}
# FoT: row 0 of a document (definitions) alone, row 1 (queries) with its definitions as the positive context and
# one other document's context as a negative (the paper starts at d = 1)
train fot "$W/fot_config.json" --seq-len 256 --fot "1/2(0,0),1/2(1,1)"
train base "$W/base_config.json" --seq-len 512

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
