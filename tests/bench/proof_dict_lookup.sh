#!/usr/bin/env bash
# The FoT paper's dictionary-lookup result (Appendix F, Figure 10) at small scale, trained by mnemo itself
#: a LongLLaMA-layout model (one memory layer) trained with cross-batch, and a plain model of the
# same size as the baseline; then value accuracy against dictionary length, the FoT model's memory dense and kNN
# (k = 32; flat and IVF-grow), the baseline seeing its training window.
#
#   tests/bench/proof_dict_lookup.sh [WORK_DIR]      (default ~/.cache/mnemo-proof; BUILD=build)
#
# Scales (SCALE=qk, the default, small, full or paper):
#   qk     small's model with "qk_norm": true (q and k heads RMS-normalized: cosine attention with a learned
#          temperature, as the FoT paper's small models) and a shorter curriculum: 65-token documents (plain, then
#          FoT d = 1, then d = 7 negatives), 257 and 513 (rows of 32 seeing their document's earlier rows), then
#          63 other documents' definitions as distractors and 257- and 513-token documents with near misses,
#          then the memory layers' softmax made twice as sharp (scripts/scale_q_norm.py), and last a local
#          context of 64 (rows of 64 cut half the definitions rows of 32 do);
#          ~4 h on two threads. The committed models/dict-lookup-qk is its output (in bf16)
#   small  FoT with a local context of 32 (the definitions reach the queries through memory alone), trained on
#          65-, 257-, 513-, 1025- and 2049-token documents, against the plain model trained at 64 on 65-token ones;
#          ~3 h 20 min on one thread
#   full   the paper's shape: 513-token documents, FoT local context 256 against the plain model trained at 512,
#          through a curriculum of 129- and 257-token documents (many hours on a CPU)
#   paper  the paper's model too (Appendix E's 37M: 12 layers, hidden 512, 8 heads of 64) and its negatives (d = 1,
#          then d = 128 contexts: 127 other documents' mirrored ones, `F(0,0,127)`), 513-token documents, local 256,
#          batches of 64-128 documents: GPU-sized (training on DEVICE=cuda by default at this scale); P_LAYERS,
#          P_HIDDEN, P_FF, P_MEM, P_BATCH, P_NEG and P_DOCS shrink it for a smoke run on a CPU
# Stages are skipped when their output exists and training continues through --resume, so the script can be
# stopped and run again. STEPS_* (see train calls below), LR, THREADS, LENGTHS, SAMPLES and DEVICE (where training
# runs: cpu or cuda; the evaluation takes the GPU by itself when there is one) override the defaults.
# Results: WORK_DIR/results/<scale>_*.jsonl (one per model and memory mode) and WORK_DIR/results/<scale>.png.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$SRC/build}
MNEMO=$BUILD/mnemo
W=${1:-$HOME/.cache/mnemo-proof}
SCALE=${SCALE:-qk}
THREADS=${THREADS:-1}
SAMPLES=${SAMPLES:-20}
LR=${LR:-2e-3}
DEVICE=${DEVICE:-cpu}
case $SCALE in
small | qk) LENGTHS=${LENGTHS:-65,256,1K,4K,16K} ;;
full) LENGTHS=${LENGTHS:-1K,4K,16K,64K} ;;
paper) LENGTHS=${LENGTHS:-1K,4K,16K,64K} DEVICE=${DEVICE_PAPER:-cuda} ;;
*) echo "proof_dict_lookup.sh: SCALE is qk, small, full or paper, not '$SCALE'" >&2; exit 2 ;;
esac
mkdir -p "$W/results"

# The model: 4 layers, hidden 256, 8 heads of 32 (8 heads learn the 4-token key match faster than 4 of 64: value
# accuracy 80% vs 60% after the same 1000 steps on 65-token documents), memory layers 1, 2 and 3 (0-based; with
# layer 2 alone the answer through memory stalled at a loss of ~2.5 where three layers reach ~1.3 in the same
# steps), the task's ids inside a 512-id vocabulary (the fixtures' tokenizer; the task never tokenizes text).
cat > "$W/fot_config.json" <<'JSON'
{"architectures": ["LongLlamaForCausalLM"], "model_type": "longllama", "vocab_size": 512, "hidden_size": 256,
 "intermediate_size": 688, "num_hidden_layers": 4, "num_attention_heads": 8, "max_position_embeddings": 256,
 "mem_layers": [1, 2, 3], "last_context_length": 256, "mem_dtype": "float32", "rms_norm_eps": 1e-5,
 "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}
JSON
cat > "$W/base_config.json" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 512, "hidden_size": 256,
 "intermediate_size": 688, "num_hidden_layers": 4, "num_attention_heads": 8, "max_position_embeddings": 512,
 "rms_norm_eps": 1e-5, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}
JSON
if [ "$SCALE" = qk ]; then # the same shape, q and k normalized per head in every layer
    sed -i 's/"pad_token_id": 0}/"pad_token_id": 0, "qk_norm": true}/' "$W/fot_config.json" "$W/base_config.json"
fi
if [ "$SCALE" = paper ]; then # Appendix E's 37M model (SwiGLU's 2/3 x 2048 keeps its feed-forward size)
    shape='"vocab_size": 512, "hidden_size": '${P_HIDDEN:-512}', "intermediate_size": '${P_FF:-1376}',
 "num_hidden_layers": '${P_LAYERS:-12}', "num_attention_heads": 8, "rms_norm_eps": 1e-5, "bos_token_id": 1,
 "eos_token_id": 2, "pad_token_id": 0'
    # memory layers: three around the paper's one (its 8th of 12), as three learned faster than one at small scale
    echo '{"architectures": ["LongLlamaForCausalLM"], "model_type": "longllama", '"$shape"', "max_position_embeddings":
 256, "mem_layers": '"${P_MEM:-[6, 7, 8]}"', "last_context_length": 256, "mem_dtype": "float32"}' > "$W/fot_config.json"
    echo '{"architectures": ["LlamaForCausalLM"], "model_type": "llama", '"$shape"', "max_position_embeddings": 512}' \
        > "$W/base_config.json"
fi

# Training data: the task's documents with the loss on the queried values and on each query's keys after the first
# (--loss-on-keys; the evaluation scores the values alone). From random weights on 513-token documents neither model
# left chance (loss 4.07 = ln 58 on the values; sessions 13-14), so training starts on short documents of the same
# task, a plain model learning the lookup in its own context: 65 tokens (3 definitions, 3 queries), then 129 (6) and
# 257 (13) for the full scale.
# The small scale then goes on to 1025- and 2049-token documents (fewer of them: ~5-8M tokens a file).
sizes="65 129 257 513"
[ "$SCALE" = small ] && sizes="65 257 513 1025 2049"
[ "$SCALE" = qk ] && sizes="65 257 513"
[ "$SCALE" = paper ] && sizes="65 513"
for n in $sizes; do
    case $n in 1025) docs=5000 ;; 2049) docs=4000 ;; *) docs=10000 ;; esac
    [ "$SCALE" = paper ] && docs=${P_DOCS:-100000} # batches of 128 documents: 10000 would repeat every 78 steps
    [ -s "$W/dict_$n.jsonl" ] || "$MNEMO" eval dict-lookup --write-data "$W/dict_$n.jsonl" --lengths "$n" \
        --query-tokens $(((n - 1) / 2)) --samples "${DOCS:-$docs}" --seed "$n" --loss-on-keys
done

train() { # OUT DATA SEQ_LEN STEPS BATCH FROM extra args... (FROM: a checkpoint directory, or "random")
    local out=$1 data=$2 seq=$3 steps=$4 batch=$5 from=$6
    shift 6
    grep -q '"done":true\|"stopped_at":true' "$W/$out.log" 2>/dev/null && return 0 # finished earlier
    local src=(--model "$from") resume=()
    [ "$from" = random ] && src=(--init random --config "$W/base_config.json" --tokenizer "$SRC/tests/fixtures/tokenizer.model")
    [ -f "$W/$out/train_state.mnemo" ] && resume=(--resume)
    "$MNEMO" train "${src[@]}" --seed 1 --data "$W/$data" --out "$W/$out" --full --seq-len "$seq" --steps "$steps" \
        --batch "$batch" --lr "$LR" --schedule cosine --warmup 50 --checkpoint-every 50 --threads "$THREADS" --json \
        --device "$DEVICE" \
        "${resume[@]}" "$@" | tee -a "$W/$out.log"
}
as_longllama() { # OUT FROM: FROM's weights in LongLLaMA layout (the same tensors; config.json names the memory layer)
    [ -f "$W/$1/config.json" ] && return 0
    mkdir -p "$W/$1" && cp "$W/$2/model.safetensors" "$W/$2/tokenizer.model" "$W/$1/" &&
        cp "$W/fot_config.json" "$W/$1/config.json"
}
with_window() { # OUT FROM N: FROM with a context of N tokens, as it trained (a LongLLaMA model: local N, each N
    # tokens to memory; the baseline: its last N tokens)
    [ -f "$W/$1/config.json" ] && return 0
    mkdir -p "$W/$1" && cp "$W/$2/model.safetensors" "$W/$2/tokenizer.model" "$W/$1/" &&
        python3 - "$W/$2/config.json" "$W/$1/config.json" "$3" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["max_position_embeddings"] = int(sys.argv[3])
if "mem_layers" in c:
    c["last_context_length"] = int(sys.argv[3])
json.dump(c, open(sys.argv[2], "w"))
PY
}

if [ "$SCALE" = qk ]; then
    # As run on 2026-11-28 (two threads; the 257 stage on one): the plain lookup in its own context, stopped at step
    # 451 of a 1000-step cosine (94.6% at 65 tokens there: without qk_norm 80% after all 1000); FoT d = 1, then 7
    # other documents' rows as negatives; then a document's own earlier rows, 8 and 16 of them, where the key match
    # appears: on 513-token documents the loss fell from 3.5 to 0.3 between steps 700 and 1600 (the 257 stage alone
    # sat near chance, 3.4-3.8, for 800 steps)
    train q65 dict_65.jsonl 64 "${STEPS_Q65:-1000}" 32 random --stop-at "${STOP_Q65:-451}"
    as_longllama q_init q65
    train q_d1 dict_65.jsonl 32 "${STEPS_QD1:-800}" 32 "$W/q_init" --fot "1/2(0,0),1/2(1,0)"
    train q_neg dict_65.jsonl 32 "${STEPS_QNEG:-600}" 32 "$W/q_d1" --fot "1/2(0,7),1/2(1,7)"
    LR=5e-4 train q_257 dict_257.jsonl 32 "${STEPS_Q257:-800}" 4 "$W/q_neg" --fot "$(seq -s, -f '1/8(%g,0)' 0 7)"
    LR=1e-3 train q_513 dict_513.jsonl 32 "${STEPS_Q513:-2000}" 2 "$W/q_257" --fot "$(seq -s, -f '1/16(%g,0)' 0 15)"
    # Then many distractors, as the paper's d = 128: the key match learned above used part of a key (at 4K tokens of
    # dictionary the first value was right 64% of the time, at 16K 23%). Each 65-token document's queries see the
    # definitions of 63 others besides its own (~190 definitions; 1K docs per 16 steps, so 100000 of them); then
    # 257-token documents with near misses (--confusable: definitions sharing 2-3 key symbols or their first values),
    # each row seeing its own earlier rows and 15 other documents' same rows
    [ -s "$W/dict_65_100k.jsonl" ] || "$MNEMO" eval dict-lookup --write-data "$W/dict_65_100k.jsonl" --lengths 65 \
        --query-tokens 32 --samples "${DOCS:-100000}" --seed 6565 --loss-on-keys
    confusable_data() { # FILE LENGTH DOCS SEED: documents of LENGTH tokens, half of them queries, 50% near misses
        [ -s "$W/$1" ] || "$MNEMO" eval dict-lookup --write-data "$W/$1" --lengths "$2" --query-tokens $(($2 / 2)) \
            --samples "${DOCS:-$3}" --seed "$4" --loss-on-keys --confusable 50
    }
    confusable_data dict_257_conf.jsonl 257 20000 2571
    LR=1e-3 train q_d64 dict_65_100k.jsonl 32 "${STEPS_QD64:-800}" 64 "$W/q_513" --fot "1/2(0,0),1/2(1,0,63)" \
        --stop-at "${STOP_QD64:-452}"
    LR=5e-4 train q_conf dict_257_conf.jsonl 32 "${STEPS_QCONF:-600}" 16 "$W/q_d64" \
        --fot "1/8(0,0),$(seq -s, -f '1/8(%g,0,15)' 1 7)"
    # and 513-token ones (25 definitions, their near misses in the same document), 7 other documents' rows
    confusable_data dict_513_conf.jsonl 513 10000 5131
    LR=3e-4 train q_conf513 dict_513_conf.jsonl 32 "${STEPS_QC513:-300}" 8 "$W/q_conf" --warmup 30 \
        --fot "1/16(0,0),$(seq -s, -f '1/16(%g,0,7)' 1 15)"
    # Last, twice the distractors: at 64K tokens (6500 definitions, ~10 of them sharing two key symbols with a
    # query's by chance) the model above answered 70%, having trained with at most ~300 definitions in memory; here
    # each row sees 15 other documents' rows (up to ~600), new documents (--seed 5132); 19 s a step on two threads
    confusable_data dict_513_conf2.jsonl 513 4000 5132
    LR=3e-4 train q_c513m dict_513_conf2.jsonl 32 "${STEPS_QC513M:-120}" 16 "$W/q_conf513" --warmup 10 \
        --checkpoint-every 10 --fot "1/16(0,0),$(seq -s, -f '1/16(%g,0,15)' 1 15)"
    # Memory temperature: the memory layers' q_norm weights x 2 (their softmax twice as sharp). At 64K the near
    # misses' values still diluted the right one's; chosen on other documents than the evaluation's (seed 11, 5 of
    # 64K tokens: x1 76.7%, x1.5 88.3, x2 91.7, x3 91.7; RESULTS.md, "memory temperature")
    [ -f "$W/q_temp/model.safetensors" ] ||
        /usr/bin/python3 "$SRC/scripts/scale_q_norm.py" "$W/q_c513m" "$W/q_temp" "${MEM_TEMPERATURE:-2}" 1,2,3
    # Last, a local context of 64: with rows of 32 every value whose definition lies whole in one row was right
    # (99-100% at 1K-16K) and those a row boundary cuts (keys in one row, the value in the next: ~20% of them) 48-67%
    # (eval dict-lookup's by_row_boundary). Rows of 64 cut half as many; the model starts from its own weights read
    # at 64 positions (the plain stage trained at 64) on new near-miss documents (--seed 5133)
    confusable_data dict_513_conf3.jsonl 513 8000 5133
    with_window q_w64 q_temp 64
    LR=3e-4 train q_r64 dict_513_conf3.jsonl 64 "${STEPS_QR64:-150}" 16 "$W/q_w64" --warmup 10 \
        --checkpoint-every 10 --fot "1/8(0,0),$(seq -s, -f '1/8(%g,0,15)' 1 7)"
    with_window q_base64 q65 64
    FOT=q_r64 BASE=q_base64 LOCAL=64 WINDOW=64 QUERY_TOKENS=30
elif [ "$SCALE" = paper ]; then
    # The paper's run: from the lookup learned in a short context (a plain model on 65-token documents, as the
    # small scale starts), FoT at local 256 on 513-token documents, the queries (row 1) reaching the definitions
    # (row 0) through memory alone: d = 1 until it answers, then d = 128 (127 other documents' row 0 beside its own,
    # the paper's Appendix E.1 schedule); the baseline: the same start trained at 512 on the same documents.
    B=${P_BATCH:-128} NEG=${P_NEG:-127}
    LR=${LR_PAPER:-1e-3} train p65 dict_65.jsonl 64 "${STEPS_P65:-1000}" $((2 * B)) random
    as_longllama p_init p65
    LR=${LR_PAPER:-1e-3} train p_d1 dict_513.jsonl 256 "${STEPS_PD1:-1500}" $((B / 2)) "$W/p_init" \
        --fot "1/2(0,0),1/2(1,0)"
    LR=${LR_PAPER:-1e-3} train p_d128 dict_513.jsonl 256 "${STEPS_PD128:-3000}" "$B" "$W/p_d1" \
        --fot "1/2(0,0),1/2(1,0,$NEG)" --recompute
    LR=${LR_PAPER:-1e-3} train p_base dict_513.jsonl 512 "${STEPS_PBASE:-3000}" $((B / 2)) "$W/p65"
    FOT=p_d128 BASE=p_base LOCAL=256 WINDOW=512
else
    # The plain curriculum's first stage is the small scale's baseline and every FoT model's starting point.
    train c65 dict_65.jsonl 64 "${STEPS_C65:-1000}" 32 random
    # FoT, local context 32: row 0 of a document holds the definitions, row 1 the queries, which see row 0 only through
    # the memory layers: first with that positive context alone (d = 1, as the paper starts), then with 7 other
    # documents' rows beside it in memory (negatives: the key match must be exact, not "a value in memory")
    as_longllama fot32_init c65
    train fot32_d1 dict_65.jsonl 32 "${STEPS_D1:-1500}" 32 "$W/fot32_init" --fot "1/2(0,0),1/2(1,0)"
    if [ "$SCALE" = small ]; then
        train fot32_neg dict_65.jsonl 32 "${STEPS_NEG:-1500}" 32 "$W/fot32_d1" --fot "1/2(0,7),1/2(1,7)"
        # ... but negatives from other documents did not teach the match among a document's own definitions (accuracy
        # fell with their number: 75% with 3, 30% with 9, 15% with 22, no better than the baseline); documents of 257
        # and then 513 tokens in rows of 32 do: each row sees every earlier row of its document in memory, so the
        # queries (the second half) look among 12, then 25 definitions of their own document
        train fot32_257 dict_257.jsonl 32 "${STEPS_257:-1000}" 4 "$W/fot32_neg" \
            --fot "$(seq -s, -f '1/8(%g,0)' 0 7)"
        train fot32_513 dict_513.jsonl 32 "${STEPS_513:-2500}" 2 "$W/fot32_257" --fot "$(seq -s, -f '1/16(%g,0)' 0 15)"
        LR=${LR_LAST:-1e-3} train fot32 dict_513.jsonl 32 "${STEPS_LAST:-3000}" 2 "$W/fot32_513" \
            --fot "$(seq -s, -f '1/16(%g,0)' 0 15)"
        # Accuracy at 16K kept rising with the number of a document's own definitions a query looks among in training
        # (one thread each; 65 / 256 / 1K / 4K / 16K tokens): 75.4 / 60.0 / 48.8 / 34.2 / 16.7% after a
        # second 513 stage, 75.0 / 62.1 / 49.2 / 38.3 / 23.8 after 1025-token documents (51 definitions), 75.0 / 61.7 /
        # 47.1 / 39.2 / 28.3 after 2049 (102): the same rows of 32, each seeing every earlier row of its document
        LR=1e-3 train fot32_513b dict_513.jsonl 32 "${STEPS_513B:-3000}" 2 "$W/fot32" \
            --fot "$(seq -s, -f '1/16(%g,0)' 0 15)"
        LR=1e-3 train fot32_1025 dict_1025.jsonl 32 "${STEPS_1025:-3000}" 1 "$W/fot32_513b" \
            --fot "$(seq -s, -f '1/32(%g,0)' 0 31)"
        LR=1e-3 train fot32_2049 dict_2049.jsonl 32 "${STEPS_2049:-4000}" 1 "$W/fot32_1025" \
            --fot "$(seq -s, -f '1/64(%g,0)' 0 63)"
        # (4097-token documents, 204 definitions, 850 steps from there: 74.2 / 60.0 / 46.7 / 39.2 / 26.2, no gain)
        with_window fot32_eval fot32_2049 32
        with_window base64 c65 64
        FOT=fot32_eval BASE=base64 LOCAL=32 WINDOW=64
    else
        # the baseline: the plain curriculum up to 512 tokens of context
        train c129 dict_129.jsonl 128 "${STEPS_C129:-1000}" 16 "$W/c65"
        train c257 dict_257.jsonl 256 "${STEPS_C257:-3000}" 8 "$W/c129"
        train base dict_513.jsonl 512 "${STEPS_BASE:-3000}" 8 "$W/c257"
        # FoT grows its local context with the documents, 64 -> 128 -> 256, the answer always through memory
        train fot64 dict_129.jsonl 64 "${STEPS_F64:-1500}" 16 "$W/fot32_d1" --fot "1/2(0,0),1/2(1,0)"
        train fot128 dict_257.jsonl 128 "${STEPS_F128:-1500}" 8 "$W/fot64" --fot "1/2(0,3),1/2(1,3)"
        train fot dict_513.jsonl 256 "${STEPS_F256:-3000}" 8 "$W/fot128" --fot "1/2(0,3),1/2(1,3)"
        FOT=fot BASE=base LOCAL=256 WINDOW=512
    fi
fi

ev() { # NAME MODEL extra args...
    local name=${SCALE}_$1 model=$2
    shift 2
    [ -s "$W/results/$name.jsonl" ] || "$MNEMO" eval dict-lookup --model "$W/$model" --lengths "$LENGTHS" \
        --query-tokens "${QUERY_TOKENS:-$((LOCAL - 2))}" --samples "$SAMPLES" --seed 7 --threads "$THREADS" \
        --json "$@" > "$W/results/$name.jsonl"
}
ev fot_dense "$FOT" --mem-knn 0
ev fot_knn32_flat "$FOT" --mem-knn 32 --mem-dense-rows 0 --mem-index flat
ev fot_knn32_ivfgrow "$FOT" --mem-knn 32 --mem-dense-rows 0 --mem-index ivf-grow
ev baseline "$BASE"
R=("$W"/results/${SCALE}_{fot_dense,fot_knn32_flat,fot_knn32_ivfgrow,baseline}.jsonl)
"$SRC/scripts/plot_eval.py" "${R[@]}" -o "$W/results/$SCALE.png" \
    --title "dictionary lookup: FoT (local $LOCAL + memory) vs baseline ($WINDOW window)"
# the table: accuracy (%) by length, one row per model and memory mode
python3 - "${R[@]}" <<'PY'
import json, os, sys
for path in sys.argv[1:]:
    rows = [json.loads(l) for l in open(path)]
    cells = "  ".join("%s %5.1f%%" % (r["length"], 100 * r["accuracy"]) for r in rows)
    print("%-24s %s" % (os.path.basename(path)[:-6], cells))
PY
