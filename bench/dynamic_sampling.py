"""Benchmark: what DAPO's dynamic sampling costs on the demo task, against plain GRPO.

Run: .venv/bin/python bench/dynamic_sampling.py [--warm PATH | --warm-steps 600] [--steps 12]
     [--seed 0] [--threads 1] [--out /tmp/rlstudio_dynamic_sampling] [--write docs/benchmarks.md]

1. The demo's warm-started model (`trainer.models.demo.make_demo_model`, as bench/learning.py), or
   --warm PATH to reuse one.
2. Two runs of `python -m trainer run` from that model on the same 4,096 arithmetic prompts, one after
   the other, --steps steps each, no validation, every trained sample reported
   (report.samples_per_step=-1, no token view): `--recipe demo_tool_arith` (GRPO) and `--recipe dapo`
   (DAPO: dynamic sampling on acc in batches of 8 prompts up to 5 per step, clip-higher, overlong
   buffer). Their first generation batch is the same (same model, data order and seeds).
3. Read back from each run's events.jsonl, per step: the wall time (timing_s/step, with timing_s/gen),
   the samples generated (train_batch_size x n for GRPO; train/num_groups_generated x n for DAPO) and
   the useful groups of the trained batch, those whose samples' scores differ (the sample events'
   group_std > 0: a flat group has zero GRPO advantage). Reported: samples generated per useful sample
   (generated / (useful groups x n)) and wall time per useful step (the time to train on
   train_batch_size useful groups: total step seconds / (useful groups / train_batch_size)).
4. With --write, the table, the machine and the command replace the text between
   `<!-- bench:dynamic_sampling:begin -->` and `<!-- bench:dynamic_sampling:end -->`.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.learning import machine, warm_start, write_jsonl  # noqa: E402
from bench.md_sections import replace_section  # noqa: E402

BEGIN, END = "<!-- bench:dynamic_sampling:begin -->", "<!-- bench:dynamic_sampling:end -->"
RUNS = (("GRPO", "demo_tool_arith"), ("DAPO", "dapo"))


def summarize(events: list[dict], *, train_batch_size: int, n: int) -> dict:
    """Per-run figures from a run's events (metrics and sample events of the training steps)."""
    steps: dict[int, dict] = {}
    useful: dict[int, set[str]] = {}
    for ev in events:
        d = ev["data"]
        if ev["type"] == "metrics" and "timing_s/step" in d["metrics"]:
            steps[d["step"]] = d["metrics"]
        elif ev["type"] == "sample" and not d.get("validation") and (d.get("group_std") or 0) > 0:
            useful.setdefault(d["step"], set()).add(d["uid"])
    if not steps:
        raise ValueError("no training step in the events")
    seconds = sum(m["timing_s/step"] for m in steps.values())
    gen_s = sum(m.get("timing_s/gen", 0.0) for m in steps.values())
    groups = sum(m.get("train/num_groups_generated", train_batch_size) for m in steps.values())
    batches = sum(m.get("train/num_gen_batches", 1) for m in steps.values())
    kept = sum(len(useful.get(s, ())) for s in steps)
    filled = sum(1 for m in steps.values() if m.get("train/num_groups_filled", 0) > 0)
    k = len(steps)
    return {"steps": k, "s_per_step": seconds / k, "gen_s_per_step": gen_s / k,
            "gen_batches_per_step": batches / k, "samples_per_step": groups * n / k,
            "useful_groups_per_step": kept / k,
            "samples_per_useful_sample": groups / kept if kept else float("inf"),
            "s_per_useful_step": seconds / (kept / train_batch_size) if kept else float("inf"),
            "steps_filled": filled, "score_mean": sum(m["critic/score/mean"] for m in steps.values()) / k}


def run(recipe: str, *, warm: Path, data: Path, out: Path, steps: int, threads: int) -> list[str]:
    cmd = [sys.executable, "-m", "trainer", "run", "--recipe", recipe, f"actor_rollout_ref.model.path={warm}",
           f"data.train_files={data}", f"trainer.default_local_dir={out}", f"trainer.total_training_steps={steps}",
           "trainer.val_before_train=false", "trainer.test_freq=-1", "trainer.save_freq=-1",
           f"trainer.torch_threads={threads}", "trainer.resume_mode=disable", "trainer.export_hf=false",
           "trainer.logger=[\"jsonl\"]", "report.samples_per_step=-1", "report.token_view=false"]
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{recipe} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}")
    return cmd


def render(res: dict) -> str:
    lines = [BEGIN, "## Dynamic sampling (DAPO) against GRPO on the demo task", "",
             f"Command: `{res['command']}`  ", f"Machine: {res['machine']}; torch {res.get('torch', '?')}, threads {res['threads']}.", "",
             f"From the demo's warm start ({res['warm']}), {res['steps']} steps of each recipe on the same "
             "arithmetic prompts (8 prompts x 8 samples per trained batch), no validation. A useful group "
             "is one whose 8 scores differ (non-zero GRPO advantage); a useful step is 8 useful groups.", "",
             "| run | s / step | gen s / step | generation batches / step | samples generated / step "
             "| useful groups / step (of 8) | samples generated per useful sample | s per useful step "
             "| mean score |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in res["runs"].items():
        lines.append(f"| {name} | {r['s_per_step']:.2f} | {r['gen_s_per_step']:.2f} | {r['gen_batches_per_step']:.2f} "
                     f"| {r['samples_per_step']:.0f} | {r['useful_groups_per_step']:.2f} "
                     f"| {r['samples_per_useful_sample']:.2f} | {r['s_per_useful_step']:.2f} | {r['score_mean']:.3f} |")
    lines += ["", res["reading"], END]
    return "\n".join(lines) + "\n"


def reading(runs: dict) -> str:
    g, d = runs["GRPO"], runs["DAPO"]
    return (f"DAPO generated {d['samples_per_step'] / g['samples_per_step']:.2f}x the samples per step "
            f"({d['gen_batches_per_step']:.2f} generation batches) and its step took "
            f"{d['s_per_step'] / g['s_per_step']:.2f}x GRPO's wall time; per useful step (8 groups with a "
            f"signal) it took {d['s_per_useful_step']:.2f} s against GRPO's {g['s_per_useful_step']:.2f} s "
            f"({d['s_per_useful_step'] / g['s_per_useful_step']:.2f}x). {d['steps_filled']} of its "
            f"{d['steps']} steps reached max_num_gen_batches and were topped up with flat groups. The mean "
            "score is that of the trained batch, lower for DAPO by construction (all-correct groups are "
            "dropped).")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--warm", default=None, help="reuse this warm-started model")
    ap.add_argument("--warm-steps", type=int, default=None, help="warm-start steps (default: the demo's)")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="/tmp/rlstudio_dynamic_sampling")
    ap.add_argument("--write", default=None, help="markdown file to update (dynamic_sampling section)")
    args = ap.parse_args(argv)

    from trainer.recipes import get_recipe
    from trainer.tasks import arith

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    mach = machine()
    warm, info = warm_start(args, out)
    data = out / "train.jsonl"
    write_jsonl(data, arith.make_rl_rows("train", 4096, seed=args.seed))

    runs = {}
    for name, recipe in RUNS:
        cfg = get_recipe(recipe)
        run_dir = out / recipe
        if run_dir.exists():
            import shutil

            shutil.rmtree(run_dir)
        t0 = time.perf_counter()
        run(recipe, warm=warm, data=data, out=run_dir, steps=args.steps, threads=args.threads)
        events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
        runs[name] = summarize(events, train_batch_size=cfg.data.train_batch_size, n=cfg.actor_rollout_ref.rollout.n)
        runs[name]["wall_s"] = time.perf_counter() - t0
        print(name, json.dumps(runs[name]))
    import torch

    res = {"command": "python bench/dynamic_sampling.py " + " ".join(argv if argv is not None else sys.argv[1:]),
           "machine": mach, "torch": torch.__version__, "threads": args.threads, "steps": args.steps, "runs": runs,
           "warm": f"{info['steps']} SFT steps, seed {args.seed}", "reading": reading(runs)}
    print(res["reading"])
    (out / "dynamic_sampling.json").write_text(json.dumps(res, indent=2) + "\n")
    if args.write:
        replace_section(Path(args.write), render(res), begin=BEGIN, end=END)
        print(f"updated {args.write}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
