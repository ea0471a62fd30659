"""Benchmark: the learning demo end to end — warm start, then GRPO through the real trainer.

Run: .venv/bin/python bench/learning.py [--warm-steps 500] [--grpo-seconds 300] [--steps 80]
     [--val 128] [--seed 0] [--threads 1] [--out /tmp/rlstudio_learning] [--write docs/benchmarks.md]

1. `trainer.models.demo.make_demo_model`: the tiny demo-preset model, warm-started with trainer.sft for
   --warm-steps steps (default the demo's own) on 20,000 arithmetic conversations (a tool-only
   phase at lr 3e-3, then a 45%-tool mix at lr 1e-3); bounded by steps, so the same seed gives the
   same model on the same machine.
2. Held-out data (trainer.tasks.arith: operand pairs never seen in training), and a sampled
   (temperature 1) evaluation of the warm start: reward and share of episodes that call the tool.
3. `python -m trainer run --recipe demo_tool_arith actor_rollout_ref.model.path=WARM ...` in a
   subprocess with validation at temperature 1 (the recipe's val_kwargs) every --test-freq steps; a
   SIGTERM (graceful stop) ends it after --grpo-seconds if it has not finished. The curve is read back
   from the run's events.jsonl: val-core/arith/reward/mean@1 against step and against seconds since
   the run's first event.
4. With --write, the figures, the machine and the command replace the text between
   `<!-- bench:learning:begin -->` and `<!-- bench:learning:end -->` in the given markdown file (markers
   appended when absent).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.md_sections import replace_section  # noqa: E402

BEGIN, END = "<!-- bench:learning:begin -->", "<!-- bench:learning:end -->"
VAL_KEY = "val-core/arith/reward/mean@1"


def write_jsonl(path: Path, rows: list[dict]) -> None:
    with path.open("w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def read_curve(events_path: Path) -> tuple[list[dict], dict]:
    """(validation points [{step, seconds, reward}], last train metrics) from an events.jsonl."""
    points, last, t0 = [], {}, None
    for line in events_path.read_text(encoding="utf-8").splitlines():
        ev = json.loads(line)
        t0 = ev["time"] if t0 is None else t0
        if ev["type"] != "metrics":
            continue
        m = ev["data"]["metrics"]
        if VAL_KEY in m:
            points.append({"step": ev["data"]["step"], "seconds": round(ev["time"] - t0, 1),
                           "reward": round(m[VAL_KEY], 3)})
        if "critic/score/mean" in m:
            last = {"step": ev["data"]["step"], **m}
    return points, last


def run_grpo(*, warm: Path, data: Path, out: Path, steps: int, test_freq: int, seconds: float,
             threads: int, extra: list[str]) -> tuple[list[str], float, int]:
    cmd = [sys.executable, "-m", "trainer", "run", "--recipe", "demo_tool_arith",
           f"actor_rollout_ref.model.path={warm}", f"data.train_files={data / 'train.jsonl'}",
           f"data.val_files={data / 'test.jsonl'}", f"trainer.default_local_dir={out}",
           f"trainer.total_training_steps={steps}", f"trainer.test_freq={test_freq}",
           f"trainer.save_freq={-1}", f"trainer.torch_threads={threads}", "trainer.resume_mode=disable",
           "trainer.export_hf=False", "trainer.logger=[\"jsonl\"]", *extra]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)  # graceful: the current step ends, then it stops
        proc.wait(timeout=120)
    tail = (proc.stdout.read() if proc.stdout else "")[-3000:]
    if proc.returncode != 0:
        raise RuntimeError(f"trainer run failed (exit {proc.returncode}):\n{tail}")
    return cmd, time.perf_counter() - t0, proc.returncode


def machine() -> str:
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        cpu = platform.processor()
    return f"{cpu}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the start"


def _phases(warm: dict) -> str:
    """'N tool-only at lr X then M mix (P% tool) at lr Y, each warmup + cosine' from warm_start.json."""
    parts = [f"{p['steps']} {p['name']}" + (f" ({100 * p['tool_fraction']:.0f}% tool)" if p["tool_fraction"] < 1 else "")
             + f" at lr {p.get('lr', warm.get('lr')):g}" for p in warm.get("phases", [])]
    return (" then ".join(parts) or f"lr {warm.get('lr', 3e-3):g}") + ", each warmup + cosine"


def copy_gate_text(warm: dict) -> str:
    """The copy gate's part of the warm-start line: its checks, and the steps it added."""
    checks = [p["copy_check"]["reward"] for p in warm.get("phases", []) if p.get("copy_check")]
    if not checks:
        return ""
    extra = warm.get("extra_steps") or 0
    return (f" (copy check after the tool-only steps: {' -> '.join(f'{c:.3f}' for c in checks)}"
            + (f"; {extra} steps added by the copy gate)" if extra else ")"))


def render(res: dict) -> str:
    lines = [BEGIN, "## Learning demo (`demo_tool_arith`)", "",
             f"Command: `{res['command']}`  ", f"Machine: {res['machine']}; torch threads {res['threads']}.", "",
             f"Warm start (`make_demo_model`, trainer.sft, batch 32, {_phases(res['warm'])}, bounded by steps): "
             f"{res['warm']['steps']}/{res['warm'].get('steps_requested', res['warm']['steps'])} steps "
             f"in {res['warm']['seconds']:.0f} s{' (SAFETY CAP HIT)' if res['warm'].get('cap_hit') else ''}"
             f"{copy_gate_text(res['warm'])}, "
             f"final loss {res['warm']['final_loss']:.3f}. Sampled "
             f"(temperature 1) on {res['warm_eval']['episodes']} held-out prompts: reward "
             f"**{res['warm_eval']['reward']:.3f}**, tool called in {100 * res['warm_eval']['tool_use']:.0f}% "
             f"of episodes ({res['warm_eval']['seconds']:.0f} s to evaluate).", "",
             f"GRPO (`python -m trainer run --recipe demo_tool_arith`, 8 prompts x 8 samples, lr 3e-4, no KL, "
             f"validation on {res['val']} held-out prompts at temperature 1): {res['grpo_seconds']:.0f} s wall.", "",
             "| step | seconds since start | val-core/arith/reward/mean@1 (sampled) |", "|---:|---:|---:|"]
    lines += [f"| {p['step']} | {p['seconds']} | {p['reward']:.3f} |" for p in res["curve"]]
    first = next((p for p in res["curve"] if p["reward"] >= 0.8), None)
    lines += ["", ("Reached 0.8 at step {step}, {seconds} s into the run.".format(**first) if first
                   else "Did not reach 0.8 within the run."), END]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--warm-steps", type=int, default=None, help="warm-start steps (default: the demo's)")
    ap.add_argument("--grpo-seconds", type=float, default=300.0)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--test-freq", type=int, default=5)
    ap.add_argument("--val", type=int, default=128, help="held-out prompts for validation")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="/tmp/rlstudio_learning")
    ap.add_argument("--warm", default=None, help="reuse this warm-started model (skip step 1)")
    ap.add_argument("--write", default=None, help="markdown file to update (learning section)")
    ap.add_argument("overrides", nargs="*", help="extra key=value overrides for the GRPO run")
    args = ap.parse_args(argv)

    import torch

    from trainer.models.demo import evaluate_sampled, make_demo_model
    from trainer.tasks import arith

    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    mach = machine()
    if args.warm:
        warm = Path(args.warm)
    else:
        from trainer.models.demo import WARM_START_STEPS

        warm = make_demo_model(out / "warm", steps=args.warm_steps or WARM_START_STEPS, seed=args.seed,
                               threads=args.threads, log=None)
    info = json.loads((warm / "warm_start.json").read_text())
    print(f"warm start: {info['steps']} steps in {info['seconds']} s, final loss {info['final_loss']:.3f}")

    data = out / "data"
    data.mkdir(exist_ok=True)
    write_jsonl(data / "train.jsonl", arith.make_rl_rows("train", 4096, seed=args.seed))
    test = arith.make_rl_rows("test", args.val, seed=args.seed + 1)
    write_jsonl(data / "test.jsonl", test)
    ev = evaluate_sampled(warm, test, temperature=1.0, threads=args.threads)
    print(f"warm start sampled held-out: reward {ev.reward:.3f}, tool use {ev.tool_use:.2f} "
          f"({ev.episodes} episodes, {ev.seconds:.0f} s)")

    run_dir = out / "grpo"
    if run_dir.exists():
        import shutil

        shutil.rmtree(run_dir)
    cmd, secs, _ = run_grpo(warm=warm, data=data, out=run_dir, steps=args.steps, test_freq=args.test_freq,
                            seconds=args.grpo_seconds, threads=args.threads, extra=args.overrides)
    curve, last = read_curve(run_dir / "events.jsonl")
    for p in curve:
        print(f"step {p['step']:3d}  {p['seconds']:6.1f} s  val reward {p['reward']:.3f}")
    res = {"command": "python bench/learning.py " + " ".join(argv if argv is not None else sys.argv[1:]),
           "machine": mach, "threads": args.threads, "warm": info, "val": args.val,
           "warm_eval": ev.__dict__, "grpo_seconds": secs, "curve": curve, "grpo_cmd": cmd}
    (out / "learning.json").write_text(json.dumps(res, indent=2) + "\n")
    if args.write:
        replace_section(Path(args.write), render(res), begin=BEGIN, end=END)
        print(f"updated {args.write}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
