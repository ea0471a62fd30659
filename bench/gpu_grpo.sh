#!/usr/bin/env bash
# Issue 22's device check, one prepared script for one GPU (no Ray), within 8 minutes:
#   bench/gpu_grpo.py: GRPO at Qwen2.5-0.5B's shapes (random init) on GSM8K prompts, 64 prompts x 5
#   samples x 1,024 tokens, 4 steps through RL Studio's trainer (FSDP2 on one rank, the hf engine with
#   CUDA graphs), the hf engine's decode against `generate` at batches 64 / 256 / 1,024, then 3
#   generation batches through TRL's GRPOTrainer; verl's perf/throughput and perf/mfu/actor, the
#   generation share, peak memory per phase. Results in $OUT (else ./gpu_grpo_out): results.json,
#   results.md (the docs section), log.txt, and each part's JSON.
#
#   bash bench/gpu_wheels.sh                   # here, once: the wheels the device image lacks -> .whl/
#   run(command="bash bench/gpu_grpo.sh", carry=[".whl"], timeout_s=480)    # the device call
#   python bench/gpu_grpo.py --from-json RESULTS.json --out /tmp/x --write docs/benchmarks.md   # back here
#
# A budget (GPU_GRPO_BUDGET_S, default 400 s, counted from the start) stops the parts in time for the files to come back; TRL,
# the last part, keeps the generation batches it finished.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] && PY=.venv/bin/python
OUT_DIR=${OUT:-./gpu_grpo_out}
mkdir -p "$OUT_DIR"
if ls .whl/*.whl >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
export RLSTUDIO_FIXTURE_CACHE=${RLSTUDIO_FIXTURE_CACHE:-/tmp/rlstudio-fixtures}
{
    echo "python: $PY; out: $OUT_DIR"
    "$PY" -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available(), '| transformers', transformers.__version__)"
    "$PY" -c "import trl, datasets; print('trl', trl.__version__, '| datasets', datasets.__version__)" || echo "TRL not importable: the trl part will fail (bash bench/gpu_wheels.sh, carry .whl)"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || true
} 2>&1 | tee "$OUT_DIR/env.txt"
timeout $(( ${GPU_GRPO_BUDGET_S:-400} + 30 )) "$PY" bench/gpu_grpo.py --out "$OUT_DIR" --workdir /tmp/gpu_grpo_work \
    --budget-s "${GPU_GRPO_BUDGET_S:-400}" "$@" 2>&1 | tee "$OUT_DIR/log.txt"
