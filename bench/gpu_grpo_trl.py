"""bench/gpu_grpo.py's TRL side: the same GRPO workload through TRL's GRPOTrainer (run as that bench's
`--engine trl` part, in its own process).

TRL's setup is bench/grpo_vs_trl.py's `build_trl` (dataset, reward = trainer.rewards.compute_score,
generation timing), with this workload's sizes as GRPOConfig overrides:
  per_device_train_batch_size = micro (sequences per forward/backward), gradient_accumulation_steps =
  mini-batch sequences / micro, steps_per_generation = batch sequences / micro (one `generate` call for
  the whole batch, then prompts / mini optimizer steps, old log-probs computed as the batch is reused),
  num_generations = n, max_completion_length = response with generation_kwargs min_new_tokens = response
  (EOS suppressed: every completion is exactly that long, like rollout.ignore_eos), beta 0.001 (k3, as
  verl's low_var_kl), lr 1e-6, gradient checkpointing, fp32 weights with bf16=True on a GPU.
A TRL "step" here is one generation batch and its optimizer steps: the wall time between the ends of
two such groups (the device synchronised). Tokens per step: the prompts' unpadded tokens (attention
mask) plus the generated ones, as seen by `generate`.
"""
from __future__ import annotations

import json
import time
from pathlib import Path


def trl_overrides(w: dict, device: str) -> dict:
    """GRPOConfig fields for workload `w` (bench/gpu_grpo.py workload())."""
    return dict(per_device_train_batch_size=w["micro"], num_generations=w["n"],
                gradient_accumulation_steps=w["mini"] * w["n"] // w["micro"],
                steps_per_generation=w["prompts"] * w["n"] // w["micro"],
                max_completion_length=w["response"], generation_kwargs={"min_new_tokens": w["response"]},
                beta=0.001, learning_rate=1e-6, use_cpu=device == "cpu",
                bf16=device == "cuda", gradient_checkpointing=True, temperature=1.0, top_p=1.0, top_k=0)


def run_trl(w: dict, model: Path, data: Path, out: Path, device: str) -> dict:
    import torch
    from transformers import TrainerCallback

    from grpo_vs_trl import build_trl

    per_gen = w["prompts"] // w["mini"]  # optimizer steps per generation batch
    rec: dict = {"group_s": [], "logs": []}

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    class Groups(TrainerCallback):
        def on_train_begin(self, *_a, **_k):
            sync()
            self.t, self.k = time.perf_counter(), 0

        def on_step_end(self, *_a, **_k):
            self.k += 1
            if self.k % per_gen == 0:
                sync()
                now = time.perf_counter()
                rec["group_s"].append(now - self.t)
                print(f"trl step {len(rec['group_s'])}: {now - self.t:.2f} s", flush=True)
                # What is done so far, in case the run is stopped at its time limit (bench/gpu_grpo.py reads it).
                (out / "partial.json").write_text(json.dumps({"setup_s": setup_s, **rec, **timing}))
                self.t = now

        def on_log(self, _args, _state, _control, logs=None, **_k):
            if logs:
                rec["logs"].append(dict(logs))

    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    setup_s = float("nan")
    timing: dict = {}
    trainer, timing_ = build_trl(model, data, out, precision="bf16" if device == "cuda" else "fp32",
                                max_steps=w["trl_steps"] * per_gen, callback=Groups(), **trl_overrides(w, device))
    setup_s = time.perf_counter() - t0
    timing.update(timing_)  # the same lists build_trl's generate hook appends to
    trainer.train()
    return {"setup_s": setup_s, **rec, **timing}


def summarise_trl(trl: dict, w: dict) -> dict:
    """Means over the generation batches after the first (as RL Studio's steps)."""
    k = 1 if len(trl["group_s"]) > 1 else 0
    groups = trl["group_s"][k:]
    step_s = sum(groups) / len(groups)
    gens = trl["generate_s"][k:len(trl["group_s"])]
    tokens = [p + g for p, g in zip(trl["prompt_tokens"], trl["generated_tokens"])][k:len(trl["group_s"])]
    return {"steps": len(groups), "step_s": step_s, "samples_per_s": w["prompts"] * w["n"] / step_s,
            "throughput": (sum(tokens) / len(tokens)) / step_s if tokens else float("nan"),
            "gen_share": (sum(gens) / len(gens)) / step_s if gens else float("nan"),
            "generate_calls": len(trl["generate_s"])}
