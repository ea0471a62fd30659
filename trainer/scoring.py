"""From scored trajectories to the batch the update trains on: rewards, the experience batch, rollout
correction and the advantages (the driver's phases between the rollout and the update).

- `score_trajectories`: the reward function's score of each trajectory, or the weighted sum with the
  reward model's score and the tools' rewards (trainer.rewards.combine), plus the overlong penalty
  when reward_model.overlong_buffer is on (trainer.rewards.overlong).
- `build_experience`: the (B, R) tensors of a list of trajectories (trainer.workers.experience),
  each reward placed on its last trained token, the engine's log-probs beside them.
- `token_level_rewards`: the scores, less the KL penalty when algorithm.use_kl_in_reward (over the
  whole response: verl applies it before the rollout correction);
- `rollout_as_old`: bypass mode's old log-probs, the rollout's (before the KL penalty reads them);
- `correct_rollout`: algorithm.rollout_correction, then (verl's order);
- `compute_advantages`: the estimator (registry) over the rewards and the loss mask left by the correction.

Scores sit on the last token with loss mask 1 (the end of the last assistant turn), or on the last
response token when there is none: for GRPO/RLOO only the sum matters; for REINFORCE++ this keeps the
return on a trained token in multi-turn (verl puts it on the last attention-valid token, which is the
same token unless a trajectory ends in a tool reply).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

import torch

from trainer.config import Config
from trainer.config.rollout_correction import RolloutCorrectionConfig
from trainer.config.schema import AlgorithmConfig
from trainer.types import Trajectory
from trainer.workers.experience import ExperienceBatch, make_batch


@dataclass
class Experience:
    """A scored, log-prob'd, advantaged batch: trajectories plus their tensors."""

    trajectories: list[Trajectory]
    batch: ExperienceBatch
    entropy: torch.Tensor | None = None  # (B, R), from the old-log-prob pass (or the update's forward)
    uncorrected_loss_mask: torch.Tensor | None = None  # the loss mask before the rollout correction's rejection


def score_trajectories(trajs: list[Trajectory], reward_fn: Callable[..., Any], cfg: Config,
                       rm_scores: list[float] | None = None, *, validation: bool = False) -> None:
    """Score each trajectory: the reward function's score, or with a reward model (`rm_scores`, one
    per trajectory) or reward_model weights other than the rule alone the weighted sum of the parts
    (trainer.rewards.combine, each part recorded in reward_extra); plus the overlong penalty when
    reward_model.overlong_buffer is on (trainer.rewards.overlong). Sets score, reward, reward_extra.
    Validation (`validation=True`) scores with the reward function alone, as verl validates."""
    from trainer.rewards.combine import Weights, parts, weighted_score
    from trainer.rewards.overlong import shape

    buffer = cfg.reward_model.overlong_buffer
    limit = cfg.actor_rollout_ref.rollout.response_length
    w = Weights() if validation else Weights.of(cfg.reward_model)
    if w.use_rm and (rm_scores is None or len(rm_scores) != len(trajs)):
        raise ValueError("reward_model.enable: one reward-model score per trajectory is needed")
    for i, tr in enumerate(trajs):
        p = tr.prompt
        try:
            out = reward_fn(p.data_source, tr.response_text, p.ground_truth,
                            {**p.extra_info, "tool_rewards": tr.tool_rewards, "num_turns": tr.num_turns,
                             "turn_scores": list(tr.turn_scores)})
        except NotImplementedError:
            if w.rule != 0:
                raise
            out = None  # no rule for this data source, and the rule's weight is 0: the part is absent
        rule = None
        if isinstance(out, dict):
            if "score" not in out:
                raise ValueError(f"reward function returned a dict without 'score': {sorted(out)}")
            rule = float(out["score"])
            tr.reward_extra = {k: v for k, v in out.items() if k != "score"}
        elif out is not None:
            rule = float(out)
        rm = rm_scores[i] if w.use_rm and rm_scores is not None else None
        tr.score = rule if w.rule_alone else weighted_score(w, rule=rule, rm=rm, tool_rewards=tr.tool_rewards)
        tr.reward, shaped = shape(tr.score, len(tr.response_ids), buffer, limit)
        tr.reward_extra.update(shaped)
        if not w.rule_alone:
            tr.reward_extra.update(parts(w, rule=rule, rm=rm, tool_rewards=tr.tool_rewards,
                                         penalty=tr.reward - tr.score, reward=tr.reward))


def build_experience(trajs: list[Trajectory]) -> Experience:
    """The batch of scored trajectories: each reward placed on its last trained token."""
    batch = make_batch([tr.prompt_ids for tr in trajs], [tr.response_ids for tr in trajs],
                       [tr.loss_mask for tr in trajs], uids=[tr.uid for tr in trajs])
    batch.rollout_log_probs = rollout_log_probs(trajs, batch.loss_mask)
    scores = torch.zeros(len(trajs), batch.response_width)
    for i, tr in enumerate(trajs):
        trained = batch.loss_mask[i].nonzero()
        valid = batch.response_mask[i].nonzero()
        pos = int(trained[-1]) if len(trained) else (int(valid[-1]) if len(valid) else 0)
        scores[i, pos] = tr.reward
    batch.token_level_scores = scores
    return Experience(trajectories=trajs, batch=batch)


def rollout_log_probs(trajs: list[Trajectory], mask: torch.Tensor) -> torch.Tensor | None:
    """The rollout engine's log-probs of the sampled tokens (B, R), 0 where the loss mask is 0; None
    when a trajectory came without them."""
    if not trajs or any(tr.rollout_logprobs is None for tr in trajs):
        return None
    out = torch.zeros_like(mask)
    for i, tr in enumerate(trajs):
        if tr.rollout_logprobs:
            out[i, : len(tr.rollout_logprobs)] = torch.as_tensor(tr.rollout_logprobs, dtype=torch.float32)
    return out * mask


def rollout_as_old(rc: RolloutCorrectionConfig, exp: Experience) -> None:
    """Bypass mode (algorithm.rollout_correction.bypass_mode): the rollout engine's log-probs are the
    old ones (no recompute), set before anything reads them (the in-reward KL penalty); else nothing."""
    b = exp.batch
    if rc.bypass_mode:
        if b.rollout_log_probs is None:
            raise RuntimeError("algorithm.rollout_correction.bypass_mode needs the rollout engine's log-probs")
        b.old_log_probs = b.rollout_log_probs.clone()


def correct_rollout(rc: RolloutCorrectionConfig, exp: Experience) -> dict[str, float]:
    """Rollout correction before the advantages (algorithm.rollout_correction, verl's order), given
    old log-probs and outside bypass mode (whose correction is in the actor's loss): verl's weights,
    rejection and rollout_corr/* metrics (trainer.algorithms.rollout_correction). Rejected tokens leave
    the loss mask (the one before is kept as `exp.uncorrected_loss_mask`), the weights go to the update."""
    from trainer.algorithms.rollout_correction import rollout_correction_for

    b = exp.batch
    if rc.bypass_mode or b.old_log_probs is None or b.rollout_log_probs is None:
        return {}
    corr = rollout_correction_for(rc, b.old_log_probs, b.rollout_log_probs, b.loss_mask)
    exp.uncorrected_loss_mask = b.loss_mask
    b.loss_mask, b.rollout_is_weights = corr.mask, corr.weights
    return corr.metrics


def token_level_rewards(alg: AlgorithmConfig, exp: Experience, kl_ctrl: Any) -> dict[str, float]:
    """The batch's token_level_rewards: the scores, less the KL penalty (and its actor/reward_kl_penalty
    metrics, the adaptive controller's update) when algorithm.use_kl_in_reward. Called before
    `correct_rollout`, as verl does: every response token's KL counts, the rejected ones' too."""
    from trainer.algorithms.losses import apply_kl_penalty

    b = exp.batch
    if not alg.use_kl_in_reward:
        b.token_level_rewards = b.token_level_scores
        return {}
    b.token_level_rewards, metrics = apply_kl_penalty(b.token_level_scores, b.old_log_probs, b.ref_log_probs,
                                                      b.loss_mask, kl_ctrl, alg.kl_penalty)
    return metrics


def compute_advantages(alg: AlgorithmConfig, exp: Experience) -> dict[str, float]:
    """The estimator's advantages and returns over the batch's token_level_rewards (`token_level_rewards`
    first) and loss mask; each trajectory's `advantage` is its first non-zero one."""
    from trainer.algorithms.advantages import get_adv_estimator

    b = exp.batch
    metrics: dict[str, float] = {}
    rewards = b.token_level_rewards
    fn = get_adv_estimator(alg.adv_estimator)
    # values: the critic's (B, R), used by gae; reward_baselines: the greedy responses' rewards (B,),
    # used by remax; the other estimators ignore both
    baselines = [tr.reward_baseline for tr in exp.trajectories]
    reward_baselines = None if None in baselines else torch.tensor(baselines, dtype=rewards.dtype)
    b.advantages, b.returns = fn(rewards, b.loss_mask, b.uids, values=b.values, reward_baselines=reward_baselines,
                                 **dataclasses.asdict(alg))
    for tr, a in zip(exp.trajectories, b.advantages):
        nz = a[a != 0]
        tr.advantage = float(nz[0]) if len(nz) else 0.0
    return metrics
