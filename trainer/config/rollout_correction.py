"""``algorithm.rollout_correction``: verl's rollout-correction section, its checks and warnings, and
the parsing of its threshold strings (shared with the maths in trainer.algorithms.rollout_correction).

Rollout correction handles the gap between the engine that sampled a response (its per-token
log-probs, ``rollout_log_probs``) and the actor that trains on it (its log-probs of the same tokens,
``old_log_probs``): truncated importance weights pi_old / pi_rollout that multiply the policy loss
(``rollout_is``), rejection of tokens or sequences whose divergence is too large (``rollout_rs``), or
no recompute at all (``bypass_mode``: the rollout's log-probs are the old ones). Key names, defaults
and threshold syntax are verl HEAD's (verl/trainer/config/algorithm/rollout_correction.yaml):

    rollout_is_threshold   2.0 (truncate weights above 2: TIS) or "lower_upper" ("0.5_5.0": IcePop,
                           weights outside [lower, upper] set to 0)
    rollout_rs             one or more of RS_OPTIONS, comma separated ("token_k1,seq_max_k3"): a token
                           or sequence is kept only if every option keeps it
    rollout_rs_threshold   one value shared by the options or one per option, comma separated; a k1
                           option takes ratio bounds "lower_upper" (one number u means [1/u, u]), the
                           others an upper bound on the divergence

Standard library only (the web side imports trainer.config).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Union

from .fields import ConfigError, option

KEY = "algorithm.rollout_correction"

# verl's rejection options: the statistic per token is k1 = -log r, k2 = (log r)^2 / 2,
# k3 = r - 1 - log r (r = pi_old / pi_rollout); token_* reject tokens, seq_* whole sequences by the
# sum / mean / max of the token statistic; binary_kl rejects tokens by the larger of the two Bernoulli
# KLs between p_old and p_rollout of the sampled token.
RS_OPTIONS: tuple[str, ...] = (
    "token_k1", "token_k2", "token_k3",
    "seq_sum_k1", "seq_sum_k2", "seq_sum_k3",
    "seq_mean_k1", "seq_mean_k2", "seq_mean_k3",
    "seq_max_k2", "seq_max_k3",
    "binary_kl",
)
TOKEN_RS_OPTIONS: tuple[str, ...] = ("token_k1", "token_k2", "token_k3", "binary_kl")


@dataclass(frozen=True)
class RolloutCorrectionConfig:
    rollout_is: Union[Literal["token", "sequence"], None] = option(
        None,
        "Importance weights pi_old / pi_rollout between the actor's and the rollout engine's "
        "log-probs, multiplying every token's policy loss: token (one weight per token), sequence "
        "(the product over the sequence's trained tokens), None = no weights (the mismatch metrics "
        "rollout_corr/* are reported anyway).",
    )
    rollout_is_threshold: Union[float, str] = option(
        2.0,
        "Truncation of the importance weights: a number u caps them at u (TIS); a string "
        '"lower_upper" (e.g. "0.5_5.0") sets weights outside [lower, upper] to 0 (IcePop).',
    )
    rollout_is_batch_normalize: bool = option(
        False, "Divide the importance weights by their batch mean (mean 1 per batch)."
    )
    rollout_rs: Union[str, None] = option(
        None,
        "Rejection sampling: tokens or sequences whose rollout / actor divergence passes "
        "rollout_rs_threshold leave the loss mask. One or more of " + ", ".join(RS_OPTIONS)
        + ', comma separated ("token_k1,seq_max_k3": all must pass); None = no rejection.',
    )
    rollout_rs_threshold: Union[float, str, None] = option(
        None,
        "Rejection thresholds, one shared or one per rollout_rs option (comma separated): k1 "
        'options take ratio bounds "lower_upper" (a single u = [1/u, u]), the others an upper '
        "bound on the divergence. Required with rollout_rs.",
    )
    bypass_mode: bool = option(
        False,
        "Use the rollout engine's log-probs as the old log-probs and skip the actor's recompute "
        "pass (two policies instead of three); weights and rejection are then computed in the "
        "update, between the current policy and the rollout.",
    )
    loss_type: Literal["ppo_clip", "reinforce"] = option(
        "ppo_clip",
        "The policy loss in bypass mode: ppo_clip = the configured policy loss with the rollout "
        "as the old policy (its ratio is the correction: no extra weights); reinforce = "
        "-w A log pi with the importance weights w of rollout_is.",
    )


# ---------------------------------------------------------------------------------- thresholds
def _number(text: str, key: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(key, f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise ConfigError(key, f"{text!r} is not a finite number")
    return value


def parse_is_threshold(spec: Union[float, str], key: str = f"{KEY}.rollout_is_threshold"
                       ) -> tuple[float, Union[float, None]]:
    """(upper, lower): a number or a number-like string is TIS's cap (lower None); "lower_upper" is
    IcePop's interval. Both bounds > 0, lower <= upper."""
    if isinstance(spec, bool) or not isinstance(spec, (int, float, str)):
        raise ConfigError(key, f"expected a number or a 'lower_upper' string, got {spec!r}")
    lower: Union[float, None] = None
    if isinstance(spec, str):
        text = spec.strip()
        if not text:
            raise ConfigError(key, "must not be empty")
        if "_" in text:
            low_text, up_text = text.split("_", 1)
            lower, upper = _number(low_text, key), _number(up_text, key)
        else:
            upper = _number(text, key)
    else:
        upper = float(spec)
    if upper <= 0:
        raise ConfigError(key, f"the upper bound must be > 0, got {upper:g}")
    if lower is not None:
        if lower <= 0:
            raise ConfigError(key, f"the lower bound must be > 0, got {lower:g}")
        if lower > upper:
            raise ConfigError(key, f"the lower bound {lower:g} is above the upper bound {upper:g}")
    return upper, lower


def parse_rs_options(spec: str, key: str = f"{KEY}.rollout_rs") -> list[str]:
    """The options of a comma-separated rollout_rs, in order, duplicates dropped."""
    options: list[str] = []
    for part in spec.split(","):
        name = part.strip()
        if not name:
            continue
        if name not in RS_OPTIONS:
            raise ConfigError(key, f"{name!r} is not a rejection option; one of: {', '.join(RS_OPTIONS)}")
        if name not in options:
            options.append(name)
    if not options:
        raise ConfigError(key, f"names no option; one or more of: {', '.join(RS_OPTIONS)}")
    return options


def parse_rs_thresholds(options: list[str], spec: Union[float, str, None],
                        key: str = f"{KEY}.rollout_rs_threshold"
                        ) -> dict[str, tuple[Union[float, None], float]]:
    """{option: (lower, upper)}: k1 options get ratio bounds (lower, upper), lower = 1/upper when only
    one number is given; the others (None, upper) on their divergence. All bounds > 0."""
    if spec is None:
        raise ConfigError(key, "required with rollout_rs")
    if isinstance(spec, bool) or not isinstance(spec, (int, float, str)):
        raise ConfigError(key, f"expected a number or a string, got {spec!r}")
    parts = [repr(float(spec))] if not isinstance(spec, str) else \
        [p.strip() for p in spec.split(",") if p.strip()]
    if not parts:
        raise ConfigError(key, "must give at least one threshold")
    if len(parts) not in (1, len(options)):
        raise ConfigError(key, f"one threshold shared by the options or one per option ({len(options)}), "
                               f"got {len(parts)}")
    parts = parts * len(options) if len(parts) == 1 else parts
    out: dict[str, tuple[Union[float, None], float]] = {}
    for name, part in zip(options, parts):
        if name.endswith("k1"):
            if "_" in part:
                low_text, up_text = part.split("_", 1)
                lower, upper = _number(low_text, key), _number(up_text, key)
            else:
                upper = _number(part, key)
                lower = 1.0 / upper if upper > 0 else upper
            if lower <= 0 or upper <= 0:
                raise ConfigError(key, f"{name}: ratio bounds must be > 0, got {part!r}")
            if lower > upper:
                raise ConfigError(key, f"{name}: the lower bound is above the upper bound in {part!r}")
            out[name] = (lower, upper)
        else:
            if "_" in part:
                raise ConfigError(key, f"{name} takes one upper bound, not a 'lower_upper' pair ({part!r})")
            upper = _number(part, key)
            if upper <= 0:
                raise ConfigError(key, f"{name}: the bound must be > 0, got {part!r}")
            out[name] = (None, upper)
    return out


# ------------------------------------------------------------------------------ checks, warnings
def check_rollout_correction(rc: RolloutCorrectionConfig) -> None:
    """Every threshold parses and fits its options; raise ConfigError naming the key."""
    parse_is_threshold(rc.rollout_is_threshold)
    if rc.rollout_rs is not None:
        parse_rs_thresholds(parse_rs_options(rc.rollout_rs), rc.rollout_rs_threshold)


def rollout_correction_warnings(rc: RolloutCorrectionConfig, loss_mode: str) -> list[tuple[str, str]]:
    """(key, message) for settings that run but do not do what they seem to."""
    out: list[tuple[str, str]] = []
    if rc.rollout_rs is None and rc.rollout_rs_threshold is not None:
        out.append((f"{KEY}.rollout_rs_threshold", "used only with rollout_rs; no rejection is done."))
    if not rc.bypass_mode:
        if rc.loss_type != "ppo_clip":
            out.append((f"{KEY}.loss_type", "used only in bypass_mode; the configured policy loss runs "
                                            "with the importance weights of rollout_is."))
        return out
    if rc.loss_type == "ppo_clip" and rc.rollout_is is not None:
        out.append((f"{KEY}.rollout_is",
                    "bypass_mode with loss_type=ppo_clip: the PPO ratio pi / pi_rollout already is the "
                    "correction, so the importance weights are only reported (as verl), not applied."))
    if rc.loss_type == "reinforce" and loss_mode != "vanilla":
        out.append((f"{KEY}.loss_type",
                    f"loss_type=reinforce replaces the policy loss: actor.policy_loss.loss_mode={loss_mode} "
                    "is not used in bypass_mode."))
    return out
