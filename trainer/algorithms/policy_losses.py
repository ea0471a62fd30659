"""Policy losses by name (verl's ``actor.policy_loss.loss_mode``): vanilla, gspo, cispo, gpg,
geo_mean, sapo, clip_cov, kl_cov.

Each loss is a pure function of (B, T) tensors with one signature,

    fn(old_log_prob, log_prob, advantages, response_mask, *, clip_ratio, clip_ratio_low,
       clip_ratio_high, clip_ratio_c, loss_agg_mode, loss_scale_factor, rollout_is_weights)
       -> PolicyLossOutput

registered with ``@register_policy_loss(name)`` and looked up by the actor with
``get_policy_loss(name)``. A loss takes the actor's clip settings and aggregation and ignores those it
has no use for (as verl's take the whole actor config). ``response_mask`` is the loss mask: 1 on the
tokens trained on. ``rollout_is_weights`` (B, T), when given, are rollout correction's detached
importance weights (trainer.algorithms.rollout_correction): every loss multiplies its per-token loss by
them before aggregating (geo_mean its row loss by their per-row geometric mean), as verl's do; the metrics are those of the unweighted loss. What each computes, with r = pi / pi_old per token and A the advantage:

    vanilla  PPO clip, L = max(-A r, -A clip(r, 1-eps_low, 1+eps_high)), dual clip min(L, -A c) for
             A < 0; aggregated by loss_agg_mode.
    gspo     the sequence ratio s_i = exp(mean over the sequence's tokens of log r), carried by every
             token with that token's own gradient, PPO-clipped without dual clip; always aggregated
             seq-mean-token-mean (verl does so whatever loss_agg_mode says).
    cispo    L = -sg(clip(r, 1-eps_low, 1+eps_high)) A log pi: the clipped ratio is a constant weight,
             so a clipped token keeps its gradient (PPO gives it none); aggregated by loss_agg_mode.
    gpg      L = -A log pi (plain policy gradient: no ratio, no clip); aggregated by loss_agg_mode.
    geo_mean GMPO: each row's ratio is the geometric mean of its token ratios, each clipped in log
             space to [-eps_low, eps_high] on the side that limits the update; L_i = -mean(A) rho_i,
             a mean over the rows (loss_agg_mode does not apply, as verl).
    sapo     L = -A (4 / tau) sigmoid(tau (r - 1)), tau = tau_pos for A > 0 else tau_neg (a soft gate,
             no clip); always aggregated seq-mean-token-mean (as verl).
    clip_cov vanilla's clip without the dual clip; of the tokens the clip left alone whose centred
             covariance (A - mean A)(log pi - mean log pi) lies in (clip_cov_lb, clip_cov_ub), a
             random clip_cov_ratio of the masked tokens (at least one) get L = 0 (no gradient).
    kl_cov   L = -A r, plus ppo_kl_coef |log r| on the kl_cov_ratio of the masked tokens (at least
             one) with the largest covariance; no clip.

clip_cov and kl_cov also take their own ``actor.policy_loss`` keys, sapo the actor's tau_pos and
tau_neg (``loss_mode_options`` picks them).

Metrics are verl's: ``actor/pg_clipfrac``, ``actor/ppo_kl``, ``actor/pg_clipfrac_lower``, each loss
reporting the ones verl's reports (gpg none; kl_cov's ppo_kl is the mean |log r|, as verl's). Formulas and parity notes: docs/design.md §4.5.

One file of about 500 lines on purpose: the registry and its eight losses, each a screen, are read
side by side against verl's one module; a loss kept elsewhere would have to import itself into the
registry (an import circle) or be registered by whoever imports both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from trainer.algorithms.losses import agg_loss, masked_mean, masked_sum

LOG_RATIO_CLAMP = 20.0  # |log r| bound before exp (vanilla, cispo), as verl
GSPO_LOG_RATIO_MAX = 10.0  # upper bound of gspo's log s before exp, as verl


@dataclass
class PolicyLossOutput:
    """One policy loss on one micro-batch.

    ``pg_loss`` is the differentiable scalar; ``loss_agg_mode`` the aggregation it was computed with
    (the caller weights micro-batches by it: gspo's differs from the configured one). The metrics are
    detached scalars, None where the loss does not report them (as verl's).
    """

    pg_loss: torch.Tensor
    loss_agg_mode: str
    pg_clipfrac: torch.Tensor | None = None  # fraction of tokens where the clip acted
    ppo_kl: torch.Tensor | None = None  # mean(old_logp - logp): approximate KL(old || new)
    pg_clipfrac_lower: torch.Tensor | None = None  # fraction of tokens at the dual clip (A < 0)

    def metrics(self) -> dict[str, float]:
        """verl's metric names for the metrics this loss reports."""
        pairs = (("actor/pg_clipfrac", self.pg_clipfrac), ("actor/ppo_kl", self.ppo_kl),
                 ("actor/pg_clipfrac_lower", self.pg_clipfrac_lower))
        return {name: float(value) for name, value in pairs if value is not None}


PolicyLossFn = Callable[..., PolicyLossOutput]
_POLICY_LOSSES: dict[str, PolicyLossFn] = {}


def register_policy_loss(name: str) -> Callable[[PolicyLossFn], PolicyLossFn]:
    """Decorator: register a policy loss under ``name`` (a name may be registered once)."""

    def wrap(fn: PolicyLossFn) -> PolicyLossFn:
        if name in _POLICY_LOSSES:
            raise ValueError(f"policy loss {name!r} is already registered")
        _POLICY_LOSSES[name] = fn
        return fn

    return wrap


def get_policy_loss(name: str) -> PolicyLossFn:
    """The loss registered as ``name``; ValueError naming the known ones otherwise."""
    try:
        return _POLICY_LOSSES[name]
    except KeyError:
        raise ValueError(
            f"unknown policy loss {name!r}; known: {', '.join(sorted(_POLICY_LOSSES))}"
        ) from None


def policy_loss_names() -> list[str]:
    return sorted(_POLICY_LOSSES)


def _weighted(pg_losses: torch.Tensor, rollout_is_weights: torch.Tensor | None) -> torch.Tensor:
    """The per-token losses times rollout correction's importance weights (unchanged without)."""
    return pg_losses if rollout_is_weights is None else pg_losses * rollout_is_weights


def _bounds(clip_ratio: float, low: float | None, high: float | None) -> tuple[float, float]:
    """(eps_low, eps_high): each side's own value, else clip_ratio."""
    return (clip_ratio if low is None else low), (clip_ratio if high is None else high)


def _reported(
    pg_loss: torch.Tensor,
    loss_agg_mode: str,
    *,
    ppo_kl: torch.Tensor,
    pg_clipfrac: torch.Tensor | None = None,
    pg_clipfrac_lower: torch.Tensor | None = None,
) -> PolicyLossOutput:
    """The output of a loss that reports all three of verl's metrics, detached; a clip fraction the
    loss has no use for (None: no clip, or no dual clip) is reported as 0, as verl's losses do."""
    zero = torch.zeros((), dtype=pg_loss.dtype, device=pg_loss.device)
    return PolicyLossOutput(
        pg_loss=pg_loss,
        loss_agg_mode=loss_agg_mode,
        pg_clipfrac=(zero if pg_clipfrac is None else pg_clipfrac).detach(),
        ppo_kl=ppo_kl.detach(),
        pg_clipfrac_lower=(zero.clone() if pg_clipfrac_lower is None else pg_clipfrac_lower).detach(),
    )


@register_policy_loss("vanilla")
def compute_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_ratio: float = 0.2,
    clip_ratio_low: float | None = None,
    clip_ratio_high: float | None = None,
    clip_ratio_c: float = 3.0,
    loss_agg_mode: str = "token-mean",
    loss_scale_factor: float | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> PolicyLossOutput:
    """PPO clipped surrogate with asymmetric clip bounds and dual clip (verl's ``vanilla``).

    r = exp(clamp(logp - old_logp, -20, 20)); L = max(-A r, -A clip(r, 1-eps_low, 1+eps_high));
    for A < 0 also L = min(L, -A c) (dual clip, c = clip_ratio_c > 1). Aggregated by ``loss_agg_mode``
    (``loss_scale_factor``: seq-mean-token-sum-norm's constant, see ``agg_loss``).
    pg_clipfrac: tokens where the clipped term won; pg_clipfrac_lower: tokens at the dual clip.
    """
    if clip_ratio_c <= 1.0:
        raise ValueError(f"clip_ratio_c must be > 1.0 for dual clip, got {clip_ratio_c}")
    low, high = _bounds(clip_ratio, clip_ratio_low, clip_ratio_high)
    log_ratio = torch.clamp(log_prob - old_log_prob, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    ppo_kl = masked_mean(-log_ratio, response_mask)
    loss_unclipped = -advantages * ratio
    loss_clipped = -advantages * torch.clamp(ratio, 1.0 - low, 1.0 + high)
    clip_max = torch.maximum(loss_unclipped, loss_clipped)
    pg_clipfrac = masked_mean(torch.gt(loss_clipped, loss_unclipped).float(), response_mask)
    loss_dual = -advantages * clip_ratio_c
    clip_min = torch.minimum(loss_dual, clip_max)
    negative = advantages < 0
    pg_clipfrac_lower = masked_mean(
        (torch.gt(clip_max, loss_dual) & negative).float(), response_mask
    )
    pg_losses = _weighted(torch.where(negative, clip_min, clip_max), rollout_is_weights)
    return _reported(agg_loss(pg_losses, response_mask, loss_agg_mode, loss_scale_factor), loss_agg_mode,
                     ppo_kl=ppo_kl, pg_clipfrac=pg_clipfrac, pg_clipfrac_lower=pg_clipfrac_lower)


GSPO_AGG_MODE = "seq-mean-token-mean"


@register_policy_loss("gspo")
def compute_policy_loss_gspo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_ratio: float = 0.2,
    clip_ratio_low: float | None = None,
    clip_ratio_high: float | None = None,
    clip_ratio_c: float = 3.0,  # noqa: ARG001 - no dual clip in GSPO (as verl)
    loss_agg_mode: str = GSPO_AGG_MODE,  # noqa: ARG001 - GSPO aggregates per sequence (as verl)
    loss_scale_factor: float | None = None,  # noqa: ARG001
    rollout_is_weights: torch.Tensor | None = None,
) -> PolicyLossOutput:
    """GSPO (arXiv 2507.18071), the GSPO-token form verl implements.

    Sequence log-ratio: log s_i = sum_t m (logp - old_logp) / max(sum_t m, 1) (a geometric mean of the
    token ratios). Each token carries s_i with its own gradient:
    log s_i,t = logp - sg(logp) + sg(log s_i), clamped above at 10, s_i,t = exp(log s_i,t); its
    value is s_i and its gradient s_i * grad(logp_t). L = max(-A s, -A clip(s, 1-eps_low, 1+eps_high)),
    no dual clip, aggregated seq-mean-token-mean whatever ``loss_agg_mode`` is (verl's GSPO does the
    same). The paper's and verl's recipe clip ranges are eps_low 3e-4, eps_high 4e-4.
    pg_clipfrac: tokens where the clipped term won; pg_clipfrac_lower is 0 (no dual clip).
    """
    low, high = _bounds(clip_ratio, clip_ratio_low, clip_ratio_high)
    log_ratio = log_prob - old_log_prob
    lengths = response_mask.sum(dim=-1).clamp(min=1)
    seq_log_ratio = masked_sum(log_ratio, response_mask, axis=-1) / lengths  # (B,)
    # The sequence term is added last (verl: fewer rounding errors than adding it to -sg(logp) first).
    log_s = log_prob - log_prob.detach() + seq_log_ratio.detach().unsqueeze(-1)
    s = torch.exp(torch.clamp(log_s, max=GSPO_LOG_RATIO_MAX))
    loss_unclipped = -advantages * s
    loss_clipped = -advantages * torch.clamp(s, 1.0 - low, 1.0 + high)
    pg_losses = _weighted(torch.maximum(loss_unclipped, loss_clipped), rollout_is_weights)
    pg_loss = agg_loss(pg_losses, response_mask, GSPO_AGG_MODE)
    pg_clipfrac = masked_mean(torch.gt(loss_clipped, loss_unclipped).float(), response_mask)
    return _reported(pg_loss, GSPO_AGG_MODE, ppo_kl=masked_mean(-log_ratio, response_mask),
                     pg_clipfrac=pg_clipfrac)


@register_policy_loss("cispo")
def compute_policy_loss_cispo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_ratio: float = 0.2,
    clip_ratio_low: float | None = None,
    clip_ratio_high: float | None = None,
    clip_ratio_c: float = 3.0,  # noqa: ARG001 - no dual clip in CISPO (as verl)
    loss_agg_mode: str = "token-mean",
    loss_scale_factor: float | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> PolicyLossOutput:
    """CISPO (MiniMax-M1, arXiv 2506.13585): clip the importance weight, not the update.

    r = exp(clamp(logp - old_logp, -20, 20)); w = sg(clip(r, 1-eps_low, 1+eps_high));
    L = -w A logp, aggregated by ``loss_agg_mode``. The gradient is -w A grad(logp) on every token,
    clipped ones included (PPO's clipped tokens get none). The paper sets no lower bound (a large
    eps_low: clip_ratio_low=1 makes the floor 0) and tunes eps_high. pg_clipfrac: tokens whose ratio
    the clip changed; pg_clipfrac_lower is 0.
    """
    low, high = _bounds(clip_ratio, clip_ratio_low, clip_ratio_high)
    log_ratio = torch.clamp(log_prob - old_log_prob, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    clipped = torch.clamp(ratio, 1.0 - low, 1.0 + high).detach()
    pg_losses = _weighted(-clipped * advantages * log_prob, rollout_is_weights)
    pg_loss = agg_loss(pg_losses, response_mask, loss_agg_mode, loss_scale_factor)
    return _reported(pg_loss, loss_agg_mode, ppo_kl=masked_mean(-log_ratio, response_mask),
                     pg_clipfrac=masked_mean(torch.ne(ratio, clipped).float(), response_mask))


@register_policy_loss("gpg")
def compute_policy_loss_gpg(
    old_log_prob: torch.Tensor,  # noqa: ARG001 - no ratio in GPG
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_ratio: float = 0.2,  # noqa: ARG001
    clip_ratio_low: float | None = None,  # noqa: ARG001
    clip_ratio_high: float | None = None,  # noqa: ARG001
    clip_ratio_c: float = 3.0,  # noqa: ARG001
    loss_agg_mode: str = "token-mean",
    loss_scale_factor: float | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> PolicyLossOutput:
    """GPG (arXiv 2504.02546): L = -A logp, aggregated by ``loss_agg_mode``; no ratio, no clip, no
    metrics (verl's reports none). Off-policy data (ppo_epochs > 1, several mini-batches) is not
    corrected for."""
    pg_losses = _weighted(-advantages * log_prob, rollout_is_weights)
    return PolicyLossOutput(
        pg_loss=agg_loss(pg_losses, response_mask, loss_agg_mode, loss_scale_factor),
        loss_agg_mode=loss_agg_mode,
    )


# The aggregation geo_mean's loss is: a mean over every row of the micro-batch of a per-row loss
# (verl's torch.mean), which the actor weighs across micro-batches by rows, as seq-mean-token-sum.
GEO_MEAN_AGG_MODE = "seq-mean-token-sum"
GEO_MEAN_WEIGHT_FLOOR = 1e-10  # rollout correction's weights are floored before their log (verl: + 1e-10)


@register_policy_loss("geo_mean")
def compute_policy_loss_geo_mean(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_ratio: float = 0.2,
    clip_ratio_low: float | None = None,
    clip_ratio_high: float | None = None,
    clip_ratio_c: float = 3.0,  # noqa: ARG001 - no dual clip in GMPO (as verl)
    loss_agg_mode: str = "token-mean",  # noqa: ARG001 - GMPO is a mean over sequences (as verl)
    loss_scale_factor: float | None = None,  # noqa: ARG001
    rollout_is_weights: torch.Tensor | None = None,
) -> PolicyLossOutput:
    """GMPO (Geometric-Mean Policy Optimization, arXiv 2507.20673; verl's ``geo_mean``).

    The token log-ratios x = logp - old_logp are clipped in log space, on the side that limits the
    update: with s = sign(A), x' = s min(s x, s clamp(x, -eps_low, eps_high)) (A > 0: x capped at
    eps_high; A < 0: x floored at -eps_low; A = 0: x' = 0). A row's ratio is the geometric mean of its
    clipped token ratios, rho_i = exp(mean over its masked tokens of x'), its advantage the mean of
    its tokens' A_i, and L_i = -A_i rho_i. pg_loss = mean_i L_i over every row (a row without tokens
    adds 0); ``loss_agg_mode`` does not apply (verl's ignores it too). Rollout correction's token
    weights enter as their per-row geometric mean (each floored at 1e-10, as verl). The exponent is
    not clamped (verl's is not either). verl's GMPO recipe uses clip_ratio_low = clip_ratio_high = 0.4
    (ratios within [e^-0.4, e^0.4]).

    Metrics (verl's): pg_clipfrac = tokens with A > 0 whose x lies outside [-eps_low, eps_high],
    pg_clipfrac_lower the same for A < 0 (counted whether or not the clamp was the side taken, as
    verl), ppo_kl = mean(-x) over the masked tokens.
    """
    low, high = _bounds(clip_ratio, clip_ratio_low, clip_ratio_high)
    log_ratio = log_prob - old_log_prob
    clamped = torch.clamp(log_ratio, -low, high)
    sign = torch.sign(advantages)
    clipped_log_ratio = sign * torch.minimum(sign * log_ratio, sign * clamped)
    seq_ratio = torch.exp(masked_mean(clipped_log_ratio, response_mask, axis=-1))  # (B,)
    seq_adv = masked_mean(advantages, response_mask, axis=-1)  # (B,)
    pg_losses = -seq_adv * seq_ratio
    if rollout_is_weights is not None:
        log_w = torch.log(rollout_is_weights.clamp_min(GEO_MEAN_WEIGHT_FLOOR))
        pg_losses = pg_losses * torch.exp(masked_mean(log_w, response_mask, axis=-1))
    outside = torch.ne(log_ratio, clamped)
    return _reported(
        pg_losses.mean(),
        GEO_MEAN_AGG_MODE,
        ppo_kl=masked_mean(-log_ratio, response_mask),
        pg_clipfrac=masked_mean((outside & (advantages > 0)).float(), response_mask),
        pg_clipfrac_lower=masked_mean((outside & (advantages < 0)).float(), response_mask),
    )


SAPO_AGG_MODE = "seq-mean-token-mean"


@register_policy_loss("sapo")
def compute_policy_loss_sapo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_ratio: float = 0.2,  # noqa: ARG001 - SAPO has a soft gate, no clip (as verl)
    clip_ratio_low: float | None = None,  # noqa: ARG001
    clip_ratio_high: float | None = None,  # noqa: ARG001
    clip_ratio_c: float = 3.0,  # noqa: ARG001
    loss_agg_mode: str = SAPO_AGG_MODE,  # noqa: ARG001 - SAPO aggregates per sequence (as verl)
    loss_scale_factor: float | None = None,  # noqa: ARG001
    rollout_is_weights: torch.Tensor | None = None,
    tau_pos: float = 1.0,
    tau_neg: float = 1.05,
) -> PolicyLossOutput:
    """SAPO (Soft Adaptive Policy Optimization, arXiv 2511.20347; verl's ``sapo``): a smooth gate on
    the ratio in place of the clip.

    r = exp(clamp(logp - old_logp, -20, 20)); per token tau = ``tau_pos`` where A > 0, else ``tau_neg``
    (A <= 0); the gate f(r) = sigmoid(tau (r - 1)) 4 / tau; L = -f(r) A. At r = 1 the gate's slope is
    1, so the gradient there is PPO's, -A grad(logp); away from 1 it fades smoothly, faster for the
    larger tau. Always aggregated seq-mean-token-mean, whatever ``loss_agg_mode`` says (as verl).
    Metrics (verl's): pg_clipfrac and pg_clipfrac_lower 0 (no clip), ppo_kl = mean(-log r).
    """
    if tau_pos <= 0 or tau_neg <= 0:
        raise ValueError(f"tau_pos and tau_neg must be > 0, got {tau_pos} and {tau_neg}")
    log_ratio = torch.clamp(log_prob - old_log_prob, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    tau = torch.where(advantages > 0, torch.full_like(advantages, tau_pos), torch.full_like(advantages, tau_neg))
    gate = torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau)
    pg_losses = _weighted(-gate * advantages, rollout_is_weights)
    pg_loss = agg_loss(pg_losses, response_mask, SAPO_AGG_MODE)
    return _reported(pg_loss, SAPO_AGG_MODE, ppo_kl=masked_mean(-log_ratio, response_mask))


# ------------------------------------------------------------------------ clip_cov and kl_cov
# "The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models" (arXiv 2505.22617):
# the policy's entropy falls fastest through the tokens where the advantage and the log-probability
# move together, i.e. where the centred product cov_t = (A_t - mean A)(log pi_t - mean log pi) is
# large. Both losses act on a small fraction of those tokens only (the ratio keys, 2e-4 by default).


def _token_cov(advantages: torch.Tensor, log_prob: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """cov_t = (A_t - mean A)(log pi_t - mean log pi), both means over the masked tokens; detached."""
    adv, logp = advantages.detach(), log_prob.detach()
    return (adv - masked_mean(adv, mask)) * (logp - masked_mean(logp, mask))


@register_policy_loss("clip_cov")
def compute_policy_loss_clip_cov(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_ratio: float = 0.2,
    clip_ratio_low: float | None = None,
    clip_ratio_high: float | None = None,
    clip_ratio_c: float = 3.0,  # noqa: ARG001 - no dual clip in Clip-Cov (as verl)
    loss_agg_mode: str = "token-mean",
    loss_scale_factor: float | None = None,
    rollout_is_weights: torch.Tensor | None = None,
    clip_cov_ratio: float = 0.0002,
    clip_cov_lb: float = 1.0,
    clip_cov_ub: float = 5.0,
    generator: torch.Generator | None = None,
) -> PolicyLossOutput:
    """Clip-Cov: PPO clip, and the gradient of a few high-covariance tokens cut.

    r = exp(clamp(logp - old_logp, -20, 20)); the PPO term L = max(-A r, -A clip(r, 1-eps_low,
    1+eps_high)) (no dual clip). Candidates: masked tokens the PPO clip left alone whose
    cov_t (``_token_cov``) lies strictly between ``clip_cov_lb`` and ``clip_cov_ub``. Of them,
    max(1, floor(clip_cov_ratio * masked tokens)) are drawn uniformly at random (``generator``, a CPU
    generator; None = torch's global one) and their L is multiplied by 0, so they neither count nor
    pass a gradient. Aggregated by ``loss_agg_mode``. pg_clipfrac: the fraction of masked tokens so
    cut (the PPO clip is not counted, as verl); no pg_clipfrac_lower (verl's reports none). verl does not clamp the
    log-ratio; the clamp only matters past |log r| = 20.
    """
    if clip_cov_ratio <= 0:
        raise ValueError(f"clip_cov_ratio must be > 0, got {clip_cov_ratio}")
    low, high = _bounds(clip_ratio, clip_ratio_low, clip_ratio_high)
    log_ratio = torch.clamp(log_prob - old_log_prob, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    loss_unclipped = -advantages * ratio
    loss_clipped = -advantages * torch.clamp(ratio, 1.0 - low, 1.0 + high)
    valid = response_mask > 0
    cov = _token_cov(advantages, log_prob, response_mask)
    candidates = valid & ~torch.gt(loss_clipped, loss_unclipped) & (cov > clip_cov_lb) & (cov < clip_cov_ub)
    where = torch.nonzero(candidates)  # (K, 2) row, column
    budget = max(int(clip_cov_ratio * int(valid.sum())), 1)
    keep = torch.ones_like(advantages)
    if len(where):
        pick = torch.randperm(len(where), generator=generator)[:budget].to(where.device)
        keep[where[pick, 0], where[pick, 1]] = 0.0
    pg_losses = _weighted(torch.maximum(loss_unclipped, loss_clipped) * keep, rollout_is_weights)
    pg_loss = agg_loss(pg_losses, response_mask, loss_agg_mode, loss_scale_factor)
    # verl's clip_cov reports these two, no pg_clipfrac_lower
    return PolicyLossOutput(pg_loss, loss_agg_mode, ppo_kl=masked_mean(-log_ratio, response_mask).detach(),
                            pg_clipfrac=masked_mean((keep == 0).to(pg_loss.dtype), response_mask).detach())


@register_policy_loss("kl_cov")
def compute_policy_loss_kl_cov(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_ratio: float = 0.2,  # noqa: ARG001 - KL-Cov does not clip (as verl)
    clip_ratio_low: float | None = None,  # noqa: ARG001
    clip_ratio_high: float | None = None,  # noqa: ARG001
    clip_ratio_c: float = 3.0,  # noqa: ARG001
    loss_agg_mode: str = "token-mean",
    loss_scale_factor: float | None = None,
    rollout_is_weights: torch.Tensor | None = None,
    kl_cov_ratio: float = 0.0002,
    ppo_kl_coef: float = 0.1,
) -> PolicyLossOutput:
    """KL-Cov: the unclipped surrogate, and a KL penalty on the highest-covariance tokens.

    r = exp(clamp(log r, -20, 20)) with log r = logp - old_logp; L = -A r on every token, plus
    ``ppo_kl_coef`` * |log r| on the max(1, floor(kl_cov_ratio * masked tokens)) masked tokens of
    largest cov_t (``_token_cov``); aggregated by ``loss_agg_mode``. No clip, so no clip fractions
    (verl's reports only ppo_kl): ppo_kl is the mean |log r| over the masked tokens (what verl's
    reports under that name).
    """
    if kl_cov_ratio <= 0:
        raise ValueError(f"kl_cov_ratio must be > 0, got {kl_cov_ratio}")
    log_ratio = log_prob - old_log_prob
    abs_kl = log_ratio.abs()
    pg_losses = -advantages * torch.exp(torch.clamp(log_ratio, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    valid = response_mask > 0
    n_valid = int(valid.sum())
    penalised = torch.zeros_like(advantages)
    if n_valid:
        cov = _token_cov(advantages, log_prob, response_mask)[valid]
        top = torch.topk(cov, max(1, int(n_valid * kl_cov_ratio))).indices
        flat = torch.nonzero(valid.reshape(-1), as_tuple=True)[0][top]
        penalised.view(-1)[flat] = 1.0
    pg_losses = _weighted(pg_losses + ppo_kl_coef * abs_kl * penalised, rollout_is_weights)
    pg_loss = agg_loss(pg_losses, response_mask, loss_agg_mode, loss_scale_factor)
    return PolicyLossOutput(pg_loss, loss_agg_mode, ppo_kl=masked_mean(abs_kl, response_mask).detach())  # verl's only one


# The actor.policy_loss keys each loss mode reads besides the actor's clip and aggregation keys.
LOSS_MODE_KEYS: dict[str, tuple[str, ...]] = {
    "clip_cov": ("clip_cov_ratio", "clip_cov_lb", "clip_cov_ub"),
    "kl_cov": ("kl_cov_ratio", "ppo_kl_coef"),
}
# The keys of the actor section itself a loss mode reads (verl puts SAPO's there: actor.tau_pos).
ACTOR_LOSS_KEYS: dict[str, tuple[str, ...]] = {
    "sapo": ("tau_pos", "tau_neg"),
}


def loss_mode_options(
    policy_loss: object, generator: torch.Generator | None = None, *, actor: object | None = None
) -> dict[str, object]:
    """The keyword arguments the chosen loss mode takes from the ``actor.policy_loss`` section
    (``policy_loss``, a PolicyLossConfig): its own keys, ``generator`` for clip_cov's draw, and, when
    ``actor`` (the ActorConfig) is given, its keys of the actor section (sapo's tau_pos, tau_neg)."""
    mode = getattr(policy_loss, "loss_mode")
    options: dict[str, object] = {key: getattr(policy_loss, key) for key in LOSS_MODE_KEYS.get(mode, ())}
    if actor is not None:
        options.update({key: getattr(actor, key) for key in ACTOR_LOSS_KEYS.get(mode, ())})
    if mode == "clip_cov":
        options["generator"] = generator
    return options
