#!/usr/bin/env bash
# What a session lent a GPU runs there, from the repository root, after `scripts/device_bundle.sh` here made
# .device/bundle.tar.zst (carried with the tree): the CUDA checks against the CPU, then the device
# benchmarks. Each step's output goes to $OUT/<step>.log (the device tool brings $OUT back; elsewhere ./device-out), and
# one line per step to stdout. Steps are grouped so that each group fits one 10-minute device command:
#
#   scripts/device_checks.sh correct     test_ops (SIMT, tc and mma prefill), the fixtures, device training, S2-Attn,
#                                        IVF-grow on the device
#   scripts/device_checks.sh perf        test_ops --perf, bench_cuda (SIMT and mma prefill; SPLIT and FAST), kNN on
#                                        the device
#   scripts/device_checks.sh sanitize    compute-sanitizer memcheck over test_ops and racecheck over attention
#
# Figures go to tests/bench/RESULTS.md by hand, with the device, date, commit and the command of each step.
set -uo pipefail
OUT=${OUT:-device-out}
mkdir -p "$OUT"
[ -d /tmp/dev-bundle ] || tar -I zstd -xf .device/bundle.tar.zst -C /tmp || exit 1
B=/tmp/dev-bundle/bin
export LD_LIBRARY_PATH=/tmp/dev-bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} MNEMO_FIXTURES=$PWD/tests/fixtures
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.txt" 2>&1
git log -1 --format='%H %cd' > "$OUT/commit.txt" 2> /dev/null

step() { # NAME command... : its log in $OUT/NAME.log, one summary line here
    local name=$1 t0=$SECONDS
    shift
    "$@" > "$OUT/$name.log" 2>&1
    local rc=$?
    printf '%-22s rc %d  %4ds  %s\n' "$name" "$rc" $((SECONDS - t0)) "$(grep -E 'passed|failed|FAIL|SKIP' \
        "$OUT/$name.log" | tail -1)"
}

case ${1:-correct} in
correct)
    step test_ops "$B/test_ops" --quiet
    step test_ops_mma "$B/test_ops" --quiet --set cuda.attn=mma attention
    step test_ops_tc "$B/test_ops" --quiet --set cuda.attn=tc attention
    step fixtures env MNEMO_TEST_DEVICE=cuda "$B/test_reference_models"
    step fixtures_mma env MNEMO_TEST_DEVICE=cuda "$B/test_reference_models" --set cuda.attn=mma
    step train_device env MNEMO_TEST_DEVICE=cuda "$B/test_train_device"
    step s2_attn env MNEMO_TEST_DEVICE=cuda "$B/test_s2_attn"
    [ -x "$B/test_mem_device_ivf" ] && step mem_device_ivf env MNEMO_TEST_DEVICE=cuda "$B/test_mem_device_ivf"
    [ -x "$B/test_longllama" ] && step longllama env MNEMO_TEST_DEVICE=cuda "$B/test_longllama" # kNN in the engine
    ;;
perf)
    step perf_ops "$B/test_ops" --perf attention matmul
    step perf_attention_mma "$B/test_ops" --perf --set cuda.attn=mma attention
    step bench_cuda "$B/bench_cuda" --contexts 2048,16384
    step bench_cuda_mma "$B/bench_cuda" --contexts 2048,16384 --set cuda.attn=mma
    [ -x "$B/bench_knn_device" ] && step bench_knn_device "$B/bench_knn_device" --rows 1048576 --hd 100 --k 128 \
        --queries 1,512 --nprobe 16
    ;;
sanitize)
    step memcheck compute-sanitizer --tool memcheck --leak-check full "$B/test_ops" --quiet
    step racecheck_attention compute-sanitizer --tool racecheck "$B/test_ops" --quiet attention
    step racecheck_mma compute-sanitizer --tool racecheck "$B/test_ops" --quiet --set cuda.attn=mma attention
    ;;
*)
    echo "usage: scripts/device_checks.sh correct|perf|sanitize" >&2
    exit 2
    ;;
esac
