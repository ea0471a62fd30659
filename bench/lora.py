"""Benchmark: LoRA against full fine-tuning, peak memory and step time on the same batch.

Run: .venv/bin/python bench/lora.py [--layers 4] [--hidden 512] [--rank 32] [--steps 3] [--warmup 1]
     [--batch 4] [--n 4] [--response 32] [--threads 1] [--out /tmp/rlstudio_bench_lora]
     [--write docs/benchmarks.md]

1. A Qwen2.5-format model folder (tests/fixtures/families.py: the real 151,936-token vocabulary, tied
   embeddings, --layers decoder layers of --hidden, 8 heads, 2 KV heads, float32) and the arithmetic
   demo prompts (trainer.tasks.arith).
2. Two runs of `python -m trainer run --recipe cpu_smoke` on them, one after the other, each in its own
   process: full fine-tuning, and LoRA (actor_rollout_ref.model.lora_rank=--rank, lora_alpha = 2 x
   rank, all-linear). Everything else is the same: --batch prompts x --n samples, single turn, up to
   --response new tokens, KL loss against the reference (so full fine-tuning loads a reference model
   and LoRA disables its adapter instead), one mini-batch, micro-batches of --n, same seeds: the first
   step's batch is the same in both runs (the same initial policy samples it).
3. Read back per run: the process's peak resident memory (the kernel's ru_maxrss of the child), the
   largest RSS the trainer's memory events saw in each phase, and the mean of timing_s/step and its
   phases over the steps after --warmup; next to them, the platform's memory estimate of the same
   config (platform/rlstudio/runs/memory_estimate.py, the new-run form's figure).
4. With --write, the table, the machine and the command replace the text between
   `<!-- bench:lora:begin -->` and `<!-- bench:lora:end -->`.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "platform"))
from bench.md_sections import cpu_name, replace_section  # noqa: E402

BEGIN, END = "<!-- bench:lora:begin -->", "<!-- bench:lora:end -->"
PHASES = ("gen", "ref", "old_log_prob", "update_actor", "reshard")


def overrides(args: argparse.Namespace, model: Path, data: Path, out: Path, *, lora: bool) -> list[str]:
    ov = [f"actor_rollout_ref.model.path={model}", f"data.train_files={data}", f"trainer.default_local_dir={out}",
          f"data.train_batch_size={args.batch}", f"actor_rollout_ref.rollout.n={args.n}",
          f"actor_rollout_ref.actor.ppo_mini_batch_size={args.batch}",
          f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={args.n}",
          f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={args.n}",
          f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={args.n}",
          f"actor_rollout_ref.rollout.response_length={args.response}", f"data.max_response_length={args.response}",
          "actor_rollout_ref.rollout.multi_turn.enable=false", "tools.names=[]",
          f"trainer.total_training_steps={args.warmup + args.steps}", "trainer.save_freq=-1",
          "trainer.export_hf=false", "trainer.resume_mode=disable", f"trainer.torch_threads={args.threads}",
          "trainer.logger=[\"jsonl\"]", "report.memory_interval_s=0.2", "report.token_view=false"]
    if lora:
        ov += [f"actor_rollout_ref.model.lora_rank={args.rank}", f"actor_rollout_ref.model.lora_alpha={2 * args.rank}",
               "actor_rollout_ref.actor.optim.lr=1e-5"]
    return ov


def run(args: argparse.Namespace, model: Path, data: Path, out: Path, *, lora: bool) -> dict:
    """One run in a child process; its peak RSS from wait4, its figures from events.jsonl."""
    cmd = [sys.executable, "-m", "trainer", "run", "--recipe", "cpu_smoke",
           *overrides(args, model, data, out, lora=lora)]
    log = open(out.with_suffix(".log"), "w")
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    log.close()
    if proc.returncode != 0:
        raise RuntimeError(f"run failed (exit {proc.returncode}); see {out.with_suffix('.log')}")
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    return {**summarize(events, warmup=args.warmup), "peak_rss_gib": usage.ru_maxrss * 1024 / 2**30}


def summarize(events: list[dict], *, warmup: int) -> dict:
    """Mean step and phase times over the steps after `warmup`; the largest RSS per memory phase."""
    steps = {e["data"]["step"]: e["data"]["metrics"] for e in events
             if e["type"] == "metrics" and "timing_s/step" in e["data"]["metrics"]}
    kept = [m for s, m in sorted(steps.items()) if s > warmup]
    if not kept:
        raise ValueError(f"no step after the {warmup} warm-up step(s) in the events")
    times = {k: sum(m.get(f"timing_s/{k}", 0.0) for m in kept) / len(kept) for k in ("step", *PHASES)}
    rss: dict[str, float] = {}
    for e in events:
        if e["type"] == "memory" and e["data"].get("rss"):
            phase = e["data"].get("phase") or "other"
            rss[phase] = max(rss.get(phase, 0.0), e["data"]["rss"] / 2**30)
    return {"steps": len(kept), "times": times, "rss_by_phase": rss,
            "grad_norm": [m.get("actor/grad_norm") for m in kept]}


def estimate(args: argparse.Namespace, model: Path, *, lora: bool) -> dict:
    """The platform's estimate per device of the same config (what the new-run form shows)."""
    from rlstudio.runs.memory_estimate import estimate as est
    from rlstudio.runs.memory_estimate import read_model_config, shape_from_config
    from trainer.config import apply_overrides
    from trainer.recipes import get_recipe

    cfg = apply_overrides(get_recipe("cpu_smoke"), overrides(args, model, Path("x"), Path("x"), lora=lora)).to_dict()
    e = est(shape_from_config(read_model_config(model)), cfg, gpus=0, capacity_bytes=64 * 2**30)
    return {"peak_gib": e.peak_bytes / 2**30, "peak_phase": e.peak_phase,
            "lines": {x.name: x.bytes / 2**30 for x in e.lines}}


def render(res: dict) -> str:
    full, lora = res["full"], res["lora"]
    lines = [BEGIN, "## LoRA against full fine-tuning: peak memory and step time", "",
             f"Command: `{res['command']}`  ", f"Machine: {res['machine']}; torch {res['torch']}, peft {res['peft']}, "
             f"threads {res['threads']}.", "",
             f"Model: {res['model_line']}. Workload: {res['workload']}. Each run in its own process; "
             f"times are the mean of {full['steps']} steps after {res['warmup']} warm-up step(s).", "",
             "| run | peak RSS (GiB) | RSS in update (GiB) | estimate per device (GiB) | s / step | gen | ref | update_actor | weight sync |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in (("full fine-tuning", full), (f"LoRA rank {res['rank']}", lora)):
        t = r["times"]
        lines.append(f"| {name} | {r['peak_rss_gib']:.2f} | {r['rss_by_phase'].get('update', 0.0):.2f} | "
                     f"{r['estimate']['peak_gib']:.2f} | {t['step']:.2f} | {t['gen']:.2f} | {t['ref']:.2f} | "
                     f"{t['update_actor']:.2f} | {t['reshard']:.2f} |")
    lines += ["", f"LoRA's peak RSS is {lora['peak_rss_gib'] / full['peak_rss_gib']:.2f}x full fine-tuning's "
              f"({full['peak_rss_gib'] - lora['peak_rss_gib']:.2f} GiB less), its step "
              f"{lora['times']['step'] / full['times']['step']:.2f}x the time. The estimate's lines (GiB): full "
              + ", ".join(f"{k} {v:.2f}" for k, v in full["estimate"]["lines"].items() if v) + "; LoRA "
              + ", ".join(f"{k} {v:.2f}" for k, v in lora["estimate"]["lines"].items() if v) + ".", END]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--rank", type=int, default=32)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--batch", type=int, default=4, help="prompts per step")
    ap.add_argument("--n", type=int, default=4, help="samples per prompt")
    ap.add_argument("--response", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="/tmp/rlstudio_bench_lora")
    ap.add_argument("--write", default=None, help="docs/benchmarks.md to update")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model, data = out / "model", out / "data"
    if not (model / "config.json").exists():
        from tests.fixtures.families import build

        build("qwen2.5", model, layers=args.layers, hidden=args.hidden, heads=8, kv_heads=2)
    if not (data / "train.jsonl").exists():
        subprocess.run([sys.executable, "-m", "trainer", "make-demo-data", str(data)], cwd=ROOT, check=True,
                       stdout=subprocess.DEVNULL)
    import peft
    import torch

    from rlstudio.runs.memory_estimate import read_model_config, shape_from_config

    shape = shape_from_config(read_model_config(model))
    res = {"command": "python bench/lora.py " + " ".join(argv if argv is not None else sys.argv[1:]),
           "machine": f"{cpu_name()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the start",
           "torch": torch.__version__, "peft": peft.__version__, "threads": args.threads, "rank": args.rank,
           "warmup": args.warmup,
           "model_line": f"Qwen2.5 format, vocabulary {shape.vocab_size:,} (tied), {args.layers} layers of "
                         f"{args.hidden}, {shape.num_parameters / 1e6:.1f} M parameters, float32",
           "workload": f"{args.batch} prompts x {args.n} samples, <= {args.response} new tokens, single turn, "
                       "KL loss (low_var_kl), one mini-batch, micro-batches of "
                       f"{args.n}, AdamW; LoRA: all-linear, alpha {2 * args.rank}"}
    for name, lora in (("full", False), ("lora", True)):
        r = run(args, model, data / "train.jsonl", out / name, lora=lora)
        r["estimate"] = estimate(args, model, lora=lora)
        res[name] = r
        print(f"{name}: peak RSS {r['peak_rss_gib']:.2f} GiB, {r['times']['step']:.2f} s/step, "
              f"estimate {r['estimate']['peak_gib']:.2f} GiB; phases {json.dumps(r['times'])}", flush=True)
    (out / "result.json").write_text(json.dumps(res, indent=1))
    text = render(res)
    print(text)
    if args.write:
        replace_section(Path(args.write), text, begin=BEGIN, end=END)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
