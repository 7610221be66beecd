#!/usr/bin/env bash
# The accelerator check: everything gapbench measures that needs a GPU, in one command of at most eight minutes
# on one H100/H200-class device, into at most eight files (each under 16 MiB) in one output folder.
#
#   benchmarks/device_check.sh [OUTPUT_DIR]          (default: $OUT, else ./device-check-<date>)
#   DEVICE=cuda:1 LABEL=h200 PYTHON=python3 benchmarks/device_check.sh /abs/out
#   benchmarks/device_check.sh --dry-run OUT         (tiny presets on the test accelerator: what the tests run)
#
# Works from any working directory, with a relative or absolute output folder. Installs nothing from the
# network: wheels carried in .whl/ (made here by `make device-wheels`; WHEELS=DIR names another folder) are installed, with --no-index --no-deps,
# into a private folder on PYTHONPATH — each only where this interpreter lacks the package or has a version
# gapbench cannot use; what the machine has is never replaced. gapbench runs from this checkout (src/).
# Then benchmarks/device_check.py: a preflight that stops in seconds naming what is missing, the parts below in
# order (each stopped at its limit with SIGINT first, so its partial results file is written and used), and
# after every part the output folder rewritten: summary.txt, env.json, compare.md, report.html and
# device-check.tar.gz (every results file, journal and log).
set -euo pipefail

# The time plan: part and seconds of wall time on one H200, most valuable first, as the first H200 runs (2026-12-04,
# results/h200-device-check-run*/) took them: the sweeps 36 s, fixed shapes 33 s, 96 attention and convolution rows
# more than 77 s, SDXL's build and five generations 52 s, Llama-3-8B's batch 1 and 8 in 78 s with a generation of
# 9.2 s at batch 64 still to fit (this plan itself has not run there yet). The sum is at most 480 s (eight minutes
# of one ten-minute command: start-up and one rerun of a part fit beside it); the tests hold it there.
PLAN="
gemm-sweep  38   # max-achievable GEMM at bf16 and fp8 (both fp8 accumulation modes): the rows set beside published sweeps
gemm        37   # fixed square and LLM-projection shapes, every dtype (fp32 with TF32 off, tf32, bf16, fp16, fp8, int8)
membw       25   # device memory bandwidth (BabelStream kernels) and host<->device copies
micro       65   # SDPA attention and convolution at fp32 (TF32 off), tf32 and bf16 (96 rows)
models      60   # Llama-2-70B slice training and BERT-large fine-tuning
llm-infer   110  # Llama-3-8B shapes, bf16, 1k in / 128 out at batch 1, 8 and 64
sdxl        60   # SDXL inference (skipped, and said so, without diffusers): the build and 30 steps at 1024², five times
libs        40   # one 4096³ bf16 GEMM through every library path: vendor BLAS, F.linear, TunableOp, Triton, Inductor
coverage    15   # operator coverage audit at bf16 under a budget
env         10   # the device identity and software stack
compare     10   # the gap table against the built-in published references, as Markdown
report      10   # the HTML report
"

PLAN="${TIME_PLAN:-$PLAN}"  # TIME_PLAN='llm-infer 150': a rerun of parts with limits of their own (same rules)

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
DRY=()
if [ "${1:-}" = "--dry-run" ]; then DRY=(--dry-run --scale "${SCALE:-1}"); shift; fi
DIR="${1:-${OUT:-device-check-$(date +%Y%m%d-%H%M%S)}}"
mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"
PYTHON="${PYTHON:-python3}"
SITE="$(mktemp -d "${TMPDIR:-/tmp}/gapbench-site-XXXXXX")"

WHEELS="${WHEELS:-$REPO/.whl}"
if [ -d "$WHEELS" ] && compgen -G "$WHEELS/*.whl" > /dev/null; then
  # which carried wheels this interpreter needs: a package it lacks, or has at a version a requirement refuses
  mapfile -t NEED < <("$PYTHON" "$HERE/device_wheels.py" needed "$WHEELS")
  if [ ${#NEED[@]} -gt 0 ]; then
    echo "installing ${#NEED[@]} carried wheel(s) into $SITE: ${NEED[*]##*/}"
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "${NEED[@]}"
  fi
fi
export PYTHONPATH="$SITE:$REPO/src${PYTHONPATH:+:$PYTHONPATH}"
set +e
"$PYTHON" "$HERE/device_check.py" --out "$DIR" --plan "$PLAN" ${DEVICE:+--device "$DEVICE"} \
  ${LABEL:+--label "$LABEL"} ${ONLY:+--only "$ONLY"} ${DRY[@]+"${DRY[@]}"}
rc=$?
rm -rf "$SITE"
exit $rc
