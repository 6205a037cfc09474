#!/usr/bin/env bash
# The GPU check: one CUDA GPU, at most 8 minutes, one figure per line (key=value).
#
#     bench/gpu_check.sh            # run it (needs a CUDA build of torch in $PY, default .venv/bin/python)
#     bench/gpu_check.sh --dry-run  # print what it would run, and exit 0 (no GPU needed)
#
# Steps, each under its own time limit (together 8 minutes):
#   1. train experiments/smoke.yaml on CUDA in bfloat16;
#   2. train 2 steps of experiments/quickstart.yaml on CUDA in bfloat16 (its held-out evals included);
#   3. bench/bench_vs_trl.py --quick (both sides on the GPU);
#   4. bench/bench_sampler.py --quick (hf and vLLM, with $VLLM_PY), when $VLLM_PY exists;
#   5. peak GPU memory: the largest `cuda_peak_mb` the runs logged, and the device's peak in use
#      (nvidia-smi, sampled every 0.5 s over the whole check).
# Run outputs go to $OUT (default runs/gpu_check). A step that fails or runs out of time prints
# `<step>_failed=<exit code>` and the check goes on.
set -uo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-.venv/bin/python}
VLLM_PY=${VLLM_PY:-.venv-vllm/bin/python}
OUT=${OUT:-runs/gpu_check}
DRY=0
case "${1:-}" in
  --dry-run) DRY=1 ;;
  "") ;;
  *) echo "usage: bench/gpu_check.sh [--dry-run]" >&2; exit 2 ;;
esac

VLLM_BENCH=bench/bench_sampler.py

# name | time limit (s) | command
STEPS=(
  "smoke|60|$PY -m pettingllms_cli train experiments/smoke.yaml --out $OUT/smoke --overwrite --set models.tiny.dtype=bfloat16"
  "quickstart|150|$PY -m pettingllms_cli train experiments/quickstart.yaml --out $OUT/quickstart --overwrite --max-steps 2 --set models.smol.dtype=bfloat16"
  "bench_vs_trl|180|$PY bench/bench_vs_trl.py --quick"
)
VLLM_SKIP=""  # why the vLLM bench does not run, if it does not
if [[ ! -x "$VLLM_PY" ]]; then
  VLLM_SKIP="no $VLLM_PY (make setup-vllm, or set VLLM_PY=...)"
else
  STEPS+=("vllm|90|$VLLM_PY $VLLM_BENCH --quick")
fi

if [[ $DRY == 1 ]]; then
  for step in "${STEPS[@]}"; do
    IFS='|' read -r name limit cmd <<<"$step"
    echo "would run ($name, at most ${limit}s): $cmd"
  done
  [[ -n "$VLLM_SKIP" ]] && echo "would skip the vLLM sampler bench: $VLLM_SKIP"
  echo "would report: gpu_name, <run>_seconds_per_step, <run>_tokens_per_second, <run>_eval_seconds, speedup_vs_trl, <run>_cuda_peak_mb, gpu_peak_memory_mb"
  exit 0
fi

if ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "no CUDA device visible to $PY (make setup installs the CPU build of torch; install a CUDA build, or set PY=...)" >&2
  exit 1
fi
mkdir -p "$OUT"
[[ -n "$VLLM_SKIP" ]] && echo "vllm_skipped=\"$VLLM_SKIP\"" >&2
echo "gpu_name=$("$PY" -c 'import torch; print(torch.cuda.get_device_name(0).replace(" ", "_"))')"

POLL_PID=""
if command -v nvidia-smi >/dev/null; then  # the device's memory in use, every 0.5 s, for the whole check
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 500 >"$OUT/memory_used.csv" 2>/dev/null &
  POLL_PID=$!
fi

run_figures() {  # $1: run name, $2: run directory; the figures of its metrics.jsonl and eval_before.json
  "$PY" - "$1" "$2" <<'EOF'
import json, sys
name, run = sys.argv[1], sys.argv[2]
rows = [json.loads(line) for line in open(f"{run}/metrics.jsonl")]
print(f"{name}_steps={len(rows)}")
print(f"{name}_seconds_per_step={sum(r['seconds'] for r in rows) / len(rows):.2f}")
print(f"{name}_tokens_per_second={sum(r['tokens_per_second'] for r in rows) / len(rows):.1f}")
print(f"{name}_cuda_peak_mb={max(r.get('cuda_peak_mb', 0.0) for r in rows):.0f}")
print(f"{name}_eval_seconds={json.load(open(f'{run}/eval_before.json'))['seconds']:.2f}")
EOF
}

for step in "${STEPS[@]}"; do
  IFS='|' read -r name limit cmd <<<"$step"
  began=$(date +%s.%N)
  timeout "$limit" $cmd >"$OUT/$name.log" 2>&1
  rc=$?
  echo "${name}_wall_seconds=$(awk -v a="$began" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')"
  if [[ $rc != 0 ]]; then
    echo "${name}_failed=$rc"
    continue
  fi
  case "$name" in
    smoke | quickstart) run_figures "$name" "$OUT/$name" ;;
    *) grep -E '^[A-Za-z_0-9]+=[^ ]+$' "$OUT/$name.log" ;;  # the bench's own figures
  esac
done

if [[ -n "$POLL_PID" ]]; then
  kill "$POLL_PID" 2>/dev/null
  echo "gpu_peak_memory_mb=$(sort -n "$OUT/memory_used.csv" | tail -n 1)"
fi
