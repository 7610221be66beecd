#!/usr/bin/env bash
# The accelerator check: everything gapbench measures that needs a GPU, in one run of at most ten minutes on
# one H100/H200-class device, into one folder. Installs nothing; runs gapbench from this checkout
# (PYTHONPATH=src) when it is not installed. A part that fails is reported and the next one runs.
#
#   benchmarks/device_check.sh [OUTPUT_DIR]        (default: $OUT, else ./device-check-<date>)
#   DEVICE=cuda:1 PYTHON=python3 benchmarks/device_check.sh out/
#
# Parts: env; GEMM (standard shapes and the sweep at bf16, fp8, fp16, tf32); memory bandwidth with host<->device
# copies; the article's model rows that fit (Llama-2-70B slice training, BERT-large fine-tuning, SDXL when
# diffusers is installed); LLM inference (Llama-3-8B shapes, bf16, 1k in / 128 out at batch 1, 8 and 64); the
# library paths of one GEMM (vendor BLAS, F.linear, TunableOp, Triton, Inductor) at bf16; an operator coverage
# audit at bf16 under a budget; a comparison with the built-in published references. Each part's log is PART.log beside its results; summary.txt says how each ended.
set -u
cd "$(dirname "$0")/.."
DIR="${1:-${OUT:-device-check-$(date +%Y%m%d-%H%M%S)}}"
DEVICE="${DEVICE:-cuda}"
PYTHON="${PYTHON:-python3}"
mkdir -p "$DIR"
if ! "$PYTHON" -c "import gapbench" 2>/dev/null; then
  export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
fi
if ! "$PYTHON" -c "import expecttest" 2>/dev/null; then
  # the OpInfo database imports expecttest only for its test-case class; the audit uses none of it
  mkdir -p "$DIR/.shim" && printf 'import unittest\n\n\nclass TestCase(unittest.TestCase):\n    pass\n' \
    > "$DIR/.shim/expecttest.py"
  export PYTHONPATH="$PYTHONPATH:$PWD/$DIR/.shim"
fi
export GAPBENCH_DB="$DIR/history.sqlite" HF_HUB_OFFLINE=1
GB=("$PYTHON" -m gapbench)
START=$(date +%s)
: > "$DIR/summary.txt"

part() {  # part NAME LIMIT_S COMMAND...
  local name=$1 limit=$2; shift 2
  local t0; t0=$(date +%s)
  echo "== $name: started ($(( t0 - START )) s into the check, limit ${limit} s)"
  timeout --kill-after=15 "$limit" "$@" > "$DIR/$name.log" 2>&1
  local rc=$? dt=$(( $(date +%s) - t0 ))
  local how="ok"
  [ $rc -eq 0 ] || how="failed (exit $rc)"
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && how="stopped at its limit"
  echo "== $name: $how in ${dt} s; last lines:"
  tail -n 3 "$DIR/$name.log" | sed 's/^/   /'
  echo "$name: $how in ${dt} s" >> "$DIR/summary.txt"
}

part env 30 "${GB[@]}" env --device "$DEVICE" --json
cp "$DIR/env.log" "$DIR/env.json" 2>/dev/null
part gemm 120 "${GB[@]}" run --device "$DEVICE" -w gemm:standard --dtype bf16,fp8,fp16,tf32 \
  --variant-budget 3 --label "$DEVICE" -q -o "$DIR/gemm.json"
part membw 60 "${GB[@]}" run --device "$DEVICE" -w membw:standard --variant-budget 6 --label "$DEVICE" -q \
  -o "$DIR/membw.json"
MODELS=(-w llm-train:llama2-70b-slice -w bert-finetune:bert-large-128)
"$PYTHON" -c "import diffusers" 2>/dev/null && MODELS+=(-w diffusion-infer:sdxl)
part models 120 "${GB[@]}" run --device "$DEVICE" "${MODELS[@]}" --variant-budget 35 --label "$DEVICE" -q \
  -o "$DIR/models.json"
part llm-infer 80 "${GB[@]}" run --device "$DEVICE" -w llm-infer:llama3-8b --dtype bf16 --input-len 1024 \
  --output-len 128 --batch-size 1,8,64 --variant-budget 20 --label "$DEVICE" -q -o "$DIR/llm-infer.json"
part libs 70 "${GB[@]}" run --device "$DEVICE" -w gemm-libs --dtype bf16 --variant-budget 4 --label "$DEVICE" -q \
  -o "$DIR/libs.json"
part coverage 60 "${GB[@]}" coverage --device "$DEVICE" --dtype bfloat16 --budget 45 --max-samples 2 \
  --op-timeout 20 --label "$DEVICE" -o "$DIR/coverage-bf16.json"
RESULTS=()
for f in gemm membw models llm-infer libs; do [ -s "$DIR/$f.json" ] && RESULTS+=("$DIR/$f.json"); done
if [ ${#RESULTS[@]} -gt 0 ]; then
  part compare 20 "${GB[@]}" compare --label "$DEVICE" "${RESULTS[@]}" --ref h100-sxm --ref h200 --ref mi300x \
    --format md
  cp "$DIR/compare.log" "$DIR/compare.md" 2>/dev/null
  part report 20 "${GB[@]}" report --label "$DEVICE" "${RESULTS[@]}" --ref h100-sxm --ref h200 -o "$DIR/report.html"
fi
echo "== done in $(( $(date +%s) - START )) s; results in $DIR"
cat "$DIR/summary.txt"
