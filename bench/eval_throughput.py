"""Benchmark: an evaluation's throughput (samples/s) against the trainer's own rollout speed, on the demo.

Run: .venv/bin/python bench/eval_throughput.py [--warm MODEL] [--warm-steps 240] [--prompts 64] [--k 8]
     [--repeats 3] [--threads 1] [--device cpu|cuda] [--out /tmp/rlstudio_eval_bench] [--write docs/benchmarks.md]

Same model (the demo's warm start: `--warm`, else `make_demo_model` with --warm-steps), same prompts
(--prompts held-out arithmetic rows), same recipe (demo_tool_arith: the calculator tool, temperature 1,
its response budget), the same `hf` engine and multi-turn rollout, k = n = 8 samples per prompt, both
scored with the run's reward:

- trainer: `Trainer.rollout` (the step's generation and reward phases, as `fit` runs them: 8 prompts x 8
  samples per step) over --prompts / 8 steps; no training step in between, so the weights stay those of
  the warm start.
- evaluation: `trainer.evaluate.evaluate_columns` on the base column, as the evaluation job runs it
  (all the prompts in one call); counted whole (loading the model and tokenizer, building the prompts,
  scoring, the transcripts) and, separately, its generation alone.

Times are process CPU time (robust to other processes on a shared machine at 1 thread; wall time beside
it), the two sides alternating, best of --repeats; the ratio is evaluation samples/s over trainer
samples/s. --write replaces the `bench:eval_throughput` section of the given markdown file.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from md_sections import replace_section  # noqa: E402

BEGIN, END = "<!-- bench:eval_throughput:begin -->", "<!-- bench:eval_throughput:end -->"


def machine() -> str:
    cpu = platform.processor() or "unknown"
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        cpu = next(line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name"))
    except Exception:  # noqa: BLE001 - a machine without lscpu
        pass
    return f"{cpu}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the start"


def config(warm: Path, data: Path, out: Path, *, threads: int, device: str) -> dict:
    from trainer.config import apply_overrides
    from trainer.recipes import get_recipe

    return apply_overrides(get_recipe("demo_tool_arith"), {
        "actor_rollout_ref.model.path": str(warm), "data.train_files": str(data), "data.val_files": None,
        "data.shuffle": False, "trainer.default_local_dir": str(out), "trainer.logger": ["jsonl"],
        "trainer.save_freq": -1, "trainer.test_freq": -1, "trainer.val_before_train": False,
        "trainer.torch_threads": threads, "trainer.device": device, "trainer.export_hf": False,
        "trainer.resume_mode": "disable"}).to_dict()


def trainer_side(trainer, steps: int) -> dict:
    """`steps` rollout phases of the trainer; samples, CPU and wall seconds."""
    from trainer.loop import Timer

    samples, cpu0, wall0 = 0, time.process_time(), time.perf_counter()
    for step in range(1, steps + 1):
        samples += len(trainer.rollout(step, Timer(), {}))
    return {"samples": samples, "cpu": time.process_time() - cpu0, "wall": time.perf_counter() - wall0}


def eval_side(cfg: dict, rows: list[dict], *, k: int, max_new_tokens: int, seed: int, device: str) -> dict:
    from trainer.evaluate import Column, evaluate_columns

    cpu0, wall0 = time.process_time(), time.perf_counter()
    res, samples = evaluate_columns(cfg, [Column("base", 0, None)], rows, k=k, temperature=1.0, top_p=1.0,
                                    top_k=-1, max_new_tokens=max_new_tokens, seed=seed, device=device)
    col = res["checkpoints"][0]
    return {"samples": len(samples), "cpu": time.process_time() - cpu0, "wall": time.perf_counter() - wall0,
            "gen_wall": col["seconds"], "mean_at_k": col["mean_at_k"], "pass_at_k": col["pass_at_k"]}


def render(res: dict) -> str:
    t, e = res["trainer"], res["evaluation"]
    tr_cpu, ev_cpu = t["samples"] / t["cpu"], e["samples"] / e["cpu"]
    tr_wall, ev_wall = t["samples"] / t["wall"], e["samples"] / e["wall"]
    ev_gen = e["samples"] / e["gen_wall"]
    lines = [BEGIN, "## Evaluation throughput against the trainer's rollout (`bench/eval_throughput.py`)", "",
             f"Command: `{res['command']}`  ",
             f"Machine: {res['machine']}; torch threads {res['threads']}, device {res['device']}.", "",
             f"The demo's warm start ({res['warm']}), {res['prompts']} held-out prompts x k = {res['k']} "
             f"samples, recipe demo_tool_arith (calculator tool, temperature 1, {res['max_new_tokens']} "
             f"response tokens), the `hf` engine; best of {res['repeats']} alternating repeats.", "",
             "| side | samples | CPU s | samples/s (CPU) | wall s | samples/s (wall) |",
             "|---|---:|---:|---:|---:|---:|",
             f"| trainer: `Trainer.rollout`, {res['prompts'] // 8} steps of 8 x 8 | {t['samples']} | {t['cpu']:.2f} | "
             f"{tr_cpu:.1f} | {t['wall']:.2f} | {tr_wall:.1f} |",
             f"| evaluation: `evaluate_columns`, whole (load, prompts, rollout, scoring, transcripts) | "
             f"{e['samples']} | {e['cpu']:.2f} | {ev_cpu:.1f} | {e['wall']:.2f} | {ev_wall:.1f} |",
             f"| evaluation: its generation alone (wall) | {e['samples']} | | | {e['gen_wall']:.2f} | {ev_gen:.1f} |",
             "",
             f"**Ratio (evaluation / trainer): {ev_cpu / tr_cpu:.2f}x on CPU time, {ev_wall / tr_wall:.2f}x on "
             f"wall time** (the target is >= 0.9x). The warm start's figures in this evaluation: mean@{res['k']} "
             f"{e['mean_at_k']:.3f}, pass@{res['k']} {e['pass_at_k']:.3f}.", END]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--warm", type=Path)
    p.add_argument("--warm-steps", type=int, default=240)
    p.add_argument("--prompts", type=int, default=64)
    p.add_argument("--k", type=int, default=8)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", type=Path, default=Path("/tmp/rlstudio_eval_bench"))
    p.add_argument("--write", type=Path)
    args = p.parse_args(argv)
    if args.prompts % 8 or args.k != 8:
        p.error("--prompts must be a multiple of 8 and --k 8 (the recipe's 8 prompts x 8 samples per step)")
    import torch

    from trainer.config import Config, resolve
    from trainer.loop import Trainer
    from trainer.sinks import Emitter, build_sinks
    from trainer.tasks import arith

    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    start = machine()
    if args.warm:
        warm, how = args.warm, f"`{args.warm}`"
    else:
        from trainer.models.demo import make_demo_model

        warm = make_demo_model(args.out / "warm", steps=args.warm_steps, seed=0, copy_check=0, threads=args.threads)
        how = f"make_demo_model, {args.warm_steps} SFT steps, seed 0"
    rows = arith.make_rl_rows("test", args.prompts, seed=1)
    data = args.out / "prompts.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = config(warm, data, args.out / "run", threads=args.threads, device=args.device)
    max_new = int(resolve(Config.from_dict(cfg)).actor_rollout_ref.rollout.response_length)
    best: dict[str, dict] = {}
    for rep in range(args.repeats):
        trainer = Trainer(Config.from_dict(cfg), emitter=Emitter(build_sinks(["jsonl"], out_dir=args.out / "run",
                                                                             config=Config.from_dict(cfg))))
        trainer.setup()
        try:
            sides = (("trainer", lambda: trainer_side(trainer, args.prompts // 8)),
                     ("evaluation", lambda: eval_side(cfg, rows, k=args.k, max_new_tokens=max_new, seed=rep,
                                                      device=args.device)))
            for name, fn in (sides if rep % 2 == 0 else sides[::-1]):
                r = fn()
                print(f"repeat {rep} {name}: {r}", flush=True)
                if name not in best or r["samples"] / r["cpu"] > best[name]["samples"] / best[name]["cpu"]:
                    best[name] = r
        finally:
            trainer.close()
    res = {"trainer": best["trainer"], "evaluation": best["evaluation"], "machine": start, "threads": args.threads,
           "device": args.device, "warm": how, "prompts": args.prompts, "k": args.k, "max_new_tokens": max_new,
           "repeats": args.repeats,
           "command": "python bench/eval_throughput.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    text = render(res)
    print(text)
    if args.write:
        replace_section(args.write, text, begin=BEGIN, end=END)
    return 0


if __name__ == "__main__":
    sys.exit(main())
