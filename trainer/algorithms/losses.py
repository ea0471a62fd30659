"""Loss maths: masked statistics, loss aggregation, the critic's clipped value loss, KL estimators
and controllers, entropy.

The policy losses themselves (vanilla PPO clip, gspo, cispo, gpg, geo_mean, sapo, clip_cov, kl_cov) and
their registry are in ``policy_losses.py``.

Shapes: B = trajectories, T = response tokens (padded), V = vocabulary. ``mask`` / ``response_mask``
(B, T) is 1 on the tokens that count (assistant tokens in multi-turn), 0 elsewhere. Everything here is a
pure function of tensors except the KL controllers, which hold the in-reward KL coefficient.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

LOSS_AGG_MODES = (
    "token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)
KL_BASES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")
# "<name>+": the value of <name>, the gradient of k2 (verl's straight-through estimators, e.g. "k3+").
KL_PENALTIES = KL_BASES + tuple(f"{name}+" for name in KL_BASES)


# ------------------------------------------------------------------------------------ masked stats
def masked_sum(values: torch.Tensor, mask: torch.Tensor, axis: int | None = None) -> torch.Tensor:
    """Sum of ``values`` where ``mask`` is non-zero (weighted by the mask), over everything or ``axis``.

    Masked-out entries are zeroed before the product, as verl's does: a NaN or inf under a 0 of the
    mask (a padded position, a tool reply) does not turn the sum into NaN (NaN * 0 is NaN).
    """
    kept = torch.where(mask.bool(), values, torch.zeros_like(values)) * mask
    return kept.sum() if axis is None else kept.sum(dim=axis)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, axis: int | None = None) -> torch.Tensor:
    """Mean of ``values`` where ``mask`` is 1 (over everything, or along ``axis``); 0 where the mask is empty.

    Exact division (verl adds 1e-8 to the count instead): a guarded empty mask gives 0, not NaN.
    """
    total = masked_sum(values, mask, axis)
    count = mask.sum() if axis is None else mask.sum(dim=axis)
    return torch.where(
        count > 0, total / count.clamp_min(torch.finfo(total.dtype).tiny), torch.zeros_like(total)
    )


def masked_var(values: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance over the masked entries (scalar); unbiased (N-1) by default. Needs >= 2 masked entries."""
    count = mask.sum()
    if count == 0:
        raise ValueError("masked_var: the mask is empty")
    mean = masked_mean(values, mask)
    var = masked_mean((values - mean) ** 2, mask)
    if unbiased:
        if count == 1:
            raise ValueError("masked_var: one masked entry has no unbiased variance")
        var = var * count / (count - 1)
    return var


def masked_whiten(
    values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True
) -> torch.Tensor:
    """(values - mean) / sqrt(var + 1e-8) with mean and unbiased var over the masked entries (B, T)."""
    mean, var = masked_mean(values, mask), masked_var(values, mask)
    whitened = (values - mean) * torch.rsqrt(var + 1e-8)
    return whitened if shift_mean else whitened + mean


# ------------------------------------------------------------------------------------- aggregation
def agg_loss(
    loss_mat: torch.Tensor,
    loss_mask: torch.Tensor,
    loss_agg_mode: str,
    loss_scale_factor: float | None = None,
) -> torch.Tensor:
    """Aggregate a (B, T) token-loss matrix into a scalar.

    token-mean              sum(L m) / sum(m)
    seq-mean-token-sum      mean_i sum_t L m
    seq-mean-token-mean     mean_i (sum_t L m / sum_t m)   (a row without tokens counts 0)
    seq-mean-token-sum-norm mean_i (sum_t L m) / S   (Dr.GRPO, as verl)

    Every seq-mean is over all the rows, those without a trained token included (an empty response,
    a sequence the rollout correction rejected), as verl's loss is over its mini-batch's
    global_batch_size rows.

    S is a constant: ``loss_scale_factor`` (``actor.loss_scale_factor``; the actor passes the rollout's
    padded response length when that key is unset, as verl's ``loss_mask.shape[-1]`` is). Only when
    ``loss_scale_factor`` is None here does S fall back to this matrix's own width ``T``; a caller that
    hands in micro-batches cut to their longest response must pass S, or the loss would depend on
    the micro-batch size (at one row per micro-batch it would equal seq-mean-token-mean).

    Every "seq-mean" is a mean over this matrix's rows, so a micro-batch's value weighted by its share
    of the rows (``trainer.workers.actor``) sums to the whole batch's value.
    """
    if loss_agg_mode == "token-mean":
        return masked_mean(loss_mat, loss_mask)
    if loss_agg_mode == "seq-mean-token-sum":
        return masked_sum(loss_mat, loss_mask, axis=-1).mean()
    if loss_agg_mode == "seq-mean-token-mean":
        return masked_mean(loss_mat, loss_mask, axis=-1).mean()  # (B,): 0 for a row without tokens
    if loss_agg_mode == "seq-mean-token-sum-norm":
        scale = loss_mask.shape[-1] if loss_scale_factor is None else loss_scale_factor
        if scale <= 0:
            raise ValueError(f"loss_scale_factor must be > 0, got {scale}")
        return masked_sum(loss_mat, loss_mask, axis=-1).mean() / scale
    raise ValueError(
        f"unknown loss_agg_mode {loss_agg_mode!r}; allowed: {', '.join(LOSS_AGG_MODES)}"
    )


def micro_batch_share(loss_agg_mode: str, mask: torch.Tensor, global_tokens: float, global_rows: float) -> float:
    """The weight of one micro-batch's `agg_loss` in its mini-batch's (all ranks'): its share of the
    trained tokens (token-mean) or of the rows (every seq-mean), so that the weighted micro-batch
    losses sum to the mini-batch's loss however it is cut (verl's global token count and
    global_batch_size)."""
    if loss_agg_mode == "token-mean":
        return float(mask.sum()) / max(global_tokens, 1.0)
    return mask.shape[0] / max(global_rows, 1.0)


# ------------------------------------------------------------------------------------------- value
def value_loss(
    vpreds: torch.Tensor,
    returns: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    cliprange_value: float,
    loss_agg_mode: str = "token-mean",
    loss_scale_factor: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped value loss (verl's compute_value_loss): the prediction is also clipped to
    V_old +- cliprange_value and the larger squared error kept,

        L = 1/2 agg(max((V - R)^2, (clip(V, V_old - c, V_old + c) - R)^2))

    vpreds (the critic now), returns, values (V_old, the critic before the update), mask: (B, T).
    Returns (loss, clipfrac: the share of masked tokens where the clipped error was the larger).
    """
    clipped = torch.maximum(torch.minimum(vpreds, values + cliprange_value), values - cliprange_value)
    err = (vpreds - returns).square()
    err_clipped = (clipped - returns).square()
    loss = 0.5 * agg_loss(torch.maximum(err, err_clipped), mask, loss_agg_mode, loss_scale_factor)
    clipfrac = masked_mean((err_clipped > err).to(vpreds.dtype), mask)
    return loss, clipfrac


# ---------------------------------------------------------------------------------------------- KL
def kl_penalty(
    logprob: torch.Tensor, ref_logprob: torch.Tensor, kl_penalty: str = "kl"
) -> torch.Tensor:
    """Per-token KL estimate (B, T) with x = logprob - ref_logprob.

    kl / k1: x;  abs: |x|;  mse / k2: x^2 / 2;  low_var_kl / k3: e^{-x} + x - 1 with -x clamped to
    [-20, 20] and the result clamped to [-10, 10] (verl's guards against overflow). A name with a
    trailing "+" (verl's straight-through form, e.g. "k3+") has that estimator's value and k2's
    gradient, x: unbiased for the KL's gradient whatever the value shown.
    """
    if kl_penalty.endswith("+") and kl_penalty[:-1] in KL_BASES:
        value = _kl_estimate(logprob, ref_logprob, kl_penalty[:-1])
        grad = 0.5 * (logprob - ref_logprob).square()
        return grad - grad.detach() + value.detach()
    return _kl_estimate(logprob, ref_logprob, kl_penalty)


def _kl_estimate(logprob: torch.Tensor, ref_logprob: torch.Tensor, kl_penalty: str) -> torch.Tensor:
    """One of KL_BASES (kl_penalty's table)."""
    if kl_penalty in ("kl", "k1"):
        return logprob - ref_logprob
    if kl_penalty == "abs":
        return (logprob - ref_logprob).abs()
    if kl_penalty in ("mse", "k2"):
        return 0.5 * (logprob - ref_logprob).square()
    if kl_penalty in ("low_var_kl", "k3"):
        neg = torch.clamp(ref_logprob - logprob, min=-20.0, max=20.0)
        return torch.clamp(torch.exp(neg) - neg - 1.0, min=-10.0, max=10.0)
    raise ValueError(f"unknown kl_penalty {kl_penalty!r}; allowed: {', '.join(KL_PENALTIES)}")


class FixedKLController:
    """A constant in-reward KL coefficient."""

    def __init__(self, kl_coef: float) -> None:
        self.value = float(kl_coef)

    def update(self, current_kl: float, n_steps: int) -> None:  # noqa: ARG002 - same interface
        return None


class AdaptiveKLController:
    """Adaptive coefficient (Ziegler et al.): beta *= 1 + clip(KL/target - 1, -0.2, 0.2) * n_steps / horizon."""

    def __init__(self, init_kl_coef: float, target_kl: float, horizon: int) -> None:
        if target_kl <= 0 or horizon <= 0:
            raise ValueError("adaptive KL controller needs target_kl > 0 and horizon > 0")
        self.value = float(init_kl_coef)
        self.target = float(target_kl)
        self.horizon = int(horizon)

    def update(self, current_kl: float, n_steps: int) -> None:
        error = min(max(current_kl / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon


def get_kl_controller(kl_ctrl: Any) -> FixedKLController | AdaptiveKLController:
    """Build from ``algorithm.kl_ctrl`` (a KLCtrlConfig or a dict with type, kl_coef, horizon, target_kl)."""
    get = kl_ctrl.get if isinstance(kl_ctrl, Mapping) else lambda k, d=None: getattr(kl_ctrl, k, d)
    kind = get("type", "fixed")
    if kind == "fixed":
        return FixedKLController(get("kl_coef", 0.001))
    if kind == "adaptive":
        return AdaptiveKLController(
            get("kl_coef", 0.001), get("target_kl", 0.1), get("horizon", 10000)
        )
    raise ValueError(f"unknown kl_ctrl.type {kind!r}; allowed: fixed, adaptive")


def apply_kl_penalty(
    token_level_scores: torch.Tensor,
    old_log_prob: torch.Tensor,
    ref_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    kl_ctrl: FixedKLController | AdaptiveKLController,
    kl_penalty_type: str = "kl",
) -> tuple[torch.Tensor, dict[str, float]]:
    """KL in the reward: r = score - beta * kl(old, ref) * mask (B, T); then the controller is updated
    with the batch KL (mean over rows of the per-row masked mean). Returns (token_level_rewards, metrics)."""
    kld = kl_penalty(old_log_prob, ref_log_prob, kl_penalty_type) * response_mask
    beta = kl_ctrl.value
    rewards = token_level_scores - beta * kld
    current_kl = float(masked_mean(kld, response_mask, axis=-1).mean().item())
    kl_ctrl.update(current_kl=current_kl, n_steps=token_level_scores.shape[0])
    return rewards, {"actor/reward_kl_penalty": current_kl, "actor/reward_kl_penalty_coeff": beta}


# ----------------------------------------------------------------------------------------- entropy
def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) over the last axis: logsumexp(z) - sum softmax(z) z. (B, T, V) -> (B, T)."""
    probs = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(dim=-1)


def entropy_from_log_probs(log_probs: torch.Tensor) -> torch.Tensor:
    """Entropy from a finite log_softmax output: -sum p log p over the last axis. (B, T, V) -> (B, T).

    The actor already holds log_softmax(logits) for the token log-probs, so this costs one exp, one
    product and one sum, instead of entropy_from_logits' second softmax and logsumexp.
    """
    return -(log_probs.exp() * log_probs).sum(dim=-1)


def entropy_from_logits_chunked(logits: torch.Tensor, chunk_size: int = 1024) -> torch.Tensor:
    """Same as entropy_from_logits on a (N, V) or (B, T, V) tensor, chunked to bound the softmax memory."""
    flat = logits.reshape(-1, logits.shape[-1])
    if flat.shape[0] == 0:
        return logits.new_zeros(logits.shape[:-1])
    out = torch.cat(
        [entropy_from_logits(flat[i : i + chunk_size]) for i in range(0, flat.shape[0], chunk_size)]
    )
    return out.reshape(logits.shape[:-1])
