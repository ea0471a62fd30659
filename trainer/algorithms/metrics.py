"""verl's per-step data metrics and the driver-side reduction of metric lists.

compute_data_metrics(...)  -> critic/score/*, critic/rewards/*, critic/advantages/*,
                              critic/returns/*, response_length/*, prompt_length/*; with the
                              critic's values critic/values/*, critic/vf_explained_var
                              (the one implementation: trainer.step_report.step_metrics calls it)
compute_count_metrics(...) -> <prefix>/{mean,max,min} of per-trajectory counts
                              (num_turns/*, tool_call_counts/*)
verl_num_turns(...)        -> a trajectory's turns as verl counts them for num_turns/*
zero_adv_group_ratio(...)  -> critic/zero_adv_group_ratio: groups whose rewards are all equal (ours)
reduce_metrics({name: [v, ...]}) -> {name: v}   mean, or max / min for keys containing them
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import torch

from trainer.algorithms.filter_groups import group_rows, kept_group_uids


def reduce_metrics(metrics: Mapping[str, Sequence[float] | float]) -> dict[str, float]:
    """One float per key: the mean of its list, except keys containing "max" (max) or "min" (min),
    as verl reduces on the driver. Scalars pass through; empty lists are dropped."""
    out: dict[str, float] = {}
    for key, values in metrics.items():
        if isinstance(values, (int, float)):
            out[key] = float(values)
            continue
        vals = [float(v) for v in values]
        if not vals:
            continue
        if "max" in key:
            out[key] = max(vals)
        elif "min" in key:
            out[key] = min(vals)
        else:
            out[key] = sum(vals) / len(vals)
    return out


def _stats(prefix: str, values: torch.Tensor) -> dict[str, float]:
    if values.numel() == 0:
        return {}
    v = values.detach().double()
    return {
        f"{prefix}/mean": float(v.mean()),
        f"{prefix}/max": float(v.max()),
        f"{prefix}/min": float(v.min()),
    }


def compute_data_metrics(
    *,
    token_level_scores: torch.Tensor,
    token_level_rewards: torch.Tensor,
    advantages: torch.Tensor,
    returns: torch.Tensor,
    response_mask: torch.Tensor,
    prompt_lengths: torch.Tensor,
    max_response_length: int,
    max_prompt_length: int | None = None,
    loss_mask: torch.Tensor | None = None,
    values: torch.Tensor | None = None,
) -> dict[str, float]:
    """verl's data metrics from plain tensors.

    token_level_scores / token_level_rewards / advantages / returns / response_mask / loss_mask:
    (B, T); prompt_lengths: (B,) prompt tokens per trajectory. Scores and rewards are summed per
    sequence; advantages and returns are taken over the tokens of ``loss_mask`` (the trained tokens;
    default ``response_mask``). ``response_length`` counts the tokens of ``response_mask`` (the
    response's attention mask: in multi-turn it includes the tool replies, as verl's does).
    ``clip_ratio`` = fraction of sequences at the length limit, measured against the configured limit
    (not the padded width: verl PR #7821). With the critic's ``values`` (gae): critic/values/* and
    critic/vf_explained_var = 1 - Var(R - V) / (Var(R) + 1e-5) over the same tokens, as verl.
    """
    mask = (response_mask if loss_mask is None else loss_mask).bool()
    response_length = response_mask.sum(dim=-1).double()
    prompt_length = prompt_lengths.double()
    metrics: dict[str, float] = {}
    metrics.update(_stats("critic/score", token_level_scores.sum(dim=-1)))
    metrics.update(_stats("critic/rewards", token_level_rewards.sum(dim=-1)))
    metrics.update(_stats("critic/advantages", advantages[mask]))
    metrics.update(_stats("critic/returns", returns[mask]))
    if values is not None:
        v, r = values[mask].double(), returns[mask].double()
        metrics.update(_stats("critic/values", v))
        if v.numel() > 1:
            metrics["critic/vf_explained_var"] = float(1.0 - (r - v).var() / (r.var() + 1e-5))
    metrics.update(_stats("response_length", response_length))
    metrics["response_length/clip_ratio"] = float(
        (response_length >= max_response_length).double().mean()
    )
    metrics.update(_stats("prompt_length", prompt_length))
    if max_prompt_length is not None:
        metrics["prompt_length/clip_ratio"] = float(
            (prompt_length >= max_prompt_length).double().mean()
        )
    return metrics


def zero_adv_group_ratio(uids: Sequence[str], rewards: Sequence[float]) -> float:
    """Share of the batch's groups (rows sharing a uid) whose sequence rewards are all equal, so that
    GRPO gives every sample of the group a zero advantage: the groups that teach nothing. A group of
    one is not counted as flat (verl's GRPO gives it the raw score). No verl metric reports this; the
    platform's alert on it reads `critic/zero_adv_group_ratio`. 0.0 for an empty batch."""
    groups = group_rows(uids)
    if not groups:
        return 0.0
    return 1.0 - len(kept_group_uids(uids, [float(r) for r in rewards])) / len(groups)


def compute_count_metrics(prefix: str, counts: Iterable[float]) -> dict[str, float]:
    """<prefix>/{mean,max,min} of per-trajectory counts (e.g. num_turns, tool_call_counts)."""
    values = torch.tensor([float(c) for c in counts], dtype=torch.float64)
    return _stats(prefix, values)


def verl_num_turns(
    assistant_turns: int,
    messages: Sequence[Mapping[str, object]],
    prompt_messages: int,
    finish_reason: str,
) -> int:
    """A trajectory's turns as verl's tool agent loop counts them: ``user_turns + assistant_turns + 1``.

    The 1 is the prompt; ``assistant_turns`` the generations (engine calls); ``user_turns`` the
    rounds of tool replies that entered the response (one per assistant turn whose calls ran, however
    many calls it made), and each interaction reply (a ``user`` message after the prompt; verl counts
    the last one too, which ends the conversation). ``messages`` is the whole transcript, of which the first ``prompt_messages``
    are the prompt. verl stops before appending a round of replies that does not fit in the response
    budget and does not count it; the multi-turn agent appends the part that fits and ends with
    finish_reason "length", so a transcript ending in such a round counts one round less. A single
    turn without tools is 2, as verl's single-turn loop reports.
    """
    rounds, previous = 0, None
    convo = list(messages[prompt_messages:])
    for message in convo:
        role = message.get("role")
        if (role == "tool" and previous != "tool") or role == "user":
            rounds += 1
        previous = role
    if previous == "tool" and finish_reason == "length":
        rounds -= 1
    return int(assistant_turns) + rounds + 1
