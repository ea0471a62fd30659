"""Evaluate checkpoints (and the base model): k samples per prompt per column with the trainer's own
rollout (the `hf` engine through `MultiTurnRollout`, tools as the run's config offers them), scored with
the run's reward function (`trainer.rewards.get_reward_fn`), summarised by `trainer.eval_metrics`.

A column is the base model (`actor_rollout_ref.model.path`, loaded as the trainer loads it: key
"base", step 0) or a checkpoint: the base model with the consolidated actor weights of its step folder
(`checkpoint.read_actor_model`: a plain model.pt or the workers' DCP shards) loaded over it, as the HF
export does (`trainer.export.load_step_policy`: a LoRA checkpoint's adapter merged into the base).

Besides the figures, every sample is kept as a transcript (`Sample`: the turns after the prompt, each
cut to SAMPLE_CHARS), so that each cell of the prompts x columns matrix opens its k samples. The job
command around this (`python -m trainer evaluate SPEC --output DIR`) is `trainer.evaluate_job`.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

import torch

from trainer import checkpoint as ckpt
from trainer.eval_metrics import answer_of, checkpoint_figures, is_correct, prompt_figures

SAMPLE_CHARS = 2000  # text kept per prompt, per best sample in the matrix, and per transcript turn
MAX_TURNS = 16  # transcript turns kept per sample
BASE = "base"  # the column key of the base model


@dataclass(frozen=True)
class Column:
    """What one column of the evaluation samples from: `path` None is the base model itself."""

    key: str  # "base" or str(step)
    step: int  # 0 for the base model
    path: Path | None = None


@dataclass(frozen=True)
class Sample:
    """One sample of one prompt in one column: its transcript after the prompt and its score."""

    column: str
    prompt: int  # the prompt's position in results["prompts"]
    sample: int
    score: float
    correct: bool
    answer: str
    finish_reason: str
    turns: list[dict[str, Any]]  # [{"role", "content", "tool_calls"?}] after the prompt (`transcript`)


def load_policy(model_path: str, step_path: Path | None, *, trust_remote_code: bool = False,
                device: str = "cpu") -> Any:
    """The base model, with the checkpoint's actor weights when `step_path` is given, fp32, in eval
    mode on `device` (fp32 parameters: what the trainer's own engine generates from)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32,
                                                 trust_remote_code=trust_remote_code)
    if step_path is not None:
        state = ckpt.read_actor_model(Path(step_path))
        if any("lora_" in k for k in state):
            raise ValueError(f"{step_path}: a LoRA checkpoint needs its run's config (load_step_policy)")
        missing, unexpected = model.load_state_dict(state, strict=False)
        tied = bool(getattr(model.config, "tie_word_embeddings", False))
        missing = [k for k in missing if not (tied and k.startswith("lm_head."))]
        if missing or unexpected:
            raise ValueError(f"{step_path}: checkpoint weights do not fit the model: missing {missing[:5]}, "
                             f"unexpected {unexpected[:5]}")
    return model.to(device).eval()


def evaluate_checkpoints(config: dict[str, Any], checkpoints: Sequence[tuple[int, Path]],
                         rows: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
    """`evaluate_columns` over checkpoints only (no base column), the results without the samples."""
    columns = [Column(key=str(int(step)), step=int(step), path=Path(path)) for step, path in checkpoints]
    return evaluate_columns(config, columns, rows, **kwargs)[0]


def evaluate_columns(config: dict[str, Any], columns: Sequence[Column], rows: list[dict[str, Any]], *, k: int,
                     temperature: float, top_p: float, top_k: int, max_new_tokens: int, seed: int = 0,
                     device: str = "cpu") -> tuple[dict[str, Any], list[Sample]]:
    """Sample k responses per row per column and score them.

    Returns (results, samples). results = {"checkpoints": [{"key", "step", "base", "mean_at_k",
    "pass_at_k", "maj_at_k", "samples", "seconds", "samples_per_s"}], "prompts": [{"index", "prompt",
    "ground_truth", "cells": {key: {n, correct, mean_at_k, pass_at_k, maj_at_k, sample}}}]}, JSON-ready
    ("sample": the best-scored response); samples: every sample's transcript (`Sample`)."""
    from trainer.chat.families import stop_token_ids
    from trainer.config import Config
    from trainer.data.dataset import build_prompt_dataset
    from trainer.export import load_step_policy
    from trainer.models.hf_folder import load_tokenizer, read_generation_config
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
    # Stops as the trainer's rollout does (trainer.loop.Trainer._stop_token_ids): EOS, the chat
    # family's end-of-turn tokens and generation_config.json's eos ids.
    stops = stop_token_ids(tokenizer, extra=read_generation_config(arr.model.path).eos_token_ids)
    sampling = SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k,
                              max_new_tokens=max_new_tokens, stop_token_ids=stops, seed=seed)
    rollout_cfg = arr.rollout
    prompts = [{"index": r.index, "prompt": _prompt_text(r.messages), "ground_truth": str(r.ground_truth),
                "cells": {}} for r in ds.records]
    out_cols: list[dict[str, Any]] = []
    samples: list[Sample] = []
    for col in columns:
        if col.path is None:
            model = load_policy(arr.model.path, None, trust_remote_code=arr.model.trust_remote_code, device=device)
        else:  # the checkpoint as the export makes it (a LoRA run's adapter merged into the base)
            model = load_step_policy(config, col.path).to(device).eval()
        engine = build_engine("hf", model=model, tokenizer=tokenizer, config=rollout_cfg, device=device)
        rollout = MultiTurnRollout(engine, tokenizer, tools, rollout_cfg, cfg.data)
        items = [PromptItem(uid=f"eval-{col.key}-{r.index}", index=r.index, messages=r.messages,
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
        for position, (item, prompt) in enumerate(zip(items, prompts)):
            group = by_uid.get(item.uid, [])
            texts = [tr.response_text for tr in group]
            scores = [_score(reward_fn(tr.prompt.data_source, tr.response_text, tr.prompt.ground_truth,
                                       tr.prompt.extra_info)) for tr in group]
            fig = prompt_figures(texts, scores, k)
            figures.append(fig)
            best = max(range(len(scores)), key=lambda i: scores[i]) if scores else None
            prompt["cells"][col.key] = {**asdict(fig),
                                        "sample": texts[best][:SAMPLE_CHARS] if best is not None else ""}
            samples += [Sample(column=col.key, prompt=position, sample=i, score=scores[i],
                               correct=is_correct(scores[i]), answer=answer_of(texts[i])[:200],
                               finish_reason=str(tr.finish_reason), turns=transcript(tr))
                        for i, tr in enumerate(group)]
        out_cols.append({"key": col.key, "step": int(col.step), "base": col.path is None,
                         **checkpoint_figures(figures), "samples": len(trajs), "seconds": round(seconds, 3),
                         "samples_per_s": round(len(trajs) / seconds, 3) if seconds > 0 else None})
        del engine, model
        if device != "cpu" and torch.cuda.is_available():
            torch.cuda.empty_cache()
    return {"checkpoints": out_cols, "prompts": prompts}, samples


def _tool_call(call: Any, max_chars: int) -> dict[str, str]:
    """One tool call as a transcript keeps it: {"name", "arguments"} (JSON text), from the OpenAI form
    ({"function": {"name", "arguments"}}) or the flat one."""
    call = call if isinstance(call, dict) else {}
    fn = call.get("function") if isinstance(call.get("function"), dict) else call
    args = fn.get("arguments")
    text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False, default=str)
    return {"name": str(fn.get("name") or "")[:100], "arguments": text[:max_chars]}


def transcript(tr: Any, *, max_turns: int = MAX_TURNS, max_chars: int = SAMPLE_CHARS) -> list[dict[str, Any]]:
    """The turns of a trajectory after its prompt, each {"role", "content"} and, for a turn that called
    tools, "tool_calls": [{"name", "arguments"}], at most `max_turns`, each text cut to `max_chars`;
    the decoded response when the trajectory kept no messages."""
    start = len(tr.prompt.messages or [])
    turns: list[dict[str, Any]] = []
    for m in (tr.messages or [])[start:start + max_turns]:
        turn: dict[str, Any] = {"role": str(m.get("role") or "assistant")[:20],
                                "content": str(m.get("content") or "")[:max_chars]}
        calls = m.get("tool_calls")
        if isinstance(calls, list) and calls:
            turn["tool_calls"] = [_tool_call(c, max_chars) for c in calls[:8]]
        turns.append(turn)
    return turns or [{"role": "assistant", "content": str(tr.response_text or "")[:max_chars]}]


def _score(value: Any) -> float:
    return float(value["score"] if isinstance(value, dict) else value)


def _prompt_text(messages: list[dict[str, Any]]) -> str:
    users = [str(m.get("content") or "") for m in messages if m.get("role") == "user"]
    return (users[-1] if users else str(messages[-1].get("content") or ""))[:SAMPLE_CHARS]
