"""Evaluate a run's checkpoints: k samples per prompt per checkpoint with the trainer's own rollout
(the `hf` engine through `MultiTurnRollout`, tools as the run's config offers them), scored with the
run's reward function (`trainer.rewards.get_reward_fn`), summarised by `trainer.eval_metrics`.

A checkpoint's policy is the run's base model (`actor_rollout_ref.model.path`, loaded as the trainer
loads it) with the consolidated actor weights of the step folder (`checkpoint.read_actor_model`: a
plain model.pt or the workers' DCP shards) loaded over it, as the HF export does. LoRA checkpoints
(adapter weights only) are refused with a clear error.

CLI-free on purpose: the platform's evaluation task calls `evaluate_checkpoints` with paths it took
from the run's own folder.
"""
from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

import torch

from trainer import checkpoint as ckpt
from trainer.eval_metrics import checkpoint_figures, prompt_figures

SAMPLE_CHARS = 2000  # response text kept per sample in the results


def load_policy(model_path: str, step_path: Path, *, trust_remote_code: bool = False) -> Any:
    """The base model with the checkpoint's actor weights, fp32 on the CPU, in eval mode."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32,
                                                 trust_remote_code=trust_remote_code)
    state = ckpt.read_actor_model(Path(step_path))
    if any("lora_" in k for k in state):
        raise ValueError(f"{step_path}: a LoRA checkpoint; evaluating adapters is not supported")
    missing, unexpected = model.load_state_dict(state, strict=False)
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    missing = [k for k in missing if not (tied and k.startswith("lm_head."))]
    if missing or unexpected:
        raise ValueError(f"{step_path}: checkpoint weights do not fit the model: missing {missing[:5]}, "
                         f"unexpected {unexpected[:5]}")
    return model.eval()


def evaluate_checkpoints(config: dict[str, Any], checkpoints: Sequence[tuple[int, Path]],
                         rows: list[dict[str, Any]], *, k: int, temperature: float, top_p: float,
                         top_k: int, max_new_tokens: int, seed: int = 0) -> dict[str, Any]:
    """Sample k responses per row per checkpoint and score them.

    Returns {"checkpoints": [{"step", "mean_at_k", "pass_at_k", "maj_at_k", "samples", "seconds",
    "samples_per_s"}], "prompts": [{"index", "prompt", "ground_truth", "cells": {step: {n, correct,
    mean_at_k, pass_at_k, maj_at_k, sample}}}]} (steps as strings, JSON-ready)."""
    from trainer.config import Config
    from trainer.data.dataset import build_prompt_dataset
    from trainer.models.hf_folder import load_tokenizer
    from trainer.rewards import get_reward_fn
    from trainer.rollout.agent import MultiTurnRollout
    from trainer.rollout.base import SamplingParams, build_engine
    from trainer.tools import build_tools, get_tool
    from trainer.types import PromptItem

    cfg = Config.from_dict(config)
    arr = cfg.actor_rollout_ref
    tokenizer = load_tokenizer(arr.model.tokenizer_path or arr.model.path, model_path=arr.model.path,
                               trust_remote_code=arr.model.trust_remote_code)
    tools = build_tools(cfg.tools.names, cfg.tools.config_path)

    def tool_schema(name: str) -> dict[str, Any]:
        if name not in tools:
            tools[name] = get_tool(name)
        return tools[name].schema

    ds = build_prompt_dataset(rows, tokenizer=tokenizer, data_cfg=cfg.data,
                              default_tools=[tools[n].schema for n in cfg.tools.names], resolve_tool=tool_schema)
    if not ds.records:
        raise ValueError("no prompt of the dataset fits data.max_prompt_length")
    reward_fn = get_reward_fn(cfg)
    sampling = SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k,
                              max_new_tokens=max_new_tokens, seed=seed)
    rollout_cfg = arr.rollout
    prompts = [{"index": r.index, "prompt": _prompt_text(r.messages), "ground_truth": str(r.ground_truth),
                "cells": {}} for r in ds.records]
    out_ckpts = []
    for step, path in checkpoints:
        model = load_policy(arr.model.path, path, trust_remote_code=arr.model.trust_remote_code)
        engine = build_engine("hf", model=model, tokenizer=tokenizer, config=rollout_cfg, device="cpu")
        rollout = MultiTurnRollout(engine, tokenizer, tools, rollout_cfg, cfg.data)
        items = [PromptItem(uid=f"eval-{step}-{r.index}", index=r.index, messages=r.messages,
                            prompt_ids=r.prompt_ids, data_source=r.data_source, ground_truth=r.ground_truth,
                            tools=r.tools, tools_kwargs=r.tools_kwargs, extra_info=r.extra_info)
                 for r in ds.records]
        t0 = time.perf_counter()
        try:
            trajs = rollout.run(items, n=k, sampling=sampling)
        finally:
            rollout.close()
        seconds = time.perf_counter() - t0
        by_uid: dict[str, list[Any]] = {}
        for tr in trajs:
            by_uid.setdefault(tr.uid, []).append(tr)
        figures = []
        for item, prompt in zip(items, prompts):
            group = by_uid.get(item.uid, [])
            texts = [tr.response_text for tr in group]
            scores = [_score(reward_fn(tr.prompt.data_source, tr.response_text, tr.prompt.ground_truth,
                                       tr.prompt.extra_info)) for tr in group]
            fig = prompt_figures(texts, scores, k)
            figures.append(fig)
            best = max(range(len(scores)), key=lambda i: scores[i]) if scores else None
            prompt["cells"][str(step)] = {**asdict(fig),
                                          "sample": texts[best][:SAMPLE_CHARS] if best is not None else ""}
        out_ckpts.append({"step": int(step), **checkpoint_figures(figures), "samples": len(trajs),
                          "seconds": round(seconds, 3),
                          "samples_per_s": round(len(trajs) / seconds, 3) if seconds > 0 else None})
        del engine, model
    return {"checkpoints": out_ckpts, "prompts": prompts}


def _score(value: Any) -> float:
    return float(value["score"] if isinstance(value, dict) else value)


def _prompt_text(messages: list[dict[str, Any]]) -> str:
    users = [str(m.get("content") or "") for m in messages if m.get("role") == "user"]
    return (users[-1] if users else str(messages[-1].get("content") or ""))[:SAMPLE_CHARS]
