"""Advantage estimators, picked by name (``algorithm.adv_estimator``).

Every estimator has the signature

    fn(token_level_rewards (B, T), response_mask (B, T), index: list[str], **cfg)
        -> (advantages (B, T), returns (B, T))

where row i of the batch is one trajectory, ``index[i]`` its group id (the prompt's uid: GRPO groups
the n samples of a prompt), ``response_mask`` is 1 on response tokens (the loss mask in multi-turn),
and ``cfg`` holds the algorithm keys (``norm_adv_by_std_in_grpo``, ``gamma``, ``epsilon`` ...); unknown
keys are ignored so the caller can pass the whole algorithm section. Outputs are 0 where the mask is 0.
``gae`` also takes ``values`` (B, T), the critic's value of the state before each token.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Callable, Sequence

import torch

from trainer.algorithms.losses import masked_whiten

AdvEstimator = Callable[..., tuple[torch.Tensor, torch.Tensor]]
_REGISTRY: dict[str, AdvEstimator] = {}


def register_adv_estimator(name: str) -> Callable[[AdvEstimator], AdvEstimator]:
    """Decorator adding an estimator to the registry under ``name``."""

    def wrap(fn: AdvEstimator) -> AdvEstimator:
        if name in _REGISTRY:
            raise ValueError(f"advantage estimator {name!r} is already registered")
        _REGISTRY[name] = fn
        return fn

    return wrap


def get_adv_estimator(name: str) -> AdvEstimator:
    """The estimator registered as ``name``; ValueError listing the known names otherwise."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"unknown advantage estimator {name!r}; known: {', '.join(sorted(_REGISTRY))}"
        ) from None


def adv_estimator_names() -> list[str]:
    return sorted(_REGISTRY)


def _groups(index: Sequence[str], batch: int) -> dict[str, list[int]]:
    if len(index) != batch:
        raise ValueError(f"index has {len(index)} entries for a batch of {batch}")
    groups: dict[str, list[int]] = defaultdict(list)
    for i, uid in enumerate(index):
        groups[str(uid)].append(i)
    return groups


def _group_stats(
    scores: torch.Tensor, index: Sequence[str]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-row group mean, unbiased std and group size; a singleton group has mean 0, std 1 (verl).

    scores (B,) -> mean (B,), std (B,), size (B,)
    """
    mean = torch.zeros_like(scores)
    std = torch.ones_like(scores)
    size = torch.ones_like(scores)
    for rows in _groups(index, scores.shape[0]).values():
        if len(rows) > 1:
            idx = torch.tensor(rows, device=scores.device)
            group = scores[idx]
            mean[idx] = group.mean()
            std[idx] = group.std(unbiased=True)
            size[idx] = float(len(rows))
    return mean, std, size


@register_adv_estimator("grpo")
def grpo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[str],
    *,
    norm_adv_by_std_in_grpo: bool = True,
    epsilon: float = 1e-6,
    **_: object,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO: A_i = (s_i - mean_g) / (std_g + eps) on every response token; Dr.GRPO (no std) when
    ``norm_adv_by_std_in_grpo`` is False. s_i = sum_t r_it. Returns (advantages, returns=advantages), (B, T)."""
    scores = token_level_rewards.sum(dim=-1)  # (B,)
    mean, std, _ = _group_stats(scores, index)
    adv = scores - mean
    if norm_adv_by_std_in_grpo:
        adv = adv / (std + epsilon)
    adv = adv.unsqueeze(-1) * response_mask
    return adv, adv


@register_adv_estimator("rloo")
def rloo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[str],
    **_: object,
) -> tuple[torch.Tensor, torch.Tensor]:
    """RLOO: A_i = s_i - mean_{j != i} s_j = n/(n-1) (s_i - mean_g); a singleton keeps s_i. (B, T)."""
    scores = token_level_rewards.sum(dim=-1)
    mean, _, size = _group_stats(scores, index)
    factor = torch.where(size > 1, size / (size - 1).clamp_min(1), torch.ones_like(size))
    adv = (factor * (scores - mean)).unsqueeze(-1) * response_mask
    return adv, adv


@register_adv_estimator("opo")
def opo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[str],
    **_: object,
) -> tuple[torch.Tensor, torch.Tensor]:
    """OPO (On-Policy RL with Optimal reward baseline, arXiv 2505.23585): the group's length-weighted
    mean score as baseline, b_g = sum_i len_i s_i / sum_i len_i (len_i = the row's mask sum, s_i =
    sum_t r_it), A_i = s_i - b_g on every response token. A singleton group (or one whose rows are
    all empty) has b = 0, so A_i = s_i (verl's singleton). Returns (advantages, returns=advantages), (B, T)."""
    scores = token_level_rewards.sum(dim=-1)
    lengths = response_mask.to(scores.dtype).sum(dim=-1)
    baseline = torch.zeros_like(scores)
    with torch.no_grad():
        for rows in _groups(index, scores.shape[0]).values():
            if len(rows) > 1:
                idx = torch.tensor(rows, device=scores.device)
                total = lengths[idx].sum()
                if total > 0:
                    baseline[idx] = (lengths[idx] * scores[idx]).sum() / total
        adv = (scores - baseline).unsqueeze(-1) * response_mask
    return adv, adv


@register_adv_estimator("gpg")
def gpg_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[str],
    **_: object,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GPG (Group Policy Gradient, arXiv 2504.02546, verl's ``gpg``): the group-centred score scaled
    up by the share of the batch that carries a signal, A_i = alpha (s_i - mean_g) on every response
    token, with alpha = B / max(M, 1), B the rows of the batch and M the rows whose score s_i =
    sum_t r_it is not 0 (verl counts non-zero scores over the whole batch). No std division. A
    singleton group has mean 0, so A_i = alpha s_i (verl's singleton). verl's function also takes
    f_norm (a divisor, 1.0) and alpha (overwritten by B / M); its trainer sets neither, nor do we.
    Returns (advantages, returns=advantages), (B, T)."""
    scores = token_level_rewards.sum(dim=-1)
    with torch.no_grad():
        mean, _, _ = _group_stats(scores, index)
        signal_rows = int(torch.count_nonzero(scores))
        alpha = scores.shape[0] / max(signal_rows, 1)
        adv = (alpha * (scores - mean)).unsqueeze(-1) * response_mask
    return adv, adv


@register_adv_estimator("grpo_passk")
def grpo_passk_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[str],
    *,
    norm_adv_by_std_in_grpo: bool = True,
    epsilon: float = 1e-6,
    **_: object,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO for pass@k (arXiv 2503.19595, verl's ``grpo_passk``): in each group only the best sample
    learns, A_best = s_max - s_second (the first of them on a tie, where it is 0 anyway), divided by
    (std_g + eps), std unbiased, unless ``norm_adv_by_std_in_grpo`` is False; every other sample gets 0.
    Every group needs at least 2 samples (ValueError naming the group otherwise, as verl).
    Returns (advantages, returns=advantages), (B, T)."""
    scores = token_level_rewards.sum(dim=-1)
    per_row = torch.zeros_like(scores)
    with torch.no_grad():
        for uid, rows in _groups(index, scores.shape[0]).items():
            if len(rows) < 2:
                raise ValueError(
                    f"grpo_passk needs at least 2 samples per group; group {uid!r} has {len(rows)}"
                )
            group = scores[torch.tensor(rows, device=scores.device)]
            best = int(torch.argmax(group))
            second = torch.cat([group[:best], group[best + 1 :]]).max()
            adv = group[best] - second
            if norm_adv_by_std_in_grpo:
                adv = adv / (group.std(unbiased=True) + epsilon)
            per_row[rows[best]] = adv
        adv = per_row.unsqueeze(-1) * response_mask
    return adv, adv


@register_adv_estimator("remax")
def remax_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[str] | None = None,
    *,
    reward_baselines: torch.Tensor | None = None,
    **_: object,
) -> tuple[torch.Tensor, torch.Tensor]:
    """ReMax (arXiv 2310.10505, verl's ``remax``): the baseline of a row is the reward b_i of the
    greedy response to the same prompt (``reward_baselines`` (B,), generated and scored by the
    rollout phase). Returns G_t = sum_{t' >= t} m r (undiscounted, over the masked tokens) and
    A_t = G_t - b_i; both 0 where the mask is 0. No group, no std. (B, T)."""
    if reward_baselines is None:
        raise ValueError("the remax estimator needs reward_baselines (B,): the greedy responses' rewards")
    mask = response_mask.to(token_level_rewards.dtype)
    with torch.no_grad():
        returns = (token_level_rewards * mask).flip(-1).cumsum(-1).flip(-1) * mask
        adv = (returns - reward_baselines.to(returns.dtype).unsqueeze(-1)) * mask
    return adv, returns


@register_adv_estimator("reinforce_plus_plus")
def reinforce_plus_plus_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[str] | None = None,
    *,
    gamma: float = 1.0,
    **_: object,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++: discounted return G_t = r_t + gamma G_{t+1} (the running sum resets after a masked-out
    token), advantages = batch masked whitening of G. No group baseline. Returns (advantages, G), (B, T)."""
    returns = torch.zeros_like(token_level_rewards)
    running = torch.zeros_like(token_level_rewards[:, 0])
    with torch.no_grad():
        for t in reversed(range(token_level_rewards.shape[1])):
            running = token_level_rewards[:, t] + gamma * running
            returns[:, t] = running
            running = (
                running * response_mask[:, t]
            )  # a masked token cuts the chain (verl: reset after EOS)
        adv = masked_whiten(returns, response_mask) * response_mask
    return adv, returns


@register_adv_estimator("reinforce_plus_plus_baseline")
def reinforce_plus_plus_baseline_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[str],
    **_: object,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ with a group baseline: (s_i - mean_g) on every token, then batch masked whitening. (B, T)."""
    scores = token_level_rewards.sum(dim=-1)
    mean, _, _ = _group_stats(scores, index)
    with torch.no_grad():
        centred = (scores - mean).unsqueeze(-1) * response_mask
        adv = masked_whiten(centred, response_mask) * response_mask
    return adv, adv


@register_adv_estimator("gae")
def gae_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[str] | None = None,
    *,
    values: torch.Tensor | None = None,
    gamma: float = 1.0,
    lam: float = 1.0,
    **_: object,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE (PPO with a critic): delta_t = r_t + gamma V_next - V_t, A_t = delta_t + gamma lam A_next,
    returns R_t = A_t + V_t, then the advantages whitened over the masked tokens (as verl).

    The recursion runs over the tokens of ``response_mask`` only (the loss mask in multi-turn): a
    token outside it (a tool reply, template tokens, padding) is skipped, i.e. V_next and A_next of
    the trained token before it are those of the next trained token after it, and its own value and
    reward are not used (verl's compute_gae_advantage_return does the same). After the last trained
    token V_next = A_next = 0. gamma and lam count trained tokens. Unlike verl, advantages and returns
    are 0 outside the mask (verl leaves the carried values there; the loss masks them either way).

    values (B, T) -> (advantages, returns), (B, T).
    """
    if values is None:
        raise ValueError("the gae estimator needs the critic's values (B, T)")
    if values.shape != token_level_rewards.shape:
        raise ValueError(f"values {tuple(values.shape)} and rewards {tuple(token_level_rewards.shape)} differ")
    mask = response_mask.to(token_level_rewards.dtype)
    with torch.no_grad():
        adv = torch.zeros_like(token_level_rewards)
        next_value = torch.zeros_like(token_level_rewards[:, 0])
        next_adv = torch.zeros_like(next_value)
        for t in reversed(range(token_level_rewards.shape[1])):
            delta = token_level_rewards[:, t] + gamma * next_value - values[:, t]
            a_t = delta + gamma * lam * next_adv
            keep = mask[:, t] > 0
            next_value = torch.where(keep, values[:, t], next_value)  # skipped tokens pass the chain on
            next_adv = torch.where(keep, a_t, next_adv)
            adv[:, t] = a_t
        returns = (adv + values) * mask
        adv = masked_whiten(adv, mask) * mask
    return adv, returns


def compute_advantage(
    name: str,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[str],
    **cfg: object,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the estimator ``name``; ``cfg`` may be the whole algorithm section as a dict."""
    return get_adv_estimator(name)(token_level_rewards, response_mask, index, **cfg)
