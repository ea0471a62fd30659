"""Benchmark: GRPO step time with 1 and 2 CPU workers on the same global batch, and weight-sync cost.

Run (from the repository root; starts a local Ray with 3 CPUs, not on port 6379):

    .venv/bin/python bench/scale.py [--steps 4] [--warmup 1] [--batch 8] [--n 4] [--response 32]
                                    [--preset demo] [--write docs/benchmarks.md]

Both configurations run the real driver (`trainer.loop.Trainer.train_step`: rollout, reward, ref,
update, weight sync) on the same config, data and seed; only `trainer.n_gpus_per_node` (CPU workers
here, one torch thread each) and `trainer.launcher` differ: 1 = the in-process worker, 2 = two Ray
actors with FSDP2 over gloo. Weight sync: `RankWorker.sync_weights` on the 2-worker group (gather each
bucket of full tensors from the FSDP shards, load it into the engine's copy) timed alone, as s/MB.
With `--write`, the figures replace the `<!-- scale:table:begin -->` ... `<!-- scale:table:end -->` part of
the scale section of that file (the prose and the GPU check around it stay).
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def make_cfg(workdir: Path, model: Path, data: Path, *, workers: int, args: argparse.Namespace):
    from trainer.config import apply_overrides
    from trainer.recipes import get_recipe

    return apply_overrides(get_recipe("cpu_smoke"), {
        "actor_rollout_ref.model.path": str(model), "data.train_files": str(data / "train.jsonl"),
        "data.train_batch_size": args.batch, "actor_rollout_ref.rollout.n": args.n,
        "actor_rollout_ref.actor.ppo_mini_batch_size": args.batch,
        "actor_rollout_ref.rollout.response_length": args.response, "data.max_response_length": args.response,
        "trainer.total_training_steps": args.steps + args.warmup, "trainer.save_freq": -1,
        "trainer.n_gpus_per_node": workers, "trainer.launcher": "local" if workers == 1 else "ray",
        "trainer.default_local_dir": str(workdir / f"w{workers}"), "trainer.logger": ["jsonl"],
        "trainer.torch_threads": 1, "trainer.seed": 1})


def measure(cfg, args) -> dict:
    from trainer.loop import Trainer
    from trainer.sinks import Emitter, build_sinks

    out = Path(cfg.trainer.default_local_dir)
    out.mkdir(parents=True, exist_ok=True)
    emitter = Emitter(build_sinks(["jsonl"], out_dir=out, config=cfg))
    t = Trainer(cfg, emitter=emitter)
    t0 = time.perf_counter()
    t.setup()
    setup_s = time.perf_counter() - t0
    try:
        steps = [t.train_step(s + 1) for s in range(args.warmup + args.steps)][args.warmup:]
        sync = []
        if t.group.world_size > 1:
            for _ in range(5):
                r = t.group.call("sync_weights", step=0)
                sync.append((max(x["seconds"] for x in r), r[0]["bytes"] / 2**20, r[0]["buckets"]))
    finally:
        t.close()
        emitter.close()
    keys = ["timing_s/step", "timing_s/gen", "timing_s/ref", "timing_s/update_actor", "timing_s/update_weights",
            "timing_s/reshard"]
    res = {k: statistics.mean(m.get(k, 0.0) for m in steps) for k in keys}
    res["setup_s"] = setup_s
    res["samples"] = args.batch * args.n
    res["resp_len"] = statistics.mean(m["response_length/mean"] for m in steps)
    if sync:
        res["sync_s"] = statistics.median(s for s, _, _ in sync)
        res["sync_mb"] = sync[0][1]
        res["sync_buckets"] = sync[0][2]
    return res


def render(r1: dict, r2: dict, args, cmd: str) -> str:
    load = os.getloadavg()
    lines = [
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; Python {platform.python_version()}; "
        f"one torch thread per worker. Load average while running: {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}.",
        "", f"Command: `{cmd}`", "",
        f"Workload: cpu_smoke recipe (calculator tool, multi-turn, KL loss with a reference), tiny `{args.preset}` model, "
        f"{args.batch} prompts x {args.n} samples, <= {args.response} response tokens, one mini-batch; "
        f"means over {args.steps} steps after {args.warmup} warm-up.", "",
        "| workers | s/step | gen | ref | update | sync (reshard) | samples/s | resp. len | worker setup s |",
        "|---|---|---|---|---|---|---|---|---|"]
    for w, r in ((1, r1), (2, r2)):
        lines.append(f"| {w} | {r['timing_s/step']:.3f} | {r['timing_s/gen']:.3f} | {r['timing_s/ref']:.3f} | "
                     f"{r['timing_s/update_actor']:.3f} | {r['timing_s/update_weights']:.3f} ({r['timing_s/reshard']:.3f}) | "
                     f"{r['samples'] / r['timing_s/step']:.1f} | {r['resp_len']:.1f} | {r['setup_s']:.1f} |")
    lines += ["", f"Speed-up 2 workers / 1 worker: **{r1['timing_s/step'] / r2['timing_s/step']:.2f}x**.", ""]
    if "sync_s" in r2:
        lines.append(f"Weight sync (2 workers, FSDP shards -> engine copy, buckets of "
                     f"{args.bucket_mb} MB): {r2['sync_mb']:.2f} MB in {r2['sync_buckets']:.0f} bucket(s), "
                     f"median {r2['sync_s'] * 1000:.1f} ms = **{r2['sync_s'] * 1000 / r2['sync_mb']:.1f} ms/MB**. "
                     "One worker syncs nothing: its engine runs on the actor's own parameters.")
    return "\n".join(lines)


def write_section(path: Path, body: str) -> None:
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    begin, end = "<!-- scale:table:begin -->", "<!-- scale:table:end -->"  # inside the scale section
    if begin not in text:
        begin, end = "<!-- scale:begin -->", "<!-- scale:end -->"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = f"{head}{begin}\n{body}\n{end}{tail}"
    else:
        text = text.rstrip() + f"\n\n{begin}\n## Scale: 1 vs 2 CPU workers, weight sync\n\n{body}\n{end}\n"
    path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--response", type=int, default=32)
    ap.add_argument("--preset", default="demo", choices=["smoke", "demo"])
    ap.add_argument("--bucket-mb", type=int, default=1)
    ap.add_argument("--write", help="markdown file whose scale section to replace")
    args = ap.parse_args(argv)
    import ray
    import torch

    torch.set_num_threads(1)
    from trainer.models.tiny import make_tiny_model
    from trainer.tasks import arith

    work = Path(tempfile.mkdtemp(prefix="rl_scale_"))
    model = make_tiny_model(work / "model", preset=args.preset, seed=0)
    arith.main([str(work / "data"), "--train", "256", "--test", "16", "--sft", "0"])
    ray.init(num_cpus=3, include_dashboard=False, _temp_dir=str(work / "ray"), log_to_driver=False)
    try:
        from trainer.config import apply_overrides

        r1 = measure(make_cfg(work, model, work / "data", workers=1, args=args), args)
        cfg2 = apply_overrides(make_cfg(work, model, work / "data", workers=2, args=args),
                               {"actor_rollout_ref.rollout.update_weights_bucket_megabytes": args.bucket_mb})
        r2 = measure(cfg2, args)
    finally:
        ray.shutdown()
    cmd = "python bench/scale.py " + " ".join(argv if argv is not None else sys.argv[1:])
    body = render(r1, r2, args, cmd.strip())
    print(body)
    if args.write:
        write_section(Path(args.write), body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
