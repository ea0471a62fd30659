#!/usr/bin/env bash
# GPU check (issue 7): one prepared script, one GPU, no Ray. Within its time limit (GPU_CHECK_TIMEOUT_S,
# default 540 s) it runs:
#   NCCL init (a one-rank process group + an all-reduce), FSDP2 (fully_shard) + the hf rollout engine
#   on the tiny demo model, 5 GRPO steps with bucketed weight sync, the CUDA memory timeline, step time
#   and the MFU of the update; then, when sglang is importable, the SGLang hybrid engine (FSDP2 ->
#   SGLang bucketed weight sync, memory release/resume, the memory timeline; bench/gpu_check.py's
#   docstring), else results.md says "SGLang hybrid engine: not run: sglang not installed".
#   Results go to $OUT (or ./gpu_check_out): results.json + results.md (written after the NCCL check and
#   after every step, so a run stopped at its limit keeps what it finished) and log.txt.
#   The carried wheels (.whl/, bench/gpu_wheels.sh) are installed first, as for gpu_grpo.sh (bench/gpu_env.sh):
#   the trainer's data reader needs `datasets`, which the device image lacks.
#
#   bash bench/gpu_check.sh                 # $PYTHON, else .venv/bin/python when present, else python3
#   bash bench/gpu_check.sh --sglang only   # the SGLang section alone
#   bash bench/gpu_check.sh --device cpu --preset smoke --steps 2 --batch 2 --n 2   # the wiring on the CPU
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/gpu_env.sh
OUT_DIR=${OUT:-./gpu_check_out}
mkdir -p "$OUT_DIR"
{
    echo "out: $OUT_DIR"
    gpu_env_report
} 2>&1 | tee "$OUT_DIR/log.txt"
gpu_preflight torch transformers datasets 2>&1 | tee -a "$OUT_DIR/log.txt" || exit 1
timeout -k 10 "${GPU_CHECK_TIMEOUT_S:-540}" "$PY" bench/gpu_check.py --out "$OUT_DIR" "$@" 2>&1 | tee -a "$OUT_DIR/log.txt"
