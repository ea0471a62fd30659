"""Benchmark: the learning demo end to end — warm start, then GRPO (or each policy-loss mode) through
the real trainer.

Run: .venv/bin/python bench/learning.py [--warm-steps 500] [--grpo-seconds 300] [--steps 80]
     [--val 128] [--seed 0] [--threads 1] [--out /tmp/rlstudio_learning] [--write docs/benchmarks.md]
     [--modes grpo,dapo,gspo,cispo,gae [--section learning_modes]] [KEY=VALUE ...]

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
5. --modes (issues 17, 18): step 3 once per mode in MODES, one after the other, from the same warm start,
   data and seeds: grpo (the demo recipe), dapo (the `dapo` recipe: clip-higher 0.2/0.28, token-mean,
   dynamic sampling on acc, overlong buffer), gspo (loss_mode=gspo, the GSPO paper's clip ranges
   3e-4/4e-4, seq-mean-token-mean) and cispo (loss_mode=cispo, clip_ratio_low=1.0: a floor of 0, so no
   lower bound as in the MiniMax-M1 paper, where verl's examples/cispo_trainer sets 10, which the config
   check refuses (< 10), to the same effect; clip_ratio_high=0.2 as that example) and gae (PPO with a
   critic: algorithm.adv_estimator=gae, gamma = lambda = 1, critic lr 1e-3) and lora (the demo recipe
   training a peft LoRA adapter instead of every weight: lora_rank 32, lora_alpha 64 (alpha = 2 x rank,
   as bench/lora.py), target_modules all-linear (q/k/v/o and the MLP's gate/up/down in each of the 4
   layers; the tied embedding and head stay frozen), actor lr 1e-3: above the recipe's full
   fine-tuning 3e-4, as LoRA needs; verl's LoRA examples use 10x (3e-6 full, 3e-5 LoRA), but 3e-3 here
   reached 0.8 as soon and then sank to 0.75 held-out by step 40, where 1e-3 held 0.94-0.97 (issue 18,
   docs/benchmarks.md bench:learning_lora: with rank 32 on a hidden size of 128, alpha / rank = 2, the
   adapter moves the weights further per step than on a large model)) and interaction (the demo recipe
   with the gsm8k interaction: a wrong answer is told so and gets another turn). The extra
   KEY=VALUE overrides go to every mode (e.g. actor_rollout_ref.actor.ppo_mini_batch_size=2 for four
   updates per step, where the ratio leaves 1 and the clips act). With more than one mode, --write
   replaces the `bench:<--section>` section: held-out reward per validation step per mode, and each
   mode's wall time, s/step and first step >= 0.8.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.md_sections import cpu_name, replace_section  # noqa: E402

BEGIN, END = "<!-- bench:learning:begin -->", "<!-- bench:learning:end -->"
VAL_KEY = "val-core/arith/reward/mean@1"
TARGET = 0.8
ACTOR = "actor_rollout_ref.actor"


@dataclass(frozen=True)
class Mode:
    """One algorithm of the comparison: a recipe plus overrides, on the demo task."""

    label: str
    recipe: str
    overrides: tuple[str, ...]
    settings: str  # what it sets, for the docs


MODES: dict[str, Mode] = {
    "grpo": Mode("GRPO", "demo_tool_arith", (), "recipe demo_tool_arith: PPO clip 0.2, token-mean, no KL"),
    "dapo": Mode("DAPO", "dapo", (), "recipe dapo: clip 0.2/0.28, token-mean, no KL, dynamic sampling on acc "
                 "(batches of 8 prompts, at most 5), overlong buffer 64 tokens"),
    "gspo": Mode("GSPO", "demo_tool_arith",
                 (f"{ACTOR}.policy_loss.loss_mode=gspo", f"{ACTOR}.clip_ratio_low=3e-4",
                  f"{ACTOR}.clip_ratio_high=4e-4", f"{ACTOR}.loss_agg_mode=seq-mean-token-mean"),
                 "loss_mode=gspo, clip_ratio_low 3e-4, clip_ratio_high 4e-4 (GSPO paper), seq-mean-token-mean"),
    "cispo": Mode("CISPO", "demo_tool_arith",
                  (f"{ACTOR}.policy_loss.loss_mode=cispo", f"{ACTOR}.clip_ratio_low=1.0",
                   f"{ACTOR}.clip_ratio_high=0.2"),
                  "loss_mode=cispo, clip_ratio_low 1.0 (a floor of 0: no lower bound, as MiniMax-M1; verl's "
                  "examples/cispo_trainer sets 10), clip_ratio_high 0.2 (that example), token-mean"),
    "gae": Mode("PPO+GAE", "demo_tool_arith",
                ("algorithm.adv_estimator=gae", "algorithm.gamma=1.0", "algorithm.lam=1.0", "critic.optim.lr=1e-3",
                 "critic.optim.weight_decay=0.0"),
                "adv_estimator=gae (a critic: the warm start's body with a zero scalar head), gamma 1, lambda 1 "
                "(verl's defaults), critic lr 1e-3, no weight decay, cliprange_value 0.5, token-mean"),
    "lora": Mode("LoRA", "demo_tool_arith",
                 ("actor_rollout_ref.model.lora_rank=32", "actor_rollout_ref.model.lora_alpha=64",
                  "actor_rollout_ref.model.target_modules=all-linear", f"{ACTOR}.optim.lr=1e-3"),
                 "recipe demo_tool_arith with a LoRA adapter (peft): lora_rank 32, lora_alpha 64, target_modules "
                 "all-linear (every linear layer of the 4 decoder layers; the tied embedding and head frozen), "
                 "actor lr 1e-3 (3.3x the recipe's full fine-tuning 3e-4; 10x, verl's LoRA examples' ratio, "
                 "drifted down late here: see the reading); the reference is the base with the adapter off "
                 "(unused: no KL)"),
    "interaction": Mode("GRPO+interaction", "demo_tool_arith",
                        ("actor_rollout_ref.rollout.multi_turn.interaction=gsm8k",),
                        "recipe demo_tool_arith with multi_turn.interaction=gsm8k (verl's Gsm8kInteraction): "
                        "an answer whose last number is wrong gets verl's 'reflect and try again' reply and "
                        "another turn, within the recipe's 3 assistant turns and 334 response tokens; "
                        "validation too, so its held-out reward counts an answer right at its second try "
                        "(the reward reads the last '#### n')"),
}


def mode_lr(name: str) -> float:
    """The actor's lr of a mode: its recipe's with its overrides applied."""
    from trainer.config import apply_overrides
    from trainer.recipes import get_recipe

    mode = MODES[name]
    return apply_overrides(get_recipe(mode.recipe), list(mode.overrides)).actor_rollout_ref.actor.optim.lr


def _sci(x: float) -> str:
    """3e-4 as '3e-4' (not 0.0003 or 3e-04)."""
    mantissa, exponent = f"{x:e}".split("e")
    return f"{float(mantissa):g}e{int(exponent)}"


def lr_text(modes: list[str]) -> str:
    """'lr 3e-4' when the modes share the actor's lr, else each mode's ('lr GRPO 3e-4, LoRA 3e-3')."""
    lrs = {m: _sci(mode_lr(m)) for m in modes}
    if len(set(lrs.values())) == 1:
        return f"lr {next(iter(lrs.values()))}"
    return "lr " + ", ".join(f"{MODES[m].label} {lr}" for m, lr in lrs.items())


def warm_start(args, out: Path) -> tuple[Path, dict]:
    """The demo's warm-started model: `args.warm` when given, else built under `out` (args.warm_steps,
    args.seed, args.threads); with its warm_start.json."""
    if args.warm:
        warm = Path(args.warm)
    else:
        from trainer.models.demo import WARM_START_STEPS, make_demo_model

        warm = make_demo_model(out / "warm", steps=args.warm_steps or WARM_START_STEPS, seed=args.seed,
                               threads=args.threads, log=None)
    return warm, json.loads((warm / "warm_start.json").read_text())


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


def read_steps(events_path: Path) -> dict:
    """Training-step figures of a run's events.jsonl: steps, mean timing_s/step, mean generation batches."""
    times, batches = [], []
    for line in events_path.read_text(encoding="utf-8").splitlines():
        ev = json.loads(line)
        m = ev["data"].get("metrics", {}) if ev["type"] == "metrics" else {}
        if "timing_s/step" in m:
            times.append(m["timing_s/step"])
            batches.append(m.get("train/num_gen_batches", 1))
    k = len(times)
    return {"steps": k, "s_per_step": sum(times) / k if k else 0.0,
            "gen_batches_per_step": sum(batches) / k if k else 0.0}


def curve_summary(points: list[dict], target: float = TARGET) -> dict:
    """First validation at or over `target` ({step, seconds} or None), best reward, mean of the last 3."""
    first = next((p for p in points if p["reward"] >= target), None)
    last = [p["reward"] for p in points[-3:]]
    return {"first": {"step": first["step"], "seconds": first["seconds"]} if first else None,
            "best": max((p["reward"] for p in points), default=0.0),
            "last3": sum(last) / len(last) if last else 0.0}


def run_grpo(*, warm: Path, data: Path, out: Path, steps: int, test_freq: int, seconds: float,
             threads: int, extra: list[str], recipe: str = "demo_tool_arith") -> tuple[list[str], float, int]:
    cmd = [sys.executable, "-m", "trainer", "run", "--recipe", recipe,
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
    return f"{cpu_name()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the start"


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


def render_modes(res: dict, section: str) -> str:
    """The comparison section: held-out reward per validation step for each mode, then their times."""
    modes = list(res["modes"])
    labels = [MODES[m].label for m in modes]
    lines = [f"<!-- bench:{section}:begin -->", f"### Learning demo by algorithm (`{section}`)", "",
             f"Command: `{res['command']}`  ",
             f"Machine: {res['machine']}; torch {res['torch']}, threads {res['threads']}.", "",
             f"From one warm start ({res['warm_text']}; sampled held-out reward {res['warm_eval']['reward']:.3f}), "
             f"the same data and seeds, {res['steps']} steps of each (8 prompts x 8 samples per trained batch, "
             f"{lr_text(modes)}), validated every {res['test_freq']} steps on {res['val']} held-out prompts sampled at "
             "temperature 1 (val-core/arith/reward/mean@1). Overrides for every mode: "
             + (", ".join(f"`{o}`" for o in res["overrides"]) or "none") + ".", ""]
    lines += [f"- {MODES[m].label}: {MODES[m].settings}." for m in modes]
    lines += ["", "| step | " + " | ".join(labels) + " |", "|---:|" + "---:|" * len(modes)]
    steps = sorted({p["step"] for m in modes for p in res["runs"][m]["curve"]})
    for st in steps:
        cells = []
        for m in modes:
            p = next((q for q in res["runs"][m]["curve"] if q["step"] == st), None)
            cells.append(f"{p['reward']:.3f}" if p else "")
        lines.append(f"| {st} | " + " | ".join(cells) + " |")
    lines += ["", "| mode | wall s | steps | s / step | generation batches / step | first >= 0.8 (step, s into "
              "the run) | best | mean of the last 3 |", "|---|---:|---:|---:|---:|---|---:|---:|"]
    for m in modes:
        r = res["runs"][m]
        first = r["summary"]["first"]
        reached = f"step {first['step']}, {first['seconds']} s" if first else "not reached"
        lines.append(f"| {MODES[m].label} | {r['wall_s']:.0f} | {r['steps']['steps']} | {r['steps']['s_per_step']:.2f} "
                     f"| {r['steps']['gen_batches_per_step']:.2f} "
                     f"| {reached} "
                     f"| {r['summary']['best']:.3f} | {r['summary']['last3']:.3f} |")
    lines.append(f"<!-- bench:{section}:end -->")
    return "\n".join(lines) + "\n"


def run_modes(args: argparse.Namespace, argv: list[str] | None, *, warm: Path, info: dict, data: Path, ev,
              mach: str) -> dict:
    """Step 5: each mode of --modes from the same warm start and data; the comparison section."""
    import shutil

    import torch

    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    runs = {}
    for m in modes:
        mode = MODES[m]
        run_dir = Path(args.out) / m
        if run_dir.exists():
            shutil.rmtree(run_dir)
        cmd, secs, _ = run_grpo(warm=warm, data=data, out=run_dir, steps=args.steps, test_freq=args.test_freq,
                                seconds=args.grpo_seconds, threads=args.threads, recipe=mode.recipe,
                                extra=[*mode.overrides, *args.overrides])
        curve, _ = read_curve(run_dir / "events.jsonl")
        runs[m] = {"cmd": cmd, "wall_s": secs, "curve": curve, "steps": read_steps(run_dir / "events.jsonl"),
                   "summary": curve_summary(curve)}
        print(f"{mode.label}: {secs:.0f} s, " + json.dumps(runs[m]["summary"]) + "  curve "
              + " ".join(f"{p['step']}:{p['reward']:.3f}" for p in curve), flush=True)
    return {"command": "python bench/learning.py " + " ".join(argv if argv is not None else sys.argv[1:]),
            "machine": mach, "torch": torch.__version__, "threads": args.threads, "modes": modes, "runs": runs,
            "warm_text": f"{info['steps']} SFT steps, seed {args.seed}", "warm": info, "warm_eval": ev.__dict__,
            "steps": args.steps, "test_freq": args.test_freq, "val": args.val, "overrides": args.overrides}


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
    ap.add_argument("--modes", default="grpo", help=f"comma-separated, of {','.join(MODES)} (default grpo)")
    ap.add_argument("--section", default="learning_modes", help="docs section of a several-mode run")
    ap.add_argument("overrides", nargs="*", help="extra key=value overrides for the GRPO run")
    args = ap.parse_args(argv)
    unknown = [m for m in args.modes.split(",") if m.strip() and m.strip() not in MODES]
    if unknown:
        ap.error(f"unknown mode(s) {unknown}; known: {', '.join(MODES)}")

    import torch

    from trainer.models.demo import evaluate_sampled
    from trainer.tasks import arith

    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    mach = machine()
    warm, info = warm_start(args, out)
    print(f"warm start: {info['steps']} steps in {info['seconds']} s, final loss {info['final_loss']:.3f}")

    data = out / "data"
    data.mkdir(exist_ok=True)
    write_jsonl(data / "train.jsonl", arith.make_rl_rows("train", 4096, seed=args.seed))
    test = arith.make_rl_rows("test", args.val, seed=args.seed + 1)
    write_jsonl(data / "test.jsonl", test)
    ev = evaluate_sampled(warm, test, temperature=1.0, threads=args.threads)
    print(f"warm start sampled held-out: reward {ev.reward:.3f}, tool use {ev.tool_use:.2f} "
          f"({ev.episodes} episodes, {ev.seconds:.0f} s)")

    if args.modes.strip() != "grpo":
        res = run_modes(args, argv, warm=warm, info=info, data=data, ev=ev, mach=mach)
        (out / f"{args.section}.json").write_text(json.dumps(res, indent=2) + "\n")
        if args.write:
            section = args.section
            replace_section(Path(args.write), render_modes(res, section),
                            begin=f"<!-- bench:{section}:begin -->", end=f"<!-- bench:{section}:end -->")
            print(f"updated {args.write}")
        return 0

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
