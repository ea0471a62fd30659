"""The GPU check's body (run by bench/gpu_check.sh): NCCL, FSDP2 + hf rollout, 5 GRPO steps, memory, MFU.

    python bench/gpu_check.py --out DIR [--steps 5] [--preset demo] [--peak-tflops 989]

One process, one GPU, no Ray: a one-rank NCCL process group is created first (and checked with an
all-reduce); the trainer's RankWorker sees the group and shards the actor and the reference with FSDP2
(bf16 compute, fp32 master weights), gives the hf engine its own copy, and syncs it in buckets after
each update — the same code as N GPU workers, at world size 1. Written to DIR: results.json (every
metric of every step, the memory timeline) and results.md (the table for docs/benchmarks.md).

MFU of the update: 6 * parameters * tokens (forward + backward of prompt+response tokens, the usual
dense estimate; attention FLOPs ignored, small at these lengths) / timing_s/update_actor / peak bf16
FLOP/s of the GPU (--peak-tflops; H100/H200 SXM dense bf16: 989). On a model this small the GPU is
mostly idle (launch-bound): the figure checks the plumbing, not the hardware.
"""
from __future__ import annotations

import argparse
import json
import socket
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--preset", default="demo", choices=["smoke", "demo"])
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--n", type=int, default=8)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    import torch
    import torch.distributed as dist

    if not torch.cuda.is_available():
        print("no CUDA device: the GPU check cannot run here", file=sys.stderr)
        return 2
    result: dict = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda}
    t0 = time.perf_counter()
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    torch.cuda.set_device(0)
    x = torch.ones(4, device="cuda")
    dist.all_reduce(x)
    torch.cuda.synchronize()
    result["nccl"] = {"backend": dist.get_backend(), "all_reduce_ok": bool(torch.all(x == 1).item()),
                      "init_s": time.perf_counter() - t0}
    print("NCCL:", result["nccl"])

    from trainer.config import apply_overrides
    from trainer.loop import Trainer
    from trainer.models.tiny import make_tiny_model
    from trainer.recipes import get_recipe
    from trainer.sinks import Emitter, build_sinks
    from trainer.tasks import arith

    work = Path(tempfile.mkdtemp(prefix="gpu_check_"))
    model = make_tiny_model(work / "model", preset=args.preset, seed=0)
    arith.main([str(work / "data"), "--train", "512", "--test", "16", "--sft", "0"])
    cfg = apply_overrides(get_recipe("cpu_smoke"), {
        "actor_rollout_ref.model.path": str(model), "data.train_files": str(work / "data" / "train.jsonl"),
        "data.train_batch_size": args.batch, "actor_rollout_ref.rollout.n": args.n,
        "actor_rollout_ref.actor.ppo_mini_batch_size": args.batch, "actor_rollout_ref.model.dtype": "bfloat16",
        "actor_rollout_ref.rollout.response_length": 64, "data.max_response_length": 64,
        "actor_rollout_ref.rollout.update_weights_bucket_megabytes": 1,
        "trainer.device": "cuda", "trainer.launcher": "local", "trainer.n_gpus_per_node": 1,
        "trainer.total_training_steps": args.steps, "trainer.save_freq": -1, "trainer.torch_threads": 4,
        "trainer.default_local_dir": str(work / "run"), "trainer.logger": ["jsonl"],
        "report.memory_interval_s": 0.25})
    (work / "run").mkdir(parents=True, exist_ok=True)
    emitter = Emitter(build_sinks(["jsonl"], out_dir=work / "run", config=cfg))
    trainer = Trainer(cfg, emitter=emitter)
    trainer.setup()
    worker = trainer.group.worker
    result["fsdp2_sharded"] = bool(worker.sharded)
    result["engine_has_own_copy"] = not worker.shared_engine
    n_params = sum(p.numel() for p in worker.actor.model.parameters())
    steps = []
    try:
        for s in range(1, args.steps + 1):
            m = trainer.train_step(s)
            emitter.metrics(s, m)
            flops = 6 * n_params * m["perf/total_num_tokens"]
            m["perf/mfu/actor_update"] = flops / max(1e-9, m["timing_s/update_actor"]) / (args.peak_tflops * 1e12)
            steps.append(m)
            print(f"step {s}: {m['timing_s/step']:.3f} s, update {m['timing_s/update_actor']:.3f} s, "
                  f"sync {m.get('timing_s/reshard', 0):.4f} s / {m.get('perf/weight_sync_mb', 0):.2f} MB, "
                  f"MFU(update) {100 * m['perf/mfu/actor_update']:.3f}%, "
                  f"max alloc {m.get('perf/max_memory_allocated_gb', 0):.3f} GB")
    finally:
        trainer.close()
        emitter.close()
        dist.destroy_process_group()
    events = [json.loads(line) for line in (work / "run" / "events.jsonl").read_text().splitlines()]
    memory = [e["data"] | {"time": e["time"]} for e in events if e["type"] == "memory"]
    result.update(params=n_params, steps=steps, memory_timeline=memory,
                  phases_seen=sorted({m["phase"] for m in memory}),
                  mean_step_s=sum(m["timing_s/step"] for m in steps[1:]) / max(1, len(steps) - 1),
                  mean_mfu_update=sum(m["perf/mfu/actor_update"] for m in steps[1:]) / max(1, len(steps) - 1),
                  wall_s=time.perf_counter() - t0)
    (out / "results.json").write_text(json.dumps(result, indent=1, default=str))
    md = [f"GPU: {result['device']}; torch {result['torch']} (CUDA {result['cuda']}); NCCL all-reduce ok: "
          f"{result['nccl']['all_reduce_ok']}; FSDP2 sharded: {result['fsdp2_sharded']}; model {n_params / 1e6:.2f} M params.",
          "", "| step | s/step | gen | update | sync (reshard) | MB synced | MFU update | max alloc GB |",
          "|---|---|---|---|---|---|---|---|"]
    for i, m in enumerate(steps, 1):
        md.append(f"| {i} | {m['timing_s/step']:.3f} | {m['timing_s/gen']:.3f} | {m['timing_s/update_actor']:.3f} | "
                  f"{m.get('timing_s/reshard', 0):.4f} | {m.get('perf/weight_sync_mb', 0):.2f} | "
                  f"{100 * m['perf/mfu/actor_update']:.3f}% | {m.get('perf/max_memory_allocated_gb', 0):.3f} |")
    md.append(f"\nMemory timeline: {len(memory)} samples, phases {', '.join(result['phases_seen'])}.")
    from trainer.memory import nvml_unavailable

    used = [m.get("device_used", 0) for m in memory]
    result["nvml"] = {"max_device_used_gb": max(used, default=0) / 2**30, "unavailable": nvml_unavailable("cuda:0")}
    md.append(f"Device memory in use (NVML), max: {result['nvml']['max_device_used_gb']:.3f} GB"
              if any(used) else f"NVML not read: {result['nvml']['unavailable']}")
    (out / "results.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    ok = result["nccl"]["all_reduce_ok"] and result["fsdp2_sharded"] and len(steps) == args.steps
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
