#!/usr/bin/env bash
# GPU check (issue 7): one prepared script, one GPU, no Ray. Within 10 minutes it runs:
#   NCCL init (a one-rank process group + an all-reduce), FSDP2 (fully_shard) + the hf rollout engine
#   on the tiny demo model, 5 GRPO steps with bucketed weight sync, the CUDA memory timeline, step time
#   and the MFU of the update; then, when sglang is importable, the SGLang hybrid engine (FSDP2 ->
#   SGLang bucketed weight sync, memory release/resume, the memory timeline; bench/gpu_check.py's
#   docstring), else results.md says "SGLang hybrid engine: not run: sglang not installed".
#   Results go to $OUT (or ./gpu_check_out) as results.json + results.md.
#
#   bash bench/gpu_check.sh            # uses .venv/bin/python when present, else python3
#   bash bench/gpu_check.sh --sglang only   # the SGLang section alone
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
OUT_DIR=${OUT:-./gpu_check_out}
mkdir -p "$OUT_DIR"
echo "python: $PY; out: $OUT_DIR"
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available())"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || true
timeout 540 "$PY" bench/gpu_check.py --out "$OUT_DIR" "$@" 2>&1 | tee "$OUT_DIR/log.txt"
