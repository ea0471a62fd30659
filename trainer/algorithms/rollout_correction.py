"""Rollout correction maths (verl's rollout_corr_helper): importance weights and rejection masks
between the rollout engine's log-probs and the actor's, and verl's mismatch metrics.

All functions are pure on (B, T) tensors; ``mask`` is the loss mask (1 on trained tokens). With
log r = old_log_prob - rollout_log_prob per token (old = the actor's log-probs of the sampled tokens,
rollout = the engine's), clamped to [-20, 20] before any exp:

    importance_weights   token: w = exp(log r); sequence: w = exp(sum_t m log r) on every token of
                         the row. TIS caps w at the threshold u; IcePop ("lower_upper") sets w to 0
                         outside [lower, upper]; 0 where the mask is 0; detached (the weights change
                         the measure, not the objective). Optionally divided by their batch mean.
    rejection_mask       verl's options (trainer.config.rollout_correction.RS_OPTIONS): a token or a
                         whole sequence leaves the mask when its statistic (k1 = -log r,
                         k2 = (log r)^2 / 2, k3 = r - 1 - log r; a sequence's sum / mean / max; the
                         Bernoulli KL of binary_kl) is outside its bounds; every option must keep it.
    offpolicy_metrics    KL(rollout || actor) estimates (kl, k3_kl), perplexities and their ratio,
                         chi-square divergences.
    rollout_correction   all three; metrics named as verl's, ``rollout_corr/<name>``.
    reinforce_loss       bypass mode's loss_type=reinforce: -w A log pi.
    corrected_policy_loss  the actor's policy term with all of it (decoupled or bypass mode).

Metric names and definitions follow verl HEAD (rollout_corr_helper.py); docs/design.md §4.5 lists
them. Scalars are gathered as tensors and read once (one device sync per call, not one per metric).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import torch

from trainer.algorithms.losses import agg_loss, masked_mean, masked_sum
from trainer.algorithms.policy_losses import PolicyLossOutput
from trainer.config.rollout_correction import (TOKEN_RS_OPTIONS, parse_is_threshold, parse_rs_options,
                                               parse_rs_thresholds)

SAFETY_BOUND = 20.0  # |log ratio| bound before exp, as verl
PREFIX = "rollout_corr/"
BINARY_KL_EPS = 1e-6  # probabilities clamped into [eps, 1 - eps] for the Bernoulli KL, as verl

Scalars = dict[str, "torch.Tensor | float"]


@dataclass
class RolloutCorrection:
    """What rollout correction makes of one batch.

    ``weights`` (B, T) the detached importance weights (None without rollout_is); ``mask`` (B, T) the
    loss mask after rejection (the input mask without rollout_rs); ``metrics`` verl's rollout_corr/*.
    """

    weights: torch.Tensor | None
    mask: torch.Tensor
    metrics: dict[str, float] = field(default_factory=dict)


def _read(values: Scalars, prefix: str = PREFIX) -> dict[str, float]:
    """Tensors and floats as Python floats under ``prefix`` (one .tolist() for all the tensors)."""
    keys = [k for k, v in values.items() if isinstance(v, torch.Tensor)]
    out = {f"{prefix}{k}": float(v) for k, v in values.items() if not isinstance(v, torch.Tensor)}
    if keys:
        numbers = torch.stack([values[k].detach().reshape(()).to(torch.float64).cpu() for k in keys]).tolist()
        out.update({f"{prefix}{k}": float(x) for k, x in zip(keys, numbers)})
    return out


def _masked_max(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return values.masked_fill(~mask.bool(), float("-inf")).max()


def _masked_min(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return values.masked_fill(~mask.bool(), float("inf")).min()


def _clamped_std(values: torch.Tensor, mask: torch.Tensor, lo: float, hi: float) -> torch.Tensor | float:
    """sqrt(E[x^2] - E[x]^2) of x clamped to [lo, hi] over the masked entries; 0 with one entry."""
    if mask.sum() <= 1:
        return 0.0
    x = values.clamp(min=lo, max=hi)
    var = masked_mean(x.square(), mask) - masked_mean(x, mask).square()
    return var.clamp(min=0.0).sqrt()


def _seq_stats(name: str, seq: torch.Tensor) -> Scalars:
    """mean / std (unbiased) / max / min of per-sequence values."""
    return {f"{name}_seq_mean": seq.mean(), f"{name}_seq_std": seq.std() if seq.numel() > 1 else 0.0,
            f"{name}_seq_max": seq.max(), f"{name}_seq_min": seq.min()}


# ------------------------------------------------------------------------------------ IS weights
def importance_weights(log_ratio: torch.Tensor, mask: torch.Tensor, level: str,
                       threshold: float | str = 2.0, batch_normalize: bool = False
                       ) -> tuple[torch.Tensor, dict[str, float]]:
    """Truncated importance weights (B, T) and their metrics (rollout_is_*, unprefixed).

    ``log_ratio`` = log pi_old - log pi_rollout; ``level`` token | sequence; ``threshold`` a cap
    (TIS) or "lower_upper" (IcePop). Metrics are taken before the batch normalisation.
    """
    if level not in ("token", "sequence"):
        raise ValueError(f"rollout_is must be token or sequence, got {level!r}")
    upper, lower = parse_is_threshold(threshold)
    icepop = lower is not None
    mask = mask.to(log_ratio.dtype)
    if level == "token":
        log_for_metrics = log_ratio
        raw = torch.exp(log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND))
    else:
        log_for_metrics = masked_sum(log_ratio, mask, axis=-1).unsqueeze(-1)  # (B, 1)
        raw = torch.exp(log_for_metrics.clamp(-SAFETY_BOUND, SAFETY_BOUND)).expand_as(log_ratio)
    raw = raw * mask
    if icepop:
        weights = torch.where((raw >= lower) & (raw <= upper), raw, torch.zeros_like(raw))
    else:
        weights = raw.clamp(max=upper)
    weights = weights.detach()
    low = 1.0 / upper if lower is None else lower
    m: Scalars = {}
    if level == "sequence":
        m["rollout_is_max"] = torch.exp(log_for_metrics.max().clamp(max=SAFETY_BOUND))
        m["rollout_is_min"] = torch.exp(log_for_metrics.min())
        m["rollout_is_mean"] = masked_mean(weights, mask)
        m["rollout_is_ratio_fraction_high"] = (log_for_metrics > math.log(upper)).float().mean()
        m["rollout_is_ratio_fraction_low"] = (log_for_metrics < math.log(low)).float().mean()
    else:
        m["rollout_is_mean"] = masked_mean(weights, mask)
        m["rollout_is_ratio_fraction_high"] = masked_mean((raw > upper).to(mask.dtype), mask)
        m["rollout_is_ratio_fraction_low"] = masked_mean((raw < low).to(mask.dtype), mask)
        m["rollout_is_max"] = _masked_max(weights, mask)
        m["rollout_is_min"] = _masked_min(weights, mask)
    m["rollout_is_std"] = _clamped_std(weights, mask, 0.0, upper)
    capped = weights.clamp(min=0.0, max=upper)
    normalised = capped / (masked_mean(capped, mask) + 1e-8)
    m["rollout_is_eff_sample_size"] = 1.0 / masked_mean(normalised.square(), mask)
    seq_w = masked_mean(weights, mask, axis=-1)
    m.update(_seq_stats("rollout_is", seq_w))
    m["rollout_is_seq_max_deviation"] = (seq_w - 1.0).abs().max()
    raw_seq = masked_mean(raw, mask, axis=-1)  # before truncation: a capped mean never exceeds the cap
    m["rollout_is_seq_fraction_high"] = (raw_seq > upper).float().mean()
    m["rollout_is_seq_fraction_low"] = (raw_seq < low).float().mean()
    if icepop:
        m["rollout_is_oob_ratio"] = masked_mean(((raw < lower) | (raw > upper)).to(mask.dtype), mask)
    if batch_normalize:
        if level == "token":
            mean = masked_mean(weights, mask)
        else:
            rows = (mask.sum(-1) > 0).to(weights.dtype)
            mean = (masked_mean(weights, mask, axis=-1) * rows).sum() / rows.sum().clamp(min=1e-8)
        if float(mean) > 1e-8:
            weights = weights / mean
            m["rollout_is_batch_norm_factor"] = mean
        else:
            m["rollout_is_batch_norm_factor"] = 1.0
    return weights, _read(m, prefix="")


# ------------------------------------------------------------------------------------- rejection
def _binary_kl(log_p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    """KL(Bernoulli(p) || Bernoulli(q)) per token, p = exp(log_p), in float32 with p, q clamped."""
    p = torch.exp(log_p.float()).clamp(BINARY_KL_EPS, 1.0 - BINARY_KL_EPS)
    q = torch.exp(log_q.float()).clamp(BINARY_KL_EPS, 1.0 - BINARY_KL_EPS)
    return (p * torch.log(p / q) + (1 - p) * torch.log((1 - p) / (1 - q))).to(log_p.dtype)


def _seq_max(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-row max over the masked entries (0 for a row with none)."""
    top = values.masked_fill(~mask.bool(), float("-inf")).max(dim=-1).values
    return torch.where(torch.isinf(top), torch.zeros_like(top), top)


def _option_statistic(name: str, log_ratio: torch.Tensor, mask: torch.Tensor,
                      old_log_prob: torch.Tensor | None, rollout_log_prob: torch.Tensor | None
                      ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(per-token statistic (B, T), per-sequence statistic (B,) or None for token options)."""
    lr = log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND)
    if name == "binary_kl":
        if old_log_prob is None or rollout_log_prob is None:
            raise ValueError("rollout_rs=binary_kl needs old_log_prob and rollout_log_prob")
        return torch.maximum(_binary_kl(old_log_prob, rollout_log_prob),
                             _binary_kl(rollout_log_prob, old_log_prob)), None
    kind = name[-2:]
    token = {"k1": -lr, "k2": 0.5 * lr.square(), "k3": torch.exp(lr) - 1.0 - lr}[kind]
    if name.startswith("token_"):
        return token, None
    if name.startswith("seq_sum_"):
        seq = masked_sum(token, mask, axis=-1)
    elif name.startswith("seq_mean_"):
        seq = masked_mean(token, mask, axis=-1)
    else:  # seq_max_
        seq = _seq_max(token, mask)
    return seq.unsqueeze(-1).expand_as(mask), seq


def rejection_mask(log_ratio: torch.Tensor, mask: torch.Tensor, options: str,
                   thresholds: float | str | None, *, old_log_prob: torch.Tensor | None = None,
                   rollout_log_prob: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """The mask (B, T) with rejected tokens / sequences set to 0, and the metrics (rollout_rs_*,
    unprefixed). ``options`` and ``thresholds`` are rollout_rs and rollout_rs_threshold."""
    names = parse_rs_options(options)
    bounds = parse_rs_thresholds(names, thresholds)
    mask_f = mask.to(log_ratio.dtype)
    valid = mask.bool()
    valid_rows = mask_f.sum(-1) > 0
    keep_all = torch.ones_like(mask_f)
    m: Scalars = {}
    for name in names:
        lower, upper = bounds[name]
        k1 = name.endswith("k1")
        stat, seq = _option_statistic(name, log_ratio, mask_f, old_log_prob, rollout_log_prob)
        # k1's bounds are on the ratio, its statistic is a log: compare in log space.
        hi = math.log(upper) if k1 else upper
        lo = math.log(lower) if k1 and lower is not None else 0.0
        keep = (stat <= hi) & (stat >= lo) if k1 else stat <= hi
        keep_f = keep.to(mask_f.dtype)
        keep_all = keep_all * keep_f
        m.update(_rs_metrics(f"rollout_rs_{name}", stat, seq, mask_f, valid_rows, hi=hi, lo=lo, k1=k1,
                             token_level=name in TOKEN_RS_OPTIONS))
        m[f"rollout_rs_{name}_masked_fraction"] = masked_mean(1.0 - keep_f, mask_f)
        rejected_row = (~keep & valid).any(dim=-1)
        m[f"rollout_rs_{name}_seq_masked_fraction"] = (
            (rejected_row & valid_rows).float().sum() / valid_rows.float().sum().clamp(min=1.0))
    m["rollout_rs_masked_fraction"] = masked_mean(1.0 - keep_all, mask_f)
    m["rollout_rs_seq_masked_fraction"] = ((keep_all <= 0.5) & valid).any(dim=-1).float().mean()
    return (mask * keep_all).to(mask.dtype), _read(m, prefix="")


def _rs_metrics(prefix: str, stat: torch.Tensor, seq: torch.Tensor | None, mask: torch.Tensor,
                valid_rows: torch.Tensor, *, hi: float, lo: float, k1: bool, token_level: bool) -> Scalars:
    """One rejection option's statistic: mean, max / min, fractions beyond the bounds, std, and the
    same per sequence (a token option's sequence value is its mean over the sequence)."""
    seq_values = (seq if seq is not None else masked_mean(stat, mask, axis=-1))[valid_rows]
    m: Scalars = {f"{prefix}_mean": masked_mean(stat, mask)}
    if not token_level and seq_values.numel():
        m[f"{prefix}_max"], m[f"{prefix}_min"] = seq_values.max(), seq_values.min()
        m[f"{prefix}_fraction_high"] = (seq_values > hi).float().mean()
        m[f"{prefix}_fraction_low"] = (seq_values < lo).float().mean() if k1 else 0.0
    else:
        m[f"{prefix}_max"], m[f"{prefix}_min"] = _masked_max(stat, mask), _masked_min(stat, mask)
        m[f"{prefix}_fraction_high"] = masked_mean((stat > hi).to(mask.dtype), mask)
        m[f"{prefix}_fraction_low"] = masked_mean((stat < lo).to(mask.dtype), mask) if k1 else 0.0
    m[f"{prefix}_std"] = _clamped_std(stat, mask, lo if k1 else 0.0, hi)
    if seq_values.numel():
        m.update(_seq_stats(prefix, seq_values))
        m[f"{prefix}_seq_max_deviation"] = seq_values.abs().max()
        m[f"{prefix}_seq_fraction_high"] = (seq_values > hi).float().mean()
        if k1:
            m[f"{prefix}_seq_fraction_low"] = (seq_values < lo).float().mean()
    return m


# --------------------------------------------------------------------------------------- metrics
def offpolicy_metrics(old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, mask: torch.Tensor
                      ) -> dict[str, float]:
    """verl's mismatch diagnostics (unprefixed): kl = E[log pi_rollout - log pi_old] (KL(rollout ||
    actor) by the direct estimator), k3_kl = E[r - log r - 1]; per-sequence perplexities
    exp(-mean log p) averaged over the batch (training_ppl, rollout_ppl, their logs), log_ppl_diff =
    mean log p_rollout - mean log p_old per sequence (mean, |mean|, max, min), ppl_ratio = batch mean of
    training_ppl / rollout_ppl per sequence, chi2_token = E[r^2] - 1, chi2_seq = E[(prod r)^2] - 1."""
    mask = mask.to(old_log_prob.dtype)
    mean_old = masked_mean(old_log_prob, mask, axis=-1)
    mean_rollout = masked_mean(rollout_log_prob, mask, axis=-1)
    log_ratio = old_log_prob - rollout_log_prob
    safe = log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND)
    log_ppl_diff = mean_rollout - mean_old
    seq_sum = masked_sum(log_ratio, mask, axis=-1).clamp(-SAFETY_BOUND, SAFETY_BOUND)
    return _read({
        "training_ppl": torch.exp(-mean_old).mean(),
        "training_log_ppl": (-mean_old).mean(),
        "kl": masked_mean(rollout_log_prob - old_log_prob, mask),
        "k3_kl": masked_mean(torch.exp(log_ratio) - log_ratio - 1.0, mask),
        "rollout_ppl": torch.exp(-mean_rollout).mean(),
        "rollout_log_ppl": (-mean_rollout).mean(),
        "log_ppl_diff": log_ppl_diff.mean(),
        "log_ppl_abs_diff": log_ppl_diff.abs().mean(),
        "log_ppl_diff_max": log_ppl_diff.max(),
        "log_ppl_diff_min": log_ppl_diff.min(),
        "ppl_ratio": torch.exp(log_ppl_diff).mean(),
        "chi2_token": masked_mean(torch.exp(safe).square(), mask) - 1.0,
        "chi2_seq": torch.exp(2.0 * seq_sum).mean() - 1.0,
    }, prefix="")


def rollout_correction(old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, mask: torch.Tensor, *,
                       rollout_is: str | None = None, rollout_is_threshold: float | str = 2.0,
                       rollout_is_batch_normalize: bool = False, rollout_rs: str | None = None,
                       rollout_rs_threshold: float | str | None = None) -> RolloutCorrection:
    """Weights, rejected mask and every metric, named ``rollout_corr/<name>`` as verl's
    compute_rollout_correction_and_rejection_mask. A mask with no token gives no weights' effect, the
    mask unchanged and no metrics (verl raises; a batch whose samples are all empty still trains)."""
    if old_log_prob.shape != rollout_log_prob.shape or old_log_prob.shape != mask.shape:
        raise ValueError(f"shapes differ: old {tuple(old_log_prob.shape)}, rollout "
                         f"{tuple(rollout_log_prob.shape)}, mask {tuple(mask.shape)}")
    if not bool(mask.any()):
        weights = torch.zeros_like(old_log_prob) if rollout_is is not None else None
        return RolloutCorrection(weights=weights, mask=mask.clone())
    old_log_prob, rollout_log_prob = old_log_prob.detach(), rollout_log_prob.detach()
    log_ratio = old_log_prob - rollout_log_prob
    metrics: dict[str, float] = {}
    weights = None
    if rollout_is is not None:
        weights, is_metrics = importance_weights(log_ratio, mask, rollout_is, rollout_is_threshold,
                                                 rollout_is_batch_normalize)
        metrics.update(is_metrics)
    new_mask = mask.clone()
    if rollout_rs is not None:
        new_mask, rs_metrics = rejection_mask(log_ratio, mask, rollout_rs, rollout_rs_threshold,
                                              old_log_prob=old_log_prob, rollout_log_prob=rollout_log_prob)
        metrics.update(rs_metrics)
    metrics.update(offpolicy_metrics(old_log_prob, rollout_log_prob, mask))
    return RolloutCorrection(weights=weights, mask=new_mask,
                             metrics={f"{PREFIX}{k}": v for k, v in metrics.items()})


def rollout_correction_for(cfg, old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor,
                           mask: torch.Tensor) -> RolloutCorrection:
    """``rollout_correction`` with the settings of an ``algorithm.rollout_correction`` section."""
    return rollout_correction(old_log_prob, rollout_log_prob, mask, rollout_is=cfg.rollout_is,
                              rollout_is_threshold=cfg.rollout_is_threshold,
                              rollout_is_batch_normalize=cfg.rollout_is_batch_normalize,
                              rollout_rs=cfg.rollout_rs, rollout_rs_threshold=cfg.rollout_rs_threshold)


def mismatch_metrics(log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, mask: torch.Tensor
                     ) -> dict[str, float]:
    """``offpolicy_metrics`` named ``rollout_corr/<name>`` (verl's compute_rollout_corr_metrics_from_
    logprobs: the actor's current log-probs against the rollout's, per micro-batch); {} without tokens."""
    if not bool(mask.any()):
        return {}
    return {f"{PREFIX}{k}": v for k, v in offpolicy_metrics(log_prob.detach(), rollout_log_prob, mask).items()}


# ------------------------------------------------------------------------------- bypass's reinforce
def reinforce_loss(rollout_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                   response_mask: torch.Tensor, *, loss_agg_mode: str = "token-mean",
                   loss_scale_factor: float | None = None,
                   rollout_is_weights: torch.Tensor | None = None) -> PolicyLossOutput:
    """Bypass mode's loss_type=reinforce (verl's compute_policy_loss_reinforce): L = -w A log pi
    (w the detached importance weights pi / pi_rollout, or 1), aggregated by ``loss_agg_mode``;
    ppo_kl = mean(log pi_rollout - log pi)."""
    pg_losses = -advantages * log_prob
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights
    return PolicyLossOutput(
        pg_loss=agg_loss(pg_losses, response_mask, loss_agg_mode, loss_scale_factor),
        loss_agg_mode=loss_agg_mode,
        ppo_kl=masked_mean(rollout_log_prob - log_prob, response_mask).detach(),
    )


# ------------------------------------------------------------------------------- in the actor's loss
def corrected_policy_loss(loss_fn, rc, old_log_prob: torch.Tensor, log_prob: torch.Tensor,
                          advantages: torch.Tensor, mask: torch.Tensor, *,
                          rollout_log_prob: torch.Tensor | None, rollout_is_weights: torch.Tensor | None,
                          **loss_kwargs) -> tuple[PolicyLossOutput, dict[str, float]]:
    """One micro-batch's policy loss with rollout correction, and its rollout_corr/* metrics.

    ``loss_fn`` is the configured policy loss (``loss_kwargs`` its clip and aggregation settings),
    ``rc`` the algorithm.rollout_correction section (None: not configured).

    Decoupled (the default): ``rollout_is_weights`` (computed by the driver from the old log-probs,
    or None) multiply the loss; the mismatch metrics are taken between the current log-probs and the
    rollout's (verl's actor does the same, per micro-batch). Bypass mode: ``old_log_prob`` is the
    rollout's log-probs; weights and rejection are computed here between the current policy and the
    rollout (verl's bypass_mode loss): loss_type=ppo_clip runs ``loss_fn`` (its ratio pi / pi_rollout
    is the correction; the weights are only reported), reinforce -w A log pi. Rejected tokens leave
    the mask the loss and its metrics are taken over (verl's effective mask: a row is the mean of its
    kept tokens in the seq-mean modes, a sequence ratio is over its kept tokens); token-mean still
    divides by the tokens before the rejection (verl's global token count is taken before it).
    """
    if rc is not None and rc.bypass_mode:
        with torch.no_grad():
            corr = rollout_correction_for(rc, log_prob.detach(), old_log_prob, mask)
        kept = corr.mask if rc.rollout_rs is not None else mask
        if rc.loss_type == "reinforce":
            agg = {k: loss_kwargs[k] for k in ("loss_agg_mode", "loss_scale_factor") if k in loss_kwargs}
            out = reinforce_loss(old_log_prob, log_prob, advantages, kept, rollout_is_weights=corr.weights, **agg)
        else:
            out = loss_fn(old_log_prob, log_prob, advantages, kept, rollout_is_weights=None, **loss_kwargs)
        if out.loss_agg_mode == "token-mean" and rc.rollout_rs is not None:
            # masked_mean over the kept tokens, times kept / all: the sum over all the tokens before rejection
            out = replace(out, pg_loss=out.pg_loss * (kept.sum() / mask.sum().clamp(min=1)))
        return out, corr.metrics
    metrics = mismatch_metrics(log_prob, rollout_log_prob, mask) if rollout_log_prob is not None else {}
    return loss_fn(old_log_prob, log_prob, advantages, mask, rollout_is_weights=rollout_is_weights,
                   **loss_kwargs), metrics
