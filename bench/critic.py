"""Benchmark: the critic's cost, PPO+GAE against GRPO step time on the same batches.

Run: .venv/bin/python bench/critic.py [--model WARM] [--steps 5] [--warmup 1] [--rounds 2] [--threads 1]
     [--out /tmp/rlstudio_bench_critic] [--write docs/benchmarks.md]

1. The model: --model (e.g. the learning demo's warm start, bench/learning.py's OUT/warm), else the
   tiny demo-preset model built here (trainer.models.tiny, seed 0); the arithmetic task's prompts
   (trainer.tasks.arith) with the calculator tool, as the demo.
2. `python -m trainer run --recipe demo_tool_arith` (8 prompts x 8 samples, multi-turn, one mini-batch)
   twice per round, each in its own process, alternating: GRPO, and PPO with a critic
   (algorithm.adv_estimator=gae). The actor's learning rate is 1e-12, so the policy does not move and
   every step samples the same batch in both runs (same seeds, same weights): the two step times differ
   only by what the algorithm does with it. The script checks it (the per-step mean response length and
   score must match) and says so.
3. Read back per run the mean over the steps after --warmup of timing_s/step and its phases (gen, ref,
   old_log_prob, values, adv, update_critic, update_actor); the median over --rounds of each; the
   critic's share: values + update_critic, the step time GAE adds over GRPO, and per run the critic's
   time over the actor's update (a ratio within one process, so less at the mercy of the load).
4. With --write, the table, the machine and the command replace the text between
   `<!-- bench:critic:begin -->` and `<!-- bench:critic:end -->`.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.md_sections import cpu_name, replace_section  # noqa: E402

BEGIN, END = "<!-- bench:critic:begin -->", "<!-- bench:critic:end -->"
PHASES = ("gen", "reward", "old_log_prob", "ref", "values", "adv", "update_critic", "update_actor", "step")
MODES = {"grpo": [], "gae": ["algorithm.adv_estimator=gae", "critic.optim.lr=1e-3"]}


def overrides(args: argparse.Namespace, model: Path, data: Path, out: Path, mode: str) -> list[str]:
    return [f"actor_rollout_ref.model.path={model}", f"data.train_files={data}", f"trainer.default_local_dir={out}",
            f"trainer.total_training_steps={args.warmup + args.steps}", "trainer.test_freq=-1",
            "trainer.val_before_train=false", "trainer.save_freq=-1", "trainer.export_hf=false",
            "trainer.resume_mode=disable", f"trainer.torch_threads={args.threads}", "trainer.logger=[\"jsonl\"]",
            "report.token_view=false", "actor_rollout_ref.actor.optim.lr=1e-12", *MODES[mode]]


def step_metrics(events_path: Path) -> dict[int, dict]:
    """{step: metrics} of a run's training steps."""
    out = {}
    for line in events_path.read_text(encoding="utf-8").splitlines():
        ev = json.loads(line)
        if ev["type"] == "metrics" and "timing_s/step" in ev["data"]["metrics"]:
            out[ev["data"]["step"]] = ev["data"]["metrics"]
    return out


def summarize(steps: dict[int, dict], *, warmup: int) -> dict:
    """Mean seconds per phase over the steps after `warmup` (0 for a phase the run does not have)."""
    kept = [m for s, m in sorted(steps.items()) if s > warmup]
    if not kept:
        raise RuntimeError("no step after the warm-up steps")
    return {p: sum(m.get(f"timing_s/{p}", 0.0) for m in kept) / len(kept) for p in PHASES}


def same_batches(a: dict[int, dict], b: dict[int, dict]) -> bool:
    """Whether two runs sampled the same batch at every step (mean response length and score equal)."""
    keys = ("response_length/mean", "critic/score/mean")
    return sorted(a) == sorted(b) and all(a[s][k] == b[s][k] for s in a for k in keys)


def critic_ratio(phases: dict) -> float:
    """The critic's time (values + update_critic) over the actor's update, within one run."""
    return (phases["values"] + phases["update_critic"]) / max(phases["update_actor"], 1e-9)


def run(args: argparse.Namespace, model: Path, data: Path, out: Path, mode: str) -> dict[int, dict]:
    if out.exists():
        import shutil

        shutil.rmtree(out)
    cmd = [sys.executable, "-m", "trainer", "run", "--recipe", "demo_tool_arith",
           *overrides(args, model, data, out, mode)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} run failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
    return step_metrics(out / "events.jsonl")


def render(res: dict) -> str:
    g, p = res["median"]["grpo"], res["median"]["gae"]
    lines = [BEGIN, "### PPO+GAE against GRPO: the critic's cost (`bench/critic.py`)", "",
             f"Command: `{res['command']}`  ",
             f"Machine: {res['machine']}; torch {res['torch']}, threads {res['threads']}.", "",
             f"Model: {res['model']}. Workload: `demo_tool_arith` (8 prompts x 8 samples, calculator tool, up to 3 "
             "turns, one mini-batch, no KL), actor lr 1e-12 so the policy stays put and both algorithms train on "
             f"the same batch at every step ({'checked: equal' if res['same'] else 'NOT equal: see the JSON'}); "
             f"{res['steps']} steps after {res['warmup']} warm-up step(s), mean per step, median of {res['rounds']} "
             "alternating rounds (each run its own process). The critic is a full copy of the model (its body "
             "and a scalar head): one forward for the values, then a forward and backward per micro-batch in "
             "its update.", "",
             "| seconds per step | GRPO | PPO+GAE |", "|---|---:|---:|"]
    for ph in PHASES:
        lines.append(f"| {'**step**' if ph == 'step' else ph} | {g[ph]:.3f} | {p[ph]:.3f} |")
    critic = p["values"] + p["update_critic"]
    ratios = [critic_ratio(rnd["gae"]) for rnd in res["rounds_data"]]
    lines += ["", f"The critic (values + update_critic) costs {critic:.3f} s a step, "
              f"{100 * critic / p['step']:.0f}% of the PPO+GAE step; the step is "
              f"{p['step'] / g['step']:.2f}x GRPO's ({p['step'] - g['step']:+.3f} s). Runs: "
              + ", ".join(f"{m} {r['step']:.3f}" for rnd in res["rounds_data"] for m, r in rnd.items()) + " s/step. "
              "Within each PPO+GAE run, whatever the load, the critic took "
              + ", ".join(f"{x:.2f}" for x in ratios) + f"x the actor's update (median {statistics.median(ratios):.2f}).",
              END]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="model folder (default: the tiny demo-preset model, built here)")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="/tmp/rlstudio_bench_critic")
    ap.add_argument("--write", default=None)
    args = ap.parse_args(argv)

    import torch

    from trainer.tasks import arith

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.model:
        model = Path(args.model)
        if not (model / "config.json").exists():
            ap.error(f"--model {model} is not a model folder (no config.json)")
        label = f"`{model.name}` ({args.model})"
    else:
        from trainer.models.tiny import make_tiny_model

        model = Path(make_tiny_model(out / "model", preset="demo", seed=0))
        label = "the tiny demo-preset model, untrained (trainer.models.tiny, seed 0)"
    data = out / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in arith.make_rl_rows("train", 256, seed=0)))
    mach = f"{cpu_name()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the start"
    rounds, same = [], True
    for r in range(args.rounds):
        runs = {m: run(args, model, data, out / f"{m}_{r}", m) for m in (("grpo", "gae") if r % 2 == 0 else ("gae", "grpo"))}
        same = same and same_batches(runs["grpo"], runs["gae"])
        rounds.append({m: summarize(s, warmup=args.warmup) for m, s in runs.items()})
        print(f"round {r}: " + ", ".join(f"{m} {v['step']:.3f} s/step" for m, v in rounds[-1].items()), flush=True)
    median = {m: {p: statistics.median(rd[m][p] for rd in rounds) for p in PHASES} for m in MODES}
    res = {"command": "python bench/critic.py " + " ".join(argv if argv is not None else sys.argv[1:]),
           "machine": mach, "torch": torch.__version__, "threads": args.threads, "model": label,
           "steps": args.steps, "warmup": args.warmup, "rounds": args.rounds, "same": same,
           "rounds_data": rounds, "median": median}
    (out / "critic.json").write_text(json.dumps(res, indent=2) + "\n")
    print(render(res))
    if args.write:
        replace_section(Path(args.write), render(res), begin=BEGIN, end=END)
        print(f"updated {args.write}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
