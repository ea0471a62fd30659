"""Benchmark: the learning demo with a learned reward model as the ONLY reward (issue 18).

Run: .venv/bin/python bench/reward_model.py [--warm DIR] [--rm-steps 600] [--steps 40] [--test-freq 5]
     [--grpo-seconds 900] [--val 128] [--seed 0] [--threads 1] [--out /tmp/rlstudio_rm]
     [--write docs/benchmarks.md] [KEY=VALUE ...]

1. The demo's warm start (bench.learning.warm_start: `--warm`, or built under --out).
2. The demo's reward model (trainer.models.demo_rm): the warm start's body with fresh layers and a
   one-label head, trained for --rm-steps on rule-labelled transcripts and matched pairs of train-split
   problems; its accuracy (the sign of its score against the rule's label) on transcripts of held-out
   problems, per kind, and how often it scores a right transcript above a wrong one, per way of
   making the wrong one (demo_rm_data.ranking_by_way, 128 held-out problems).
3. `python -m trainer run --recipe demo_tool_arith` with `reward_model.enable=true`,
   `reward_model.model.path=<2>` and `reward_model.rule_weight=0` (the reward model replaces the rule,
   verl's behaviour), from the same warm start and data as bench/learning.py. Validation scores with the
   rule alone (as verl validates), so the curve read back, val-core/arith/reward/mean@1, is the held-out
   reward BY THE RULE of a policy trained only on the reward model's scores.
4. With --write, the figures and the machine replace `<!-- bench:reward_model:begin/end -->`.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.learning import (  # noqa: E402
    TARGET,
    curve_summary,
    machine,
    read_curve,
    read_steps,
    run_grpo,
    warm_start,
    write_jsonl,
)
from bench.md_sections import replace_section  # noqa: E402

SECTION = "reward_model"
RM_OVERRIDES = ("reward_model.enable=true", "reward_model.rule_weight=0.0", "reward_model.rm_weight=1.0")


def pairs_text(rm: dict) -> str:
    """How the reward model was built and its batches made, when it trained on matched pairs."""
    if not rm.get("pairs"):
        return ""
    return (f" ({rm['pairs']} matched pairs of a right transcript and the same with only the answer or the call "
            f"changed, the rest from the mix; BCE + {rm.get('pair_weight', 1.0):g} x Bradley-Terry on the pairs + "
            f"{rm.get('prefix_weight', 0.0):g} x the per-token terms (every token from where a pair differs, and a "
            f"Bradley-Terry term on the first differing token); {rm.get('extra_layers', 0)} fresh layers "
            f"on the policy's body, the body at lr {rm.get('body_lr', rm.get('lr', 1e-3)):g})")


def way_table(ranking: dict) -> list[str]:
    """The share of held-out problems whose right transcript the reward model scores above a wrong one,
    per way of making the wrong one (trainer.models.demo_rm_data.ranking_by_way)."""
    if not ranking:
        return []
    return ["| wrong transcript made by | " + " | ".join(ranking) + " |", "|---|" + "---:|" * len(ranking),
            "| right one scored higher | " + " | ".join(f"{v:.3f}" for v in ranking.values()) + " |", ""]


def kind_table(rm: dict) -> list[str]:
    """The reward model's agreement with the rule per kind of transcript on held-out problems."""
    by_kind = rm.get("held_out_by_kind")
    if not by_kind:
        return []
    pairs = by_kind.get("pair_ranking")
    kinds = [k for k in by_kind if k != "pair_ranking"]
    return ["| held-out problems | " + " | ".join(kinds) + " | matched pairs ranked right |",
            "|---|" + "---:|" * (len(kinds) + 1),
            "| agreement with the rule | " + " | ".join(f"{by_kind[k]:.3f}" for k in kinds)
            + (f" | {pairs:.3f} |" if pairs is not None else " | |"), ""]


def render(res: dict) -> str:
    rm, s = res["rm"], res["summary"]
    lines = [f"<!-- bench:{SECTION}:begin -->", "### Learning demo with a reward model as the only reward", "",
             f"Command: `{res['command']}`  ",
             f"Machine: {res['machine']}; torch {res['torch']}, threads {res['threads']}.", "",
             f"Warm start: {res['warm_text']}; sampled held-out reward (rule) {res['warm_eval']['reward']:.3f}.",
             "",
             f"Reward model (`trainer.models.demo_rm`, the warm start's body with a one-label head): "
             f"{rm['steps']} steps of batch {rm.get('batch', 32)}{pairs_text(rm)}, lr {rm.get('lr', 1e-3):g}, "
             f"in {rm['seconds']:.0f} s; final loss {rm['loss']:.3f}; "
             f"sign accuracy against the rule's label {rm['train_accuracy']:.3f} on training transcripts of the mix, "
             f"**{rm['held_out_accuracy']:.3f}** on transcripts of held-out problems.", "",
             *kind_table(rm),
             *way_table(res.get("ranking_by_way", {})),
             f"GRPO (`demo_tool_arith`, {' '.join(RM_OVERRIDES)}: the reward model alone; validation on "
             f"{res['val']} held-out prompts at temperature 1 scored by the rule): {res['wall_s']:.0f} s wall, "
             f"{res['steps']['steps']} steps, {res['steps']['s_per_step']:.1f} s/step, of which "
             f"timing_s/reward_model {res['rm_s_per_step']:.2f} s.", "",
             "| step | seconds since start | val-core/arith/reward/mean@1 (rule, sampled) |", "|---:|---:|---:|"]
    lines += [f"| {p['step']} | {p['seconds']} | {p['reward']:.3f} |" for p in res["curve"]]
    first = s["first"]
    lines += ["", (f"Reached {TARGET} at step {first['step']}, {first['seconds']} s into the run"
                   if first else f"Did not reach {TARGET}") + f"; best {s['best']:.3f}, mean of the last three "
              f"validations {s['last3']:.3f}.", f"<!-- bench:{SECTION}:end -->"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--warm", default=None, help="reuse this warm-started model")
    ap.add_argument("--warm-steps", type=int, default=None)
    ap.add_argument("--rm", default=None, help="reuse this trained reward model (skip step 2)")
    ap.add_argument("--rm-steps", type=int, default=600)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--test-freq", type=int, default=5)
    ap.add_argument("--grpo-seconds", type=float, default=900.0)
    ap.add_argument("--val", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="/tmp/rlstudio_rm")
    ap.add_argument("--write", default=None)
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args(argv)

    import torch

    from trainer.models.demo import evaluate_sampled
    from trainer.models.demo_rm import make_demo_reward_model
    from trainer.models.demo_rm_data import ranking_by_way
    from trainer.workers.reward_model import RewardModelWorker
    from trainer.tasks import arith

    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    warm, info = warm_start(args, out)
    data = out / "data"
    data.mkdir(exist_ok=True)
    write_jsonl(data / "train.jsonl", arith.make_rl_rows("train", 4096, seed=args.seed))
    test = arith.make_rl_rows("test", args.val, seed=args.seed + 1)
    write_jsonl(data / "test.jsonl", test)
    ev = evaluate_sampled(warm, test, temperature=1.0, threads=args.threads)
    print(f"warm start sampled held-out reward {ev.reward:.3f}", flush=True)

    if args.rm:
        rm_dir = Path(args.rm)
        rm = json.loads((rm_dir / "demo_rm_train.json").read_text())
    else:
        rm_dir = out / "rm"
        if rm_dir.exists():
            shutil.rmtree(rm_dir)
        rm = make_demo_reward_model(rm_dir, init=warm, steps=args.rm_steps, seed=args.seed,
                                    log=lambda m: print("rm:", m, flush=True))
    print("reward model:", json.dumps(rm), flush=True)
    ranking = ranking_by_way(RewardModelWorker(str(rm_dir), device=torch.device("cpu"), micro_batch=64), n=128)
    print("right above wrong, per way:", json.dumps(ranking), flush=True)

    run_dir = out / "grpo_rm"
    if run_dir.exists():
        shutil.rmtree(run_dir)
    t0 = time.perf_counter()
    cmd, secs, _ = run_grpo(warm=warm, data=data, out=run_dir, steps=args.steps, test_freq=args.test_freq,
                            seconds=args.grpo_seconds, threads=args.threads,
                            extra=[*RM_OVERRIDES, f"reward_model.model.path={rm_dir}", *args.overrides])
    curve, _ = read_curve(run_dir / "events.jsonl")
    rm_times = [json.loads(line)["data"]["metrics"].get("timing_s/reward_model")
                for line in (run_dir / "events.jsonl").read_text().splitlines() if '"timing_s/reward_model"' in line]
    rm_times = [t for t in rm_times if t is not None]
    for p in curve:
        print(f"step {p['step']:3d}  {p['seconds']:6.1f} s  val reward (rule) {p['reward']:.3f}", flush=True)
    res = {"command": "python bench/reward_model.py " + " ".join(argv if argv is not None else sys.argv[1:]),
           "machine": machine(), "torch": torch.__version__, "threads": args.threads,
           "warm_text": f"{info['steps']} SFT steps, seed {args.seed}", "warm_eval": ev.__dict__, "rm": rm,
           "ranking_by_way": ranking, "val": args.val, "wall_s": secs or (time.perf_counter() - t0), "curve": curve,
           "steps": read_steps(run_dir / "events.jsonl"), "summary": curve_summary(curve), "grpo_cmd": cmd,
           "rm_s_per_step": sum(rm_times) / len(rm_times) if rm_times else 0.0}
    (out / "reward_model.json").write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps(res["summary"]), flush=True)
    if args.write:
        replace_section(Path(args.write), render(res), begin=f"<!-- bench:{SECTION}:begin -->",
                        end=f"<!-- bench:{SECTION}:end -->")
        print(f"updated {args.write}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
