#!/usr/bin/env bash
# The whole device session in one call (docs/benchmarks.md, "GPU session"): bench/gpu_check.sh (the
# issue-7 check on the tiny model, capped at GPU_CHECK_TIMEOUT_S, default 150 s), then bench/gpu_grpo.sh
# (issue 22: ours, TRL, decode) with whatever is left of GPU_SESSION_BUDGET_S (default 540 s, counted
# from this script's start: 50 s under the device call's timeout_s=590, so the call is never killed
# before the results are written). The carried wheels are installed once (bench/gpu_env.sh).
#
#   bash bench/gpu_wheels.sh     # here, once: .whl/
#   run(command="bash bench/gpu_session.sh", carry=[".whl"], timeout_s=590)     # the device call
#   bash bench/gpu_session.sh --smoke   # the same wiring on the CPU: gpu_check.py --device cpu, gpu_grpo.py --smoke
#   (any further arguments go to bench/gpu_grpo.py, e.g. --smoke --engine ours,decode where TRL is not installed)
#
# What comes back ($OUT, else ./gpu_session_out), 7 files, under the device tool's 8:
#   check/results.json check/results.md check/log.txt
#   grpo/results.json grpo/results.md grpo/log.txt grpo/env.txt
# (each gpu_grpo part's own JSON stays in the workdir: grpo/results.json holds them all).
set -uo pipefail
cd "$(dirname "$0")/.."
START=$(date +%s)
export GPU_DEADLINE_EPOCH=$(( START + ${GPU_SESSION_BUDGET_S:-540} ))
OUT_ROOT=${OUT:-./gpu_session_out}
SMOKE=0
if [ "${1:-}" = "--smoke" ]; then SMOKE=1; shift; fi
mkdir -p "$OUT_ROOT/check" "$OUT_ROOT/grpo"
source bench/gpu_env.sh  # exits here when the wheels do not install
if [ $SMOKE = 1 ]; then
    CHECK_ARGS=(--device cpu --preset smoke --steps 2 --batch 2 --n 2)
    GRPO_ARGS=(--smoke --steps 2 --trl-steps 2 --decode-batches 2 --decode-new 4 "$@")
else
    CHECK_ARGS=()
    GRPO_ARGS=("$@")
fi
echo "== gpu_session: gpu_check (at most ${GPU_CHECK_TIMEOUT_S:-150} s), then gpu_grpo until $(( GPU_DEADLINE_EPOCH - START )) s"
OUT=$OUT_ROOT/check GPU_CHECK_TIMEOUT_S=${GPU_CHECK_TIMEOUT_S:-150} bash bench/gpu_check.sh "${CHECK_ARGS[@]}"
CHECK_RC=$?
echo "== gpu_session: gpu_check exited $CHECK_RC after $(( $(date +%s) - START )) s"
OUT=$OUT_ROOT/grpo GPU_GRPO_WORKDIR=${GPU_GRPO_WORKDIR:-/tmp/gpu_grpo_work} bash bench/gpu_grpo.sh "${GRPO_ARGS[@]}"
GRPO_RC=$?
echo "== gpu_session: gpu_grpo exited $GRPO_RC after $(( $(date +%s) - START )) s"
N=$(find "$OUT_ROOT" -type f | wc -l)
echo "== gpu_session: $N file(s) under $OUT_ROOT:"
find "$OUT_ROOT" -type f | sort
[ "$N" -le 8 ] || echo "gpu_session: more than 8 files: the device tool returns only 8" >&2
[ $CHECK_RC = 0 ] && [ $GRPO_RC = 0 ]
