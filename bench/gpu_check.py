"""The GPU check's body (run by bench/gpu_check.sh): NCCL, FSDP2 + hf rollout, 5 GRPO steps, memory, MFU;
then the SGLang hybrid engine when sglang is importable.

    python bench/gpu_check.py --out DIR [--steps 5] [--preset demo] [--device cuda]
                              [--sglang auto|skip|only] [--sglang-steps 3] [--sglang-mem-fraction 0.2]
                              [--sglang-engine-kwargs '{"attention_backend": "triton"}']
    python bench/gpu_check.py --from-json DIR/results.json --write docs/benchmarks.md   # back from the device

One process, one GPU, no Ray: a one-rank NCCL process group is created first (and checked with an
all-reduce); the trainer's RankWorker sees the group and shards the actor and the reference with FSDP2
(bf16 compute, fp32 master weights), gives the hf engine its own copy, and syncs it in buckets after
each update — the same code as N GPU workers, at world size 1. Written to DIR: results.json (every
metric of every step, the memory timeline) and results.md (the table for docs/benchmarks.md), both
rewritten after the NCCL check, after setup and after every step, so a run stopped at its time limit
keeps what it finished (a failure is written down with the last lines of its traceback). --device cpu
runs the same wiring over gloo on the CPU (the tests' and bench/gpu_session.sh --smoke's dry run).
--from-json renders an earlier results.json; --write puts it between docs/benchmarks.md's
`<!-- bench:gpu_check:begin/end -->` markers.

MFU of the update: the trainer's perf/mfu/actor (trainer/flops.py: verl's FLOP count of the update
over the step's sequences / the update's seconds / verl's peak bf16 FLOP/s for the device, 989 for
H100/H200); "n/a" where the trainer reports none (the CPU, a GPU outside verl's table). On a model
this small the GPU is mostly idle (launch-bound): the figure checks the plumbing, not the hardware.

SGLang section (`sglang_section`; "not run: sglang not installed" where it is not importable): the
same trainer with actor_rollout_ref.rollout.name=sglang on the same tiny model, --sglang-steps GRPO
steps with a fresh one-rank NCCL group, so the FSDP2 actor's full tensors go to the SGLang Engine in
buckets of 1 MB (update_weights_from_tensor, flush_cache on the last) and the engine's memory is
released after each rollout and resumed before the sync. Recorded: step times, sync MB / buckets /
seconds, the rollout-vs-actor log-prob mismatch (rollout_corr/kl and log_ppl_abs_diff: near 0 when
the synced weights are the actor's), the memory timeline's CUDA fields per phase (SGLang's pool lives
in its own processes, so only the device-wide reading sees it), and a release/resume probe: greedy
output before, device memory in use (CUDA driver, all processes) resident / released / resumed, the
same greedy output after. The tiny model's head size is 32, so the Engine gets --sglang-engine-kwargs
(default the triton attention backend, which takes any head size) on top of the backend's own.
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


BEGIN, END = "<!-- bench:gpu_check:begin -->", "<!-- bench:gpu_check:end -->"


def save(out: Path | None, result: dict) -> None:
    """results.json and results.md from what `result` holds now: called after the NCCL check and after
    every step, so a run stopped at its time limit still returns its figures."""
    if out is None:
        return
    (out / "results.json").write_text(json.dumps(result, indent=1, default=str))
    (out / "results.md").write_text(render(result))


def _mfu(m: dict) -> str:
    """A step's perf/mfu/actor as a percentage, "n/a" when the trainer reported none."""
    v = m.get("perf/mfu/actor")
    return "n/a" if v is None else f"{100 * v:.3f}%"


def _mean_mfu(steps: list[dict]) -> float | None:
    """The mean perf/mfu/actor over the steps that report it (None when none does)."""
    vals = [m["perf/mfu/actor"] for m in steps if "perf/mfu/actor" in m]
    return sum(vals) / len(vals) if vals else None


def render(result: dict) -> str:
    """results.md: the main check's table (the SGLang section is appended by run_sglang_section)."""
    nccl = result.get("nccl") or {}
    md = [f"GPU: {result.get('device')}; torch {result.get('torch')} (CUDA {result.get('cuda')}); NCCL all-reduce ok: "
          f"{nccl.get('all_reduce_ok')}; FSDP2 sharded: {result.get('fsdp2_sharded', 'not reached')}"
          + (f"; model {result['params'] / 1e6:.2f} M params." if result.get("params") else ".")]
    steps = result.get("steps") or []
    if steps:
        md += ["", "| step | s/step | gen | update | sync (reshard) | MB synced | MFU update | max alloc GB |",
               "|---|---|---|---|---|---|---|---|"]
    for i, m in enumerate(steps, 1):
        md.append(f"| {i} | {m['timing_s/step']:.3f} | {m['timing_s/gen']:.3f} | {m['timing_s/update_actor']:.3f} | "
                  f"{m.get('timing_s/reshard', 0):.4f} | {m.get('perf/weight_sync_mb', 0):.2f} | "
                  f"{_mfu(m)} | {m.get('perf/max_memory_allocated_gb', 0):.3f} |")
    if result.get("steps_planned") and len(steps) < result["steps_planned"]:
        md.append(f"\n{len(steps)} of {result['steps_planned']} steps finished when this was written.")
    memory = result.get("memory_timeline")
    if memory is not None:
        md.append(f"\nMemory timeline: {len(memory)} samples, phases {', '.join(result.get('phases_seen', []))}.")
    nvml = result.get("nvml")
    if nvml:
        md.append(f"Device memory in use (NVML), max: {nvml['max_device_used_gb']:.3f} GB"
                  if nvml["max_device_used_gb"] else f"NVML not read: {nvml['unavailable']}")
    if result.get("error"):
        tail = "\n".join(result["error"].strip().splitlines()[-6:])
        md += ["", "Failed:", "", "```", tail, "```"]
    section = result.get("sglang")
    if section is not None:
        md += ["", sglang_markdown(section)]
    return "\n".join(md) + "\n"


def write_docs(path: Path, result: dict) -> None:
    """Replace the gpu_check section of `path` (docs/benchmarks.md) with `result`'s tables."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from md_sections import replace_section

    replace_section(path, f"{BEGIN}\n{render(result)}{END}\n", begin=BEGIN, end=END)
    print(f"wrote {path}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, help="the results folder (required unless --from-json)")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--preset", default="demo", choices=["smoke", "demo"])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                    help="cpu: the same wiring over gloo, for the CPU's dry run (its figures mean nothing)")
    ap.add_argument("--sglang", default="auto", choices=["auto", "skip", "only"],
                    help="auto: the SGLang section after the main check when sglang is importable")
    ap.add_argument("--sglang-steps", type=int, default=3)
    ap.add_argument("--sglang-mem-fraction", type=float, default=0.2, help="rollout.gpu_memory_utilization")
    ap.add_argument("--sglang-engine-kwargs", default='{"attention_backend": "triton"}',
                    help="JSON: extra sglang.Engine keywords for this check (the tiny model's head size is 32)")
    ap.add_argument("--from-json", type=Path, help="render an earlier run's results.json (with --write: into the docs)")
    ap.add_argument("--write", type=Path, help="replace the gpu_check section of this markdown file")
    args = ap.parse_args(argv)
    if args.from_json:
        result = json.loads(args.from_json.read_text())
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            save(args.out, result)
        print(render(result))
        if args.write:
            write_docs(args.write, result)
        return 0
    if args.out is None:
        ap.error("--out is required (unless --from-json)")
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    if args.sglang == "only":
        return run_sglang_section(args, out)

    import traceback

    import torch
    import torch.distributed as dist

    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        print("no CUDA device: the GPU check cannot run here", file=sys.stderr)
        return 2
    result: dict = {"device": torch.cuda.get_device_name(0) if cuda else "cpu (dry run)", "torch": torch.__version__,
                    "cuda": torch.version.cuda, "steps_planned": args.steps}
    t0 = time.perf_counter()
    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"tcp://127.0.0.1:{free_port()}",
                            rank=0, world_size=1)
    if cuda:
        torch.cuda.set_device(0)
    x = torch.ones(4, device=args.device)
    dist.all_reduce(x)
    if cuda:
        torch.cuda.synchronize()
    result["nccl"] = {"backend": dist.get_backend(), "all_reduce_ok": bool(torch.all(x == 1).item()),
                      "init_s": time.perf_counter() - t0}
    print("NCCL:", result["nccl"])
    save(out, result)
    try:
        steps = run_steps(args, result, out)
    except Exception:  # written down with its traceback, then raised: the script's exit says it failed
        result["error"] = traceback.format_exc()
        save(out, result)
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    print(render(result))
    ok = result["nccl"]["all_reduce_ok"] and result["fsdp2_sharded"] and len(steps) == args.steps
    sglang_rc = 0 if args.sglang == "skip" else run_sglang_section(args, out)
    return 0 if ok and sglang_rc == 0 else 1


def run_steps(args: argparse.Namespace, result: dict, out: Path) -> list[dict]:
    """The trainer on the tiny model over the process group main() made: --steps GRPO steps, `result`
    (and results.json / results.md) updated after each; then the memory timeline and NVML."""
    from trainer.config import apply_overrides
    from trainer.loop import Trainer
    from trainer.models.tiny import make_tiny_model
    from trainer.recipes import get_recipe
    from trainer.sinks import Emitter, build_sinks
    from trainer.tasks import arith

    t0 = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="gpu_check_"))
    model = make_tiny_model(work / "model", preset=args.preset, seed=0)
    arith.main([str(work / "data"), "--train", "512", "--test", "16", "--sft", "0"])
    cfg = apply_overrides(get_recipe("cpu_smoke"), {
        "actor_rollout_ref.model.path": str(model), "data.train_files": str(work / "data" / "train.jsonl"),
        "data.train_batch_size": args.batch, "actor_rollout_ref.rollout.n": args.n,
        "actor_rollout_ref.actor.ppo_mini_batch_size": args.batch, "actor_rollout_ref.model.dtype": "bfloat16",
        "actor_rollout_ref.rollout.response_length": 64, "data.max_response_length": 64,
        "actor_rollout_ref.rollout.update_weights_bucket_megabytes": 1,
        "trainer.device": args.device, "trainer.launcher": "local", "trainer.n_gpus_per_node": 1,
        "trainer.total_training_steps": args.steps, "trainer.save_freq": -1,
        "trainer.torch_threads": 4 if args.device == "cuda" else 1,
        "trainer.default_local_dir": str(work / "run"), "trainer.logger": ["jsonl"],
        "report.memory_interval_s": 0.25})
    (work / "run").mkdir(parents=True, exist_ok=True)
    emitter = Emitter(build_sinks(["jsonl"], out_dir=work / "run", config=cfg))
    trainer = Trainer(cfg, emitter=emitter)
    steps: list[dict] = []
    try:
        trainer.setup()
        worker = trainer.group.worker
        n_params = sum(p.numel() for p in worker.actor.model.parameters())
        result.update(fsdp2_sharded=bool(worker.sharded), engine_has_own_copy=not worker.shared_engine,
                      params=n_params, steps=steps)
        save(out, result)
        for s in range(1, args.steps + 1):
            m = trainer.train_step(s)
            emitter.metrics(s, m)
            steps.append(m)
            save(out, result)
            print(f"step {s}: {m['timing_s/step']:.3f} s, update {m['timing_s/update_actor']:.3f} s, "
                  f"sync {m.get('timing_s/reshard', 0):.4f} s / {m.get('perf/weight_sync_mb', 0):.2f} MB, "
                  f"MFU(update) {_mfu(m)}, "
                  f"max alloc {m.get('perf/max_memory_allocated_gb', 0):.3f} GB", flush=True)
    finally:
        trainer.close()
        emitter.close()
    events = [json.loads(line) for line in (work / "run" / "events.jsonl").read_text().splitlines()]
    memory = [e["data"] | {"time": e["time"]} for e in events if e["type"] == "memory"]
    from trainer.memory import nvml_unavailable

    used = [m.get("device_used", 0) for m in memory]
    result.update(memory_timeline=memory, phases_seen=sorted({m["phase"] for m in memory}),
                  mean_step_s=sum(m["timing_s/step"] for m in steps[1:]) / max(1, len(steps) - 1),
                  mean_mfu_update=_mean_mfu(steps[1:]),
                  wall_s=time.perf_counter() - t0,
                  nvml={"max_device_used_gb": max(used, default=0) / 2**30,
                        "unavailable": nvml_unavailable("cuda:0") if args.device == "cuda" else "not on a GPU"})
    save(out, result)
    return steps


# ------------------------------------------------------------------------------------------ SGLang
SGLANG_STEP_KEYS = ("timing_s/step", "timing_s/gen", "timing_s/update_actor", "timing_s/reshard",
                    "perf/weight_sync_mb", "perf/weight_sync_buckets", "rollout_corr/kl",
                    "rollout_corr/log_ppl_abs_diff", "perf/max_device_memory_used_gb")


def run_sglang_section(args: argparse.Namespace, out: Path) -> int:
    """Run the SGLang section, add it to results.json / results.md in `out`; 0 unless it failed."""
    import traceback

    try:
        section = sglang_section(args)
    except Exception as exc:  # the section's failure is a result, written down with its traceback
        section = {"status": f"failed: {type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
    path = out / "results.json"
    result = json.loads(path.read_text()) if path.exists() else {}
    result["sglang"] = section
    path.write_text(json.dumps(result, indent=1, default=str))
    md = sglang_markdown(section)
    with open(out / "results.md", "a") as fh:
        fh.write("\n" + md + "\n")
    print(md)
    return 1 if section["status"].startswith("failed") else 0


def phase_memory(memory: list[dict]) -> dict[str, dict[str, float]]:
    """Per phase of the memory timeline: the largest torch allocation and NVML device reading (GB)."""
    out: dict[str, dict[str, float]] = {}
    for m in memory:
        ph = out.setdefault(m["phase"], {"max_allocated_gb": 0.0, "max_device_used_gb": 0.0, "samples": 0})
        ph["max_allocated_gb"] = max(ph["max_allocated_gb"], m.get("allocated", 0) / 2**30)
        ph["max_device_used_gb"] = max(ph["max_device_used_gb"], m.get("device_used", 0) / 2**30)
        ph["samples"] += 1
    return out


def release_resume_probe(engine, prompt_ids: list[int], used_bytes) -> dict:
    """Greedy output, then device memory in use resident / released / resumed (`used_bytes()`), then
    the greedy output again: resume must give back the same weights."""
    from trainer.rollout.base import GenerationRequest, SamplingParams

    req = [GenerationRequest("probe", list(prompt_ids), SamplingParams(temperature=0.0, max_new_tokens=16))]
    before = engine.generate(req)[0].output_ids
    resident = used_bytes()
    engine.release_memory()
    released = used_bytes()
    engine.resume_memory()
    resumed = used_bytes()
    after = engine.generate(req)[0].output_ids
    return {"resident_gb": resident / 2**30, "released_gb": released / 2**30, "resumed_gb": resumed / 2**30,
            "freed_gb": (resident - released) / 2**30, "greedy_before": before, "greedy_after": after,
            "same_after_resume": before == after}


def sglang_section(args: argparse.Namespace, *, device: str = "cuda") -> dict:
    """The hybrid engine with SGLang on this GPU (see the module docstring); {"status": ...} + figures.

    device="cpu" is for the wiring's dry run in tests (tests/bench/test_gpu_check.py: gloo, a stand-in
    `sglang` module, process RSS instead of device memory); the check itself runs on "cuda"."""
    import importlib.util

    if importlib.util.find_spec("sglang") is None:
        return {"status": "not run: sglang not installed"}
    import sglang
    import torch
    import torch.distributed as dist

    from trainer.config import apply_overrides
    from trainer.loop import Trainer
    from trainer.models.tiny import make_tiny_model
    from trainer.recipes import get_recipe
    from trainer.sinks import Emitter, build_sinks
    from trainer.tasks import arith

    if device == "cuda" and not torch.cuda.is_available():
        return {"status": "not run: no CUDA device"}
    from importlib import metadata

    try:
        version = metadata.version("sglang")
    except metadata.PackageNotFoundError:
        version = getattr(sglang, "__version__", "unknown")
    section: dict = {"sglang": version, "engine_kwargs": json.loads(args.sglang_engine_kwargs)}
    work = Path(tempfile.mkdtemp(prefix="gpu_check_sglang_"))
    model = make_tiny_model(work / "model", preset=args.preset, seed=0)
    arith.main([str(work / "data"), "--train", "512", "--test", "16", "--sft", "0"])
    cfg = apply_overrides(get_recipe("cpu_smoke"), {
        "actor_rollout_ref.model.path": str(model), "data.train_files": str(work / "data" / "train.jsonl"),
        "data.train_batch_size": args.batch, "actor_rollout_ref.rollout.n": args.n,
        "actor_rollout_ref.actor.ppo_mini_batch_size": args.batch, "actor_rollout_ref.model.dtype": "bfloat16",
        "actor_rollout_ref.rollout.name": "sglang", "actor_rollout_ref.rollout.free_cache_engine": True,
        "actor_rollout_ref.rollout.gpu_memory_utilization": args.sglang_mem_fraction,
        "actor_rollout_ref.rollout.response_length": 64, "data.max_response_length": 64,
        "actor_rollout_ref.rollout.update_weights_bucket_megabytes": 1,
        "trainer.device": device, "trainer.launcher": "local", "trainer.n_gpus_per_node": 1,
        "trainer.total_training_steps": args.sglang_steps, "trainer.save_freq": -1, "trainer.torch_threads": 4,
        "trainer.default_local_dir": str(work / "run"), "trainer.logger": ["jsonl"],
        "report.memory_interval_s": 0.25})
    (work / "run").mkdir(parents=True, exist_ok=True)
    real_engine = sglang.Engine
    extra = section["engine_kwargs"]
    sglang.Engine = lambda **kw: real_engine(**{**kw, **extra})  # read by the backend when it builds one

    def used_bytes() -> int:
        if device == "cpu":
            from trainer.memory import rss_bytes

            return rss_bytes()
        torch.cuda.synchronize()
        free, total = torch.cuda.mem_get_info()
        return total - free  # the whole device, SGLang's processes included

    dist.init_process_group("nccl" if device == "cuda" else "gloo", init_method=f"tcp://127.0.0.1:{free_port()}",
                            rank=0, world_size=1)
    emitter = Emitter(build_sinks(["jsonl"], out_dir=work / "run", config=cfg))
    trainer = Trainer(cfg, emitter=emitter)
    steps = []
    try:
        before_setup = used_bytes()
        t0 = time.perf_counter()
        trainer.setup()  # builds the Engine (its processes, weights, KV pool, CUDA graphs), first sync
        section.update(setup_s=time.perf_counter() - t0, used_before_engine_gb=before_setup / 2**30,
                       used_after_setup_gb=used_bytes() / 2**30)
        worker = trainer.group.worker
        section.update(engine=worker.engine_name, fsdp2_sharded=bool(worker.sharded))
        for s in range(1, args.sglang_steps + 1):
            m = trainer.train_step(s)
            emitter.metrics(s, m)
            steps.append({k: m[k] for k in SGLANG_STEP_KEYS if k in m})
            print(f"sglang step {s}:", {k: round(float(v), 5) for k, v in steps[-1].items()})
        prompt = worker.tokenizer.encode("What is 12 + 30?")
        section["probe"] = release_resume_probe(worker.engine, prompt, used_bytes)
    finally:
        sglang.Engine = real_engine
        trainer.close()  # shuts the Engine down
        emitter.close()
        dist.destroy_process_group()
    events = [json.loads(line) for line in (work / "run" / "events.jsonl").read_text().splitlines()]
    memory = [e["data"] for e in events if e["type"] == "memory"]
    section.update(steps=steps, memory_by_phase=phase_memory(memory))
    problems = [f"step {i}: no weight buckets" for i, m in enumerate(steps, 1) if not m.get("perf/weight_sync_buckets")]
    if len(steps) != args.sglang_steps:
        problems.append(f"{len(steps)} of {args.sglang_steps} steps")
    if not section["probe"]["same_after_resume"]:
        problems.append("greedy output changed across release/resume")
    if section["probe"]["freed_gb"] <= 0:
        problems.append("release freed no device memory")
    section["status"] = "ok" if not problems else "failed: " + "; ".join(problems)
    return section


def sglang_markdown(section: dict) -> str:
    """The SGLang section of results.md."""
    if not section.get("steps"):
        return f"SGLang hybrid engine: {section['status']}"
    lines = [f"SGLang hybrid engine ({section.get('sglang')}, Engine extra {section.get('engine_kwargs')}): "
             f"{section['status']}; setup (Engine start + first sync) {section['setup_s']:.1f} s; FSDP2 sharded: "
             f"{section['fsdp2_sharded']}.", "",
             "| step | s/step | gen | update | sync | MB synced | buckets | rollout_corr/kl | log_ppl_abs_diff |",
             "|---|---|---|---|---|---|---|---|---|"]
    for i, m in enumerate(section["steps"], 1):
        lines.append(f"| {i} | {m.get('timing_s/step', 0):.3f} | {m.get('timing_s/gen', 0):.3f} | "
                     f"{m.get('timing_s/update_actor', 0):.3f} | {m.get('timing_s/reshard', 0):.4f} | "
                     f"{m.get('perf/weight_sync_mb', 0):.2f} | {m.get('perf/weight_sync_buckets', 0):.0f} | "
                     f"{m.get('rollout_corr/kl', float('nan')):.2e} | "
                     f"{m.get('rollout_corr/log_ppl_abs_diff', float('nan')):.2e} |")
    p = section["probe"]
    lines += ["", f"Release/resume (device memory in use, all processes): resident {p['resident_gb']:.2f} GB, "
              f"released {p['released_gb']:.2f} GB (freed {p['freed_gb']:.2f}), resumed {p['resumed_gb']:.2f} GB; "
              f"greedy output the same after resume: {p['same_after_resume']}.",
              "Memory timeline by phase (max torch allocated / max NVML device used, GB): " + ", ".join(
                  f"{ph} {v['max_allocated_gb']:.2f} / {v['max_device_used_gb']:.2f}"
                  for ph, v in section["memory_by_phase"].items()) + "."]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
