"""What a training step reports: its metrics and its sample events (the driver's reporting).

`step_metrics` builds a step's metrics dict from the step's Experience, its phase timings, the
actor's reduced metrics and the extra figures the phases returned (verl's names: data metrics,
timing_s/*, timing_per_token_ms/*, perf/*, training/*). `emit_samples` sends whole groups of the
batch as sample events (`pick_groups` chooses them), with the token view of each trained sample.
The helpers make the event payloads plain JSON (`jsonable`) and round the token view's numbers
(`view_floats`). Called by trainer.loop.Trainer; nothing here changes the batch.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import torch

from trainer.algorithms.metrics import compute_count_metrics, compute_data_metrics, verl_num_turns, zero_adv_group_ratio
from trainer.config import Config
from trainer.scoring import Experience
from trainer.types import prompt_hash
from trainer.workers.experience import ExperienceBatch


def step_metrics(cfg: Config, exp: Experience, timing: dict[str, float], actor: dict[str, float],
                 extra: dict[str, float], *, step: int, epoch: int, device: torch.device,
                 filtered_overlong_prompts: int) -> dict[str, float]:
    """The metrics event of one training step (`actor`: the actor's reduced metrics; `extra`: the phases')."""
    b, trajs = exp.batch, exp.trajectories
    resp_len = b.response_mask.sum(-1)
    prompt_len = torch.tensor([float(len(p)) for p in b.prompt_ids])
    n_resp, n_total = resp_len.sum().item(), resp_len.sum().item() + prompt_len.sum().item()
    # verl's data metrics: lengths over the response (tool replies included), advantages and
    # returns over the trained tokens; num_turns/* counted as verl's agent loop counts turns.
    m = compute_data_metrics(
        token_level_scores=b.token_level_scores, token_level_rewards=b.token_level_rewards,
        advantages=b.advantages, returns=b.returns, response_mask=b.response_mask, loss_mask=b.loss_mask,
        prompt_lengths=prompt_len, max_response_length=cfg.actor_rollout_ref.rollout.response_length,
        max_prompt_length=cfg.data.max_prompt_length, values=b.values)
    m.update(compute_count_metrics("num_turns", [
        verl_num_turns(tr.num_turns, tr.messages, len(tr.prompt.messages), tr.finish_reason) for tr in trajs]))
    m.update(compute_count_metrics("tool_call_counts", [tr.tool_calls for tr in trajs]))
    m.update(interaction_error_metrics(trajs))
    m["critic/zero_adv_group_ratio"] = zero_adv_group_ratio(b.uids, b.token_level_rewards.sum(dim=-1).tolist())
    if exp.entropy is not None:
        trained = b.loss_mask if exp.uncorrected_loss_mask is None else exp.uncorrected_loss_mask
        m["actor/entropy"] = entropy_metric(cfg, exp.entropy, trained)
    if (b.old_log_probs is not None and b.rollout_log_probs is not None
            and not cfg.algorithm.rollout_correction.bypass_mode):  # bypass: old is the rollout
        diff = rollout_probs_diff(b)
        if diff is not None:
            m.update(diff)
    m.update(actor)
    m.update(extra)
    for k, v in timing.items():
        m[f"timing_s/{k}"] = v
    m["timing_s/old_log_prob"] = timing.get("old_log_prob", 0.0)
    for k in ("gen",):
        if k in timing and n_resp:
            m[f"timing_per_token_ms/{k}"] = 1000 * timing[k] / n_resp
    for k in ("old_log_prob", "ref", "values", "adv", "update_critic", "update_actor"):
        if k in timing and n_total:
            m[f"timing_per_token_ms/{k}"] = 1000 * timing[k] / n_total
    world = cfg.trainer.nnodes * cfg.trainer.n_gpus_per_node
    m["perf/total_num_tokens"] = n_total
    m["perf/time_per_step"] = timing.get("step", 0.0)
    m["perf/throughput"] = n_total / max(1e-9, timing.get("step", 0.0) * world)
    from trainer.memory import rss_bytes

    m.setdefault("perf/cpu_memory_used_gb", rss_bytes() / 2**30)  # the workers' figure when they sent one
    if device.type == "cuda" and torch.cuda.is_initialized() and "perf/max_memory_allocated_gb" not in m:
        m["perf/max_memory_allocated_gb"] = torch.cuda.max_memory_allocated(device) / 2**30
        m["perf/max_memory_reserved_gb"] = torch.cuda.max_memory_reserved(device) / 2**30
    m["data/filtered_overlong_prompts"] = float(filtered_overlong_prompts)
    m["training/global_step"] = float(step)
    m["training/epoch"] = float(epoch)
    return m


def entropy_metric(cfg: Config, entropy: torch.Tensor, loss_mask: torch.Tensor) -> float:
    """verl's actor/entropy: the token entropies over the trained tokens (tool replies and template
    tokens left out; the rollout correction's rejected ones in, as verl takes it at the old-log-prob
    pass), aggregated by actor.loss_agg_mode (its divisor S included) as verl's agg_loss does without
    a global batch size: a seq-mean over the rows that have trained tokens."""
    from trainer.algorithms.losses import agg_loss

    actor = cfg.actor_rollout_ref.actor
    scale = actor.loss_scale_factor or cfg.actor_rollout_ref.rollout.response_length
    rows = loss_mask.sum(dim=-1) > 0
    if not bool(rows.any()):
        return 0.0
    return float(agg_loss(entropy[rows], loss_mask[rows], actor.loss_agg_mode, scale))


def rollout_probs_diff(b: ExperienceBatch) -> dict[str, float] | None:
    """verl's training/rollout_probs_diff_{max,mean,std}: |p_rollout - p_old| over the trained tokens."""
    mask = b.loss_mask.bool()
    if not mask.any():
        return None
    d = (b.rollout_log_probs.exp() - b.old_log_probs.exp()).abs()[mask]
    return {"training/rollout_probs_diff_max": d.max().item(), "training/rollout_probs_diff_mean": d.mean().item(),
            "training/rollout_probs_diff_std": d.std().item() if d.numel() > 1 else 0.0}


def emit_samples(emitter: Any, tokenizer: Any, cfg: Config, step: int, exp: Experience, *,
                 validation: bool = False, uids: set[str] | None = None) -> None:
    """Sample events for whole groups: those of `uids` when given (a validation chosen over its whole
    set), else pick_groups' over this batch; training samples carry their group's size, mean and std of
    scores exactly as the advantage estimator computed them."""
    from trainer.algorithms.advantages import _group_stats
    from trainer.events.schema import SampleData, TokenView
    from trainer.events.wire import fit_sample

    rep = cfg.report
    b = exp.batch
    # The rollout's log-probs beside the actor's (the token page shows the gap); in bypass mode
    # the actor's are the rollout's, so there is no gap to show.
    rollout_lp = None if cfg.algorithm.rollout_correction.bypass_mode else b.rollout_log_probs
    group = None
    if not validation and b.token_level_rewards is not None:
        # The scores and grouping compute_advantages handed the estimator (b.uids), same function.
        group = [t.tolist() for t in _group_stats(b.token_level_rewards.sum(dim=-1), b.uids)]
    if uids is not None:
        rows = [i for i, tr in enumerate(exp.trajectories) if tr.uid in uids]
    else:
        rows = pick_groups([tr.uid for tr in exp.trajectories], rep.val_samples if validation else rep.samples_per_step)
    for i in rows:
        tr = exp.trajectories[i]
        r = len(tr.response_ids)
        view = None
        if rep.token_view and not validation and b.old_log_probs is not None:
            view = TokenView(
                ids=list(tr.response_ids),
                pieces=[tokenizer.decode([t]) for t in tr.response_ids],
                loss_mask=[int(x) for x in tr.loss_mask],
                logprobs=view_floats(b.old_log_probs[i, :r]),
                ref_logprobs=view_floats(b.ref_log_probs[i, :r]) if b.ref_log_probs is not None else None,
                advantages=view_floats(b.advantages[i, :r]),
                rollout_logprobs=None if rollout_lp is None else [
                    v if m else None for v, m in zip(view_floats(rollout_lp[i, :r]), tr.loss_mask)])
        data = SampleData(step=step, uid=tr.uid, index=tr.index, reward=float(tr.reward),
                          advantage=float(tr.advantage), response_length=r, num_turns=int(tr.num_turns),
                          finish_reason=tr.finish_reason, messages=jsonable(tr.messages),
                          reward_extra=jsonable(tr.reward_extra), data_source=tr.prompt.data_source or None,
                          ground_truth=jsonable(tr.prompt.ground_truth), tool_calls=int(tr.tool_calls),
                          token_view=view, validation=validation, prompt_split=tr.prompt.split,
                          prompt_index=int(tr.prompt.index), prompt_hash=prompt_hash(tr.prompt.prompt_ids))
        if group is not None:
            data.group_mean, data.group_std = _finite(group[0][i]), _finite(group[1][i])
            data.group_size = int(group[2][i])
        data = fit_sample(data) or data
        emitter.sample(jsonable(data))


def pick_groups(uids: list[str], budget: int) -> list[int]:
    """Rows to report: whole groups (every row of a uid, as GRPO groups them), spread over the batch.

    `budget` counts rows (report.samples_per_step): as many whole groups as fit in it, at least one
    when budget > 0; -1 = every row, 0 = none. Returns row indices in batch order.
    """
    if budget == 0 or not uids:
        return []
    groups: dict[str, list[int]] = {}
    for i, uid in enumerate(uids):
        groups.setdefault(uid, []).append(i)
    rows = list(groups.values())
    if budget < 0:
        return list(range(len(uids)))
    k = min(len(rows), max(1, budget // max(len(g) for g in rows)))
    chosen = sorted({round(j * (len(rows) - 1) / max(1, k - 1)) for j in range(k)}) if k > 1 else [0]
    return sorted(i for j in chosen for i in rows[j])


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


VIEW_DECIMALS = 6


def view_floats(t: torch.Tensor) -> list[float | None]:
    """A token view's numbers, rounded to VIEW_DECIMALS decimals (non-finite ones as None).

    The view is for reading (the token page colours tokens by these numbers and shows them on
    hover); the step's maths and metrics use the tensors at full precision. A float32 value as a
    Python float is written with up to 17 digits ("-0.2512345612049103"); rounded in float64 it is
    written shortest ("-0.251235"): a 256-token sample event is ~40% smaller as JSON (~60% gzip'd),
    on the wire, in PostgreSQL and in the rollout dumps.
    """
    scale = 10.0 ** VIEW_DECIMALS
    rounded = torch.round(t.detach().to(torch.float64) * scale) / scale
    return [x if math.isfinite(x) else None for x in rounded.tolist()]


def jsonable(obj: Any) -> Any:
    """Plain-JSON copy (dataclasses -> dicts, tuples -> lists, numpy scalars -> numbers, non-finite
    floats -> None, anything else -> str)."""
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, (np.generic,)):
        return jsonable(obj.item())
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    return str(obj)


def interaction_error_metrics(trajs) -> dict[str, float]:
    """`interaction/errors`: the step's calls to the interaction that timed out or raised (the driver
    log's warnings say which), at the steps that had any; {} at the others."""
    errors = sum(tr.interaction_errors for tr in trajs)
    return {"interaction/errors": float(errors)} if errors else {}
