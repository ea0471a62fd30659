"""Benchmark: one GRPO step of RL Studio's trainer against TRL's GRPOTrainer, and against the compute floor.

Run (from the repository root, TRL installed: `pip install trl==1.16.0 accelerate==1.15.0`):

    .venv/bin/python bench/grpo_vs_trl.py --threads 1 [--steps 6] [--warmup 1] [--precisions fp32,bf16]
                                          [--compile off|on|both] [--profile] [--write docs/benchmarks.md]

Workload, identical for both: the tiny demo-preset model (trainer.models.tiny, made here), the arithmetic
task's RL prompts (trainer.tasks.arith, single turn, no tools: TRL's trainer has none), 8 prompts x 8
samples, at most 32 new tokens (temperature 1, no top-k/top-p, stop at <|im_end|>/<|endoftext|>), KL loss
beta 0.04 against a frozen reference model, one optimizer step per batch (AdamW, lr 1e-6, grad clip 1),
the same torch threads, and the same precision: fp32 for both, then bf16 autocast for both (TRL:
`bf16=True`, accelerate's autocast; ours: `actor_rollout_ref.model.dtype=bfloat16`).

Compilation, both or neither (`--compile`; default off: eager against eager): `on` runs a compiled
pair, ours with `actor_rollout_ref.actor.use_torch_compile=true` (the actor's and the reference's
log-prob/update forward; generation stays eager) and TRL with `GRPOConfig(torch_compile=True)` (the
training and reference model through accelerate's torch.compile; TRL's `generate` runs the eager
module underneath); `both` runs the eager and the compiled pairs. Compilation happens in the first
steps, so a compiled pair runs at least 3 warm-up steps (TRL compiles with static shapes first and
recompiles with dynamic ones at the next new shape); each side's compile time is reported apart, as its
warm-up time minus that many of its measured mean steps, and is in no step mean.

Each (precision, compile) pair runs in its own subprocess (accelerate keeps process-wide state). Inside it, the steps
ALTERNATE: TRL's own training loop runs and, from a callback at the end of each TRL step, one RL Studio
step runs; a TRL step's time is the wall time between two of its step ends minus the RL Studio step run
in between. Warm-up steps are excluded. Load on a shared machine hits both sides alike, so the ratio is
the figure that counts.

The compute floor (bench/flops.py): every matmul of our step (rollout with KV-cached decode, reference
forward, old-log-prob forward when the trainer runs it, policy forward + backward) counted from the model
config and the step's real prompt/response lengths, each divided by the rate a plain torch matmul reaches
at that exact shape on the same threads and dtype. On a shared machine that rate swings with the load, so
it is sampled between steps (outside both clocks; fp32 only, see below) and once more after the run, and
the best rate per shape is kept: the floor is the quiet-machine limit. Each side is held to the floor of
the matmuls it runs: ours computes each distinct prompt once for its n samples (engine prefill and
trainer/workers/prefix.py; `prompt_group`), TRL every trajectory's prompt (bench/flops.py `group`).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "platform"))

PROMPTS, N, NEW_TOKENS, BETA, LR = 8, 8, 32, 0.04, 1e-6
BEGIN, END = "<!-- bench:grpo_vs_trl:begin -->", "<!-- bench:grpo_vs_trl:end -->"


# ------------------------------------------------------------------------------------------ shared data
def prepare(workdir: Path) -> tuple[Path, Path]:
    """The tiny demo model and a single-turn, tool-free copy of the arithmetic RL prompts."""
    from trainer.models.tiny import make_tiny_model
    from trainer.tasks import arith

    model_dir = workdir / "model"
    if not (model_dir / "config.json").exists():
        make_tiny_model(model_dir, preset="demo", seed=0)
    data = workdir / "train.jsonl"
    if not data.exists():
        rows = arith.make_rl_rows("train", 512, seed=0)
        with data.open("w") as f:
            for row in rows:
                row["extra_info"].pop("tools", None)  # no tool schema in the prompt: TRL has no tools here
                f.write(json.dumps(row) + "\n")
    return model_dir, data


# ------------------------------------------------------------------------------------------ RL Studio
def build_ours(model_dir: Path, data: Path, out: Path, *, precision: str, threads: int, steps: int,
               compiled: bool = False):
    from trainer.config import Config
    from trainer.loop import Trainer
    from trainer.sinks import Emitter, build_sinks

    cfg = Config.from_dict({
        "data": {"train_files": str(data), "max_prompt_length": 256, "max_response_length": NEW_TOKENS,
                 "train_batch_size": PROMPTS, "shuffle": True, "seed": 1},
        "actor_rollout_ref": {
            "model": {"path": str(model_dir), "dtype": "bfloat16" if precision == "bf16" else "float32"},
            "rollout": {"name": "hf", "n": N, "response_length": NEW_TOKENS, "temperature": 1.0, "top_p": 1.0,
                        "top_k": -1, "multi_turn": {"enable": False}},
            "actor": {"ppo_mini_batch_size": PROMPTS, "ppo_epochs": 1, "use_kl_loss": True, "kl_loss_coef": BETA,
                      "kl_loss_type": "low_var_kl", "loss_agg_mode": "token-mean", "grad_clip": 1.0,
                      "use_torch_compile": compiled, "optim": {"lr": LR}},
        },
        "algorithm": {"adv_estimator": "grpo"},
        "tools": {"names": []},
        "trainer": {"total_training_steps": steps + 2, "default_local_dir": str(out), "save_freq": -1,
                    "test_freq": -1, "val_before_train": False, "device": "cpu", "torch_threads": threads,
                    "logger": ["jsonl"], "export_hf": False, "seed": 1},
    })
    out.mkdir(parents=True, exist_ok=True)
    emitter = Emitter(build_sinks(["jsonl"], out_dir=out, config=cfg))
    trainer = Trainer(cfg, emitter=emitter)
    trainer.setup()
    return trainer


def prompt_group(trainer, prompts: list[list[int]]) -> int:
    """Trajectories per shared prompt in our step's FLOP count: rollout.n when the trajectories come in
    runs of n with one prompt each and the actor computes each distinct prompt once; else 1."""
    n = trainer.n
    runs = len(prompts) % n == 0 and all(prompts[i] == prompts[i - i % n] for i in range(len(prompts)))
    share = getattr(trainer.actor, "share_prompts", False)
    return n if (n > 1 and runs and share) else 1


def our_step(trainer, step: int) -> tuple[float, dict[str, float], list[int], list[int], int]:
    """One full step as `fit` runs it (train_step + the metrics event); returns wall s, metrics, lengths
    and the prompt group of the FLOP count (`prompt_group`)."""
    captured: dict[str, list[list[int]]] = {}
    original = trainer.score

    def score(trajs):  # record the real lengths for the FLOP count; no effect on the step
        captured["p"] = [len(t.prompt_ids) for t in trajs]
        captured["r"] = [len(t.response_ids) for t in trajs]
        captured["g"] = prompt_group(trainer, [t.prompt_ids for t in trajs])
        return original(trajs)

    trainer.score = score
    t0 = time.perf_counter()
    metrics = trainer.train_step(step)
    trainer.emitter.metrics(step, metrics)
    wall = time.perf_counter() - t0
    trainer.score = original
    return wall, metrics, captured["p"], captured["r"], captured["g"]


# ------------------------------------------------------------------------------------------ TRL
def trl_rows(rows: list[dict]) -> "datasets.Dataset":  # noqa: F821 - datasets is imported lazily
    """verl-format rows as TRL's dataset: the prompt messages, the ground truth and the data source."""
    import datasets

    return datasets.Dataset.from_list([{"prompt": r["prompt"], "ground_truth": r["reward_model"]["ground_truth"],
                                        "data_source": r.get("data_source") or "arith"} for r in rows])


def trl_reward(completions, ground_truth, data_source=None, **_kw) -> list[float]:
    """TRL reward function: trainer.rewards.compute_score of each completion, by its row's data source
    (the same scorer RL Studio's step uses)."""
    from trainer.rewards import compute_score

    out = []
    sources = data_source or ["arith"] * len(completions)
    for c, gt, src in zip(completions, ground_truth, sources):
        text = c[-1]["content"] if isinstance(c, list) else c
        s = compute_score(src, text, gt)
        out.append(float(s["score"] if isinstance(s, dict) else s))
    return out


def build_trl(model_dir: Path, data: Path, out: Path, *, precision: str, max_steps: int, callback,
              compiled: bool = False, **overrides):
    """TRL's GRPOTrainer on `data` (verl-format JSONL) with this bench's workload; `overrides` replace
    GRPOConfig fields (bench/gpu_grpo.py sets its own batch, lengths and device). Returns the trainer
    and its generation timing ({generate_s, generated_tokens, prompt_tokens} per generate call)."""
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    rows = [json.loads(line) for line in data.read_text().splitlines()]
    ds = trl_rows(rows)
    kwargs = dict(
        output_dir=str(out), per_device_train_batch_size=PROMPTS * N, num_generations=N,
        gradient_accumulation_steps=1, max_completion_length=NEW_TOKENS, temperature=1.0, top_p=1.0, top_k=0,
        beta=BETA, learning_rate=LR, max_grad_norm=1.0, lr_scheduler_type="constant", warmup_steps=0,
        max_steps=max_steps, use_cpu=True, bf16=precision == "bf16", fp16=False,
        model_init_kwargs={"dtype": "float32"}, report_to="none", save_strategy="no", logging_steps=1,
        disable_tqdm=True, dataloader_num_workers=0, seed=1, shuffle_dataset=True, log_completions=False,
        torch_compile=compiled,
    )
    kwargs.update(overrides)
    args = GRPOConfig(**kwargs)
    tok = AutoTokenizer.from_pretrained(model_dir)
    trainer = GRPOTrainer(model=str(model_dir), reward_funcs=trl_reward, args=args, train_dataset=ds,
                          processing_class=tok, callbacks=[callback])
    # Time TRL's generation (instrumentation only): the unwrapped model is this same module on one CPU.
    model = trainer.model
    gen = model.generate
    timing = {"generate_s": [], "generated_tokens": [], "prompt_tokens": []}

    def timed_generate(*a, **kw):
        import torch

        if torch.cuda.is_available() and not args.use_cpu:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        res = gen(*a, **kw)
        if torch.cuda.is_available() and not args.use_cpu:
            torch.cuda.synchronize()
        timing["generate_s"].append(time.perf_counter() - t0)
        prompt_len = kw["input_ids"].shape[1] if "input_ids" in kw else a[0].shape[1]
        timing["generated_tokens"].append(int(res.shape[0] * (res.shape[1] - prompt_len)))
        mask = kw.get("attention_mask")
        timing["prompt_tokens"].append(int(mask.sum()) if mask is not None else int(res.shape[0] * prompt_len))
        return res

    model.generate = timed_generate
    return trainer, timing


# ------------------------------------------------------------------------------------------ one precision
def run_one(args: argparse.Namespace) -> dict:
    import torch
    from transformers import TrainerCallback

    torch.set_num_threads(args.threads)
    precision = args.one
    compiled = bool(args.compiled)
    tag = precision + ("_compiled" if compiled else "")
    workdir = Path(args.workdir)
    model_dir, data = prepare(workdir)
    ours = build_ours(model_dir, data, workdir / f"ours_{tag}", precision=precision, threads=args.threads,
                      steps=args.warmup + args.steps, compiled=compiled)
    total = args.warmup + args.steps
    from bench import flops

    shape = flops.ModelShape.from_hf_config(ours.actor.model.config)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    rates: dict = {}
    rec: dict = {"ours_s": [], "trl_s": [], "ours_metrics": [], "lens": [], "trl_logs": [], "ours_graphs": [],
                 "trl_graphs": []}
    profiler = None
    if args.profile:
        import cProfile

        profiler = cProfile.Profile()

    class Alternate(TrainerCallback):
        """TRL's step k ends -> our step k runs -> TRL's clock restarts (our step is not in TRL's time)."""

        def __init__(self):
            self.last_end = 0.0
            self.step = 0
            self.graphs = 0

        def on_train_begin(self, *_a, **_k):
            self.last_end = time.perf_counter()

        def on_log(self, _args, _state, _control, logs=None, **_k):
            if logs:
                rec["trl_logs"].append(dict(logs))

        def on_step_end(self, *_a, **_k):
            rec["trl_s"].append(time.perf_counter() - self.last_end)
            g0 = _graphs()
            rec["trl_graphs"].append(g0 - self.graphs)
            self.step += 1
            measured = self.step > args.warmup
            if profiler is not None and measured:
                profiler.enable()
            wall, metrics, p, r, g = our_step(ours, self.step)
            if profiler is not None and measured:
                profiler.disable()
            rec["ours_s"].append(wall)
            rec["ours_metrics"].append(metrics)
            rec["lens"].append((p, r, g))
            self.graphs = _graphs()
            rec["ours_graphs"].append(self.graphs - g0)
            # Bare-matmul rates sampled between steps (outside both clocks), the best per shape kept
            # (fp32 only: emulated bf16 matmuls on CPUs without AVX-512-BF16/AMX take minutes a pass).
            if measured and precision == "fp32":
                for group in dict.fromkeys((g, 1)):  # our work and TRL's (every prompt per trajectory)
                    work = flops.step_work(shape, p, r, with_ref=ours.ref is not None,
                                           with_old_log_prob=ours.recompute_old, group=group)
                    flops.best_rates(work, dtype, rates, min_time_s=0.01, repeats=1)
            self.last_end = time.perf_counter()

    trl, trl_timing = build_trl(model_dir, data, workdir / f"trl_{tag}", precision=precision, max_steps=total,
                                callback=Alternate(), compiled=compiled)
    trl.train()

    if args.torch_profile:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            our_step(ours, total + 1)
        rec["torch_profile"] = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15)

    w = args.warmup
    result = _summarise(rec, trl_timing, ours, precision=precision, warmup=w, threads=args.threads, rates=rates)
    result["compiled"] = compiled
    if profiler is not None:
        import io
        import pstats

        buf = io.StringIO()
        pstats.Stats(profiler, stream=buf).sort_stats("tottime").print_stats(20)
        result["cprofile"] = _trim_pstats(buf.getvalue())
    if "torch_profile" in rec:
        result["torch_profile"] = rec["torch_profile"]
    return result


def _graphs() -> int:
    """Graphs torch.compile has built so far in this process (a recompile adds one)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def _trim_pstats(text: str) -> str:
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip().startswith("ncalls")), 0)
    root = str(ROOT) + "/"
    return "\n".join(line.replace(root, "").replace(sys.prefix + "/lib/python3.11/site-packages/", "")
                     for line in lines[start:] if line.strip())


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def _summarise(rec: dict, trl_timing: dict, ours, *, precision: str, warmup: int, threads: int,
               rates: dict) -> dict:
    import torch

    from bench import flops

    ours_s, trl_s = rec["ours_s"][warmup:], rec["trl_s"][warmup:]
    samples = PROMPTS * N
    phases: dict[str, float] = {}
    for m in rec["ours_metrics"][warmup:]:
        for k, v in m.items():
            if k.startswith("timing_s/"):
                phases[k[len("timing_s/"):]] = phases.get(k[len("timing_s/"):], 0.0) + v / len(ours_s)
    resp_mean = _mean([m.get("response_length/mean", float("nan")) for m in rec["ours_metrics"][warmup:]])
    trl_len = [log.get("completions/mean_length") for log in rec["trl_logs"] if "completions/mean_length" in log]
    trl_gen_s = trl_timing["generate_s"][warmup:]
    trl_gen_tok = trl_timing["generated_tokens"][warmup:]
    gen_tok_ours = [sum(r) for _p, r, _g in rec["lens"][warmup:]]

    # Compute floor at our step's real lengths (mean over the measured steps).
    shape = flops.ModelShape.from_hf_config(ours.actor.model.config)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    # Our floor counts the work our step does (each distinct prompt once when the actor shares prompts:
    # group = rollout.n); TRL's counts every trajectory's prompt (group 1), the work TRL does.
    def work_of(p, r, group):
        return flops.step_work(shape, p, r, with_ref=ours.ref is not None, with_old_log_prob=ours.recompute_old,
                               group=group)

    p, r, g = rec["lens"][-1]  # one more careful pass after the run; the best rate per shape wins
    for group in dict.fromkeys((g, 1)):
        flops.best_rates(work_of(p, r, group), dtype, rates, min_time_s=0.05, repeats=3)
    floors, trl_floors, per_phase_acc, work_last, trl_work_last = [], [], {}, None, None
    for p, r, g in rec["lens"][warmup:]:
        work = work_of(p, r, g)
        floor, per_phase, rates = flops.compute_floor(work, dtype, rates=rates)
        floors.append(floor)
        trl_work_last = work_of(p, r, 1)
        trl_floors.append(flops.compute_floor(trl_work_last, dtype, rates=rates)[0])
        for k, v in per_phase.items():
            per_phase_acc[k] = per_phase_acc.get(k, 0.0) + v / len(ours_s)
        work_last = work
    bd = flops.breakdown(work_last)
    bd_trl = flops.breakdown(trl_work_last)
    floor, trl_floor = _mean(floors), _mean(trl_floors)
    eff_rate = flops.effective_rate(work_last, flops.compute_floor(work_last, dtype, rates=rates)[1])
    ours_mean, trl_mean = _mean(ours_s), _mean(trl_s)
    # Warm-up time above that many measured steps: the compile time when the pair is compiled.
    ours_w, trl_w = rec["ours_s"][:warmup], rec["trl_s"][:warmup]
    return {
        "ours_warmup_s": ours_w, "trl_warmup_s": trl_w,
        # Graphs compiled during each side's steps (warm-up, then measured: a measured recompile shows).
        "ours_graphs": rec["ours_graphs"], "trl_graphs": rec["trl_graphs"],
        "ours_measured_graphs": sum(rec["ours_graphs"][warmup:]), "trl_measured_graphs": sum(rec["trl_graphs"][warmup:]),
        "ours_compile_s": max(0.0, sum(ours_w) - len(ours_w) * ours_mean),
        "trl_compile_s": max(0.0, sum(trl_w) - len(trl_w) * trl_mean),
        "precision": precision, "threads": threads, "steps": len(ours_s), "warmup": warmup,
        "ours_step_s": ours_mean, "trl_step_s": trl_mean, "ours_steps_s": ours_s, "trl_steps_s": trl_s,
        "ours_samples_per_s": samples / ours_mean, "trl_samples_per_s": samples / trl_mean,
        "ratio": trl_mean / ours_mean,
        "ours_phases_s": phases, "ours_response_len": resp_mean,
        "trl_response_len": _mean(trl_len[warmup:]) if trl_len else float("nan"),
        "ours_gen_tok_s": _mean(gen_tok_ours) / phases.get("gen", float("nan")),
        "trl_gen_tok_s": sum(trl_gen_tok) / max(1e-9, sum(trl_gen_s)) if trl_gen_s else float("nan"),
        "trl_gen_s": _mean(trl_gen_s),
        "old_log_prob_recomputed": bool(ours.recompute_old),
        "flops": bd, "flops_trl": bd_trl, "prompt_group": rec["lens"][-1][2],
        "floor_s": floor, "trl_floor_s": trl_floor, "floor_phases_s": per_phase_acc, "matmul_rate": eff_rate,
        "floor_over_ours": floor / ours_mean, "floor_over_trl": trl_floor / trl_mean,
    }


# ------------------------------------------------------------------------------------------ report
def machine() -> dict:
    import torch

    model = "unknown"
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        model = re.search(r"Model name:\s*(.+)", out).group(1).strip()
        flags = re.search(r"Flags:\s*(.+)", out)
        isa = [f for f in ("avx512f", "avx512_bf16", "amx_bf16", "amx_tile") if flags and f in flags.group(1).split()]
    except Exception:  # noqa: BLE001 - lscpu missing is not fatal for a benchmark
        isa = []
    import transformers
    import trl

    return {"cpu": model, "cores": os.cpu_count(), "isa": isa, "torch": torch.__version__,
            "transformers": transformers.__version__, "trl": trl.__version__, "python": platform.python_version(),
            "load_avg": os.getloadavg()}


def _g(x: float) -> str:
    return f"{x / 1e9:.3f}" if x < 1e10 else f"{x / 1e9:.1f}"


def _label(r: dict) -> str:
    return r["precision"] + (" compiled" if r.get("compiled") else "")


def render(results: list[dict], info: dict, command: str) -> str:
    L = []
    L.append(f"Machine: {info['cpu']}, {info['cores']} cores ({', '.join(info['isa']) or 'no AVX-512/AMX flags'}); "
             f"torch {info['torch']}, transformers {info['transformers']}, TRL {info['trl']}, "
             f"Python {info['python']}; torch threads {results[0]['threads']}.")
    la = info["load_avg"]
    L.append(f"Load average while running: {la[0]:.1f} / {la[1]:.1f} / {la[2]:.1f} (1/5/15 min) on {info['cores']} "
             "cores" + (" — other processes were running; the alternating ratio is the figure that counts."
                        if la[0] > 1.2 else "."))
    L.append("")
    L.append(f"Command: `{command}`")
    L.append("")
    L.append(f"Workload: {PROMPTS} prompts x {N} samples, <= {NEW_TOKENS} new tokens, KL loss beta {BETA} with a "
             "reference model, one optimizer step per batch; steps alternate RL Studio / TRL in one process "
             "per precision; means over the measured steps (warm-up excluded).")
    if any(r.get("compiled") for r in results):
        L.append("")
        L.append("\"compiled\" rows: both sides torch.compile'd (ours: actor_rollout_ref.actor.use_torch_compile=true, "
                 "the actor and reference log-prob/update forward; TRL: GRPOConfig(torch_compile=True)); "
                 "generation eager on both. Compile time is in the warm-up steps, excluded from every step mean: "
                 + "; ".join(f"{r['precision']}: RL Studio {r['ours_compile_s']:.0f} s, TRL {r['trl_compile_s']:.0f} s "
                             f"({r['warmup']} warm-up steps; graphs compiled during the measured steps, i.e. "
                             f"recompiles inside the means: RL Studio {r.get('ours_measured_graphs', 0)}, "
                             f"TRL {r.get('trl_measured_graphs', 0)})" for r in results if r.get("compiled")) + ".")
    L.append("")
    L.append("| precision | steps | RL Studio s/step | TRL s/step | RL Studio samples/s | TRL samples/s | ratio (ours/TRL) "
             "| floor s ours / TRL | floor / ours | floor / TRL | resp. len ours / TRL |")
    L.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        L.append(f"| {_label(r)} | {r['steps']} | {r['ours_step_s']:.3f} | {r['trl_step_s']:.3f} | "
                 f"{r['ours_samples_per_s']:.1f} | {r['trl_samples_per_s']:.1f} | **{r['ratio']:.2f}x** | "
                 f"{r['floor_s']:.3f} / {r.get('trl_floor_s', r['floor_s']):.3f} | {100 * r['floor_over_ours']:.0f}% | "
                 f"{100 * r['floor_over_trl']:.0f}% | "
                 f"{r['ours_response_len']:.1f} / {r['trl_response_len']:.1f} |")
    L.append("")
    L.append("\"floor / ours\" is the compute floor divided by the measured step time: 100% would be a step that "
             "does nothing but its matmuls, each at the speed of a bare matmul of the same shape.")
    g = results[0].get("prompt_group", 1)
    if g > 1:
        L.append("")
        L.append(f"Each side's floor counts the matmuls it runs: RL Studio computes each distinct prompt once for "
                 f"its {g} samples (the rollout prefill, the reference and the policy forward/backward: "
                 "trainer/workers/prefix.py), TRL every trajectory's prompt; same model, same tokens, same "
                 "log-probs.")
    L.append("")
    L.append("Per-phase time of the RL Studio step (mean seconds) against its floor:")
    L.append("")
    L.append("| precision | phase | measured s | floor s |")
    L.append("|---|---|---|---|")
    phase_map = {"gen": "rollout", "ref": "ref", "old_log_prob": "old_log_prob", "update_actor": None}
    for r in results:
        fp = r["floor_phases_s"]
        for k in ("gen", "reward", "old_log_prob", "ref", "adv", "update_actor", "update_weights", "step"):
            if k not in r["ours_phases_s"]:
                continue
            if k == "old_log_prob" and not r["old_log_prob_recomputed"]:
                continue
            f = (fp.get("policy_fwd", 0) + fp.get("policy_bwd", 0)) if k == "update_actor" else \
                sum(fp.values()) if k == "step" else fp.get(phase_map.get(k) or "", None)
            L.append(f"| {_label(r)} | {k} | {r['ours_phases_s'][k]:.3f} | "
                     f"{'' if f is None else f'{f:.3f}'} |")
        L.append(f"| {_label(r)} | (whole step incl. reporting) | {r['ours_step_s']:.3f} | {r['floor_s']:.3f} |")
    L.append("")
    r0 = results[0]
    L.append(f"Old log-probs recomputed: {'yes' if r0['old_log_prob_recomputed'] else 'no'} (one mini-batch, one "
             "epoch, no KL in reward: the update's first forward equals the recompute, see trainer/loop.py; "
             "TRL skips it in the same case).")
    L.append("")
    L.append("Matmul FLOPs of one step (GFLOP, at the last measured step's real lengths; RL Studio's work, "
             "then TRL's where it differs):")
    L.append("")
    L.append("| phase | linear | attention | lm_head | total |")
    L.append("|---|---|---|---|---|")
    tables = [("", r0["flops"])] + ([("TRL ", r0["flops_trl"])] if r0.get("flops_trl") not in (None, r0["flops"]) else [])
    for who, table in tables:
        for ph, row in table.items():
            L.append(f"| {who}{ph} | {_g(row['linear'])} | {_g(row['attention'])} | {_g(row['lm_head'])} | "
                     f"{_g(row['total'])} |")
    L.append("")
    for r in results:
        L.append(f"- {r['precision']}: bare matmul at the step's own shapes averages "
                 f"{r['matmul_rate'] / 1e9:.1f} GFLOP/s; rollout tokens/s: RL Studio `hf` engine "
                 f"{r['ours_gen_tok_s']:.0f}, TRL's `model.generate` {r['trl_gen_tok_s']:.0f} "
                 f"(generation {r['ours_phases_s'].get('gen', float('nan')):.3f} s vs {r['trl_gen_s']:.3f} s a step).")
    return "\n".join(L) + "\n"


def write_doc(path: Path, section: str) -> None:
    block = f"{BEGIN}\n{section}{END}\n"
    text = path.read_text() if path.exists() else "# Benchmarks\n\n"
    if BEGIN in text and END in text:
        pre, rest = text.split(BEGIN, 1)
        post = rest.split(END, 1)[1].lstrip("\n")
        text = pre + block + ("\n" + post if post else "")
    else:
        text = text.rstrip("\n") + "\n\n## GRPO step: RL Studio vs TRL, and the compute floor\n\n" + block
    path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=6, help="measured steps per side")
    ap.add_argument("--warmup", type=int, default=1, help="warm-up steps per side (excluded)")
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--compile", choices=("off", "on", "both"), default="off",
                    help="torch.compile both sides (on), neither (off, the default) or run both pairs")
    ap.add_argument("--profile", action="store_true", help="cProfile the RL Studio steps (top functions)")
    ap.add_argument("--torch-profile", action="store_true", help="torch.profiler table of one extra RL Studio step")
    ap.add_argument("--write", help="update the marked section of this markdown file (e.g. docs/benchmarks.md)")
    ap.add_argument("--workdir", help="where the model, data and run folders go (default: a temp dir)")
    ap.add_argument("--json", help="also write the raw results here")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one precision, print JSON
    ap.add_argument("--compiled", type=int, default=0, help=argparse.SUPPRESS)  # internal, with --one
    args = ap.parse_args(argv)

    if args.one:
        result = run_one(args)
        print("RESULT " + json.dumps(result))
        return 0

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="bench_grpo_"))
    results = []
    modes = {"off": [False], "on": [True], "both": [False, True]}[args.compile]
    for precision, compiled in [(p.strip(), c) for p in args.precisions.split(",") if p.strip() for c in modes]:
        if precision not in ("fp32", "bf16"):
            raise SystemExit(f"--precisions: fp32|bf16, got {precision!r}")
        warmup = max(args.warmup, 3) if compiled else args.warmup
        cmd = [sys.executable, __file__, "--one", precision, "--threads", str(args.threads), "--steps",
               str(args.steps), "--warmup", str(warmup), "--workdir", str(workdir)]
        cmd += ["--compiled", "1"] if compiled else []
        cmd += ["--profile"] if args.profile else []
        cmd += ["--torch-profile"] if args.torch_profile else []
        env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "TOKENIZERS_PARALLELISM": "false"}
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
        line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
        if proc.returncode != 0 or line is None:
            sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-8000:])
            raise SystemExit(f"{precision}{' compiled' if compiled else ''} run failed (exit {proc.returncode})")
        r = json.loads(line[len("RESULT "):])
        results.append(r)
        print(f"{_label(r)}: RL Studio {r['ours_step_s']:.3f} s/step ({r['ours_samples_per_s']:.1f} samples/s), "
              f"TRL {r['trl_step_s']:.3f} s/step ({r['trl_samples_per_s']:.1f} samples/s), "
              f"ratio {r['ratio']:.2f}x, floor {r['floor_s']:.3f} s ({100 * r['floor_over_ours']:.0f}% of ours)"
              + (f", compile s: ours {r['ours_compile_s']:.0f}, TRL {r['trl_compile_s']:.0f}, graphs per step: "
                 f"ours {r['ours_graphs']}, TRL {r['trl_graphs']}" if compiled else ""),
              flush=True)
    command = "python bench/grpo_vs_trl.py " + " ".join(a for a in (argv if argv is not None else sys.argv[1:]))
    section = render(results, machine(), command.strip())
    print()
    print(section)
    for r in results:
        if "cprofile" in r:
            print(f"--- cProfile of the RL Studio steps ({r['precision']}), top by own time ---")
            print(r["cprofile"])
        if "torch_profile" in r:
            print(f"--- torch.profiler, one RL Studio step ({r['precision']}) ---")
            print(r["torch_profile"])
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    if args.write:
        write_doc(Path(args.write), section)
        print(f"updated {args.write}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
