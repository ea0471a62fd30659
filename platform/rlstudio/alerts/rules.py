"""The catalogue of alert rules and their evaluation: pure functions, no Django, no database.

A rule watches one run's metrics (verl's names, as the trainer reports them) and says when a run is
sick. `evaluate(rules, state, events)` takes the rules that apply to a run, the run's rolling state
(a small JSON-able dict kept between ingest batches) and the batch's metrics events in step order,
updates the state in place and returns a `Trigger` for each rule whose condition *became* true
(edge-triggered: a rule fires once, then again only after its condition was false at a later step).

Rolling state: `{"h": {metric: [[step, value], ...]}, "on": [rule ids whose condition holds],
"vh": {rule id: [[step, held-out, train], ...]}}`. A metric's history holds only what the rules on
it need (their window plus a few steps), so a batch costs a few operations per point and rule
(engine.py walks it), never a query over the stored metrics. A non-finite metric value arrives as
None (trainer/events/).

Kinds (`CATALOGUE`; `threshold` / `window` / `metric` are each rule's own, defaults here):

    reward_collapse   the 3-step mean of `metric` fell `threshold` (absolute) below its best 3-step mean
                      of the last `window` steps
    entropy_collapse  `metric` < threshold for `window` steps in a row
    kl_high           `metric` > threshold for `window` steps in a row
    grad_norm_spike   `metric` not finite, or > threshold x the median of the previous `window` values
    clip_frac_high    `metric` > threshold for `window` steps in a row
    length_limit      share of responses at the length limit > threshold for `window` steps in a row
    zero_adv_groups   share of groups whose scores are all equal > threshold for `window` steps in a row
    reward_hacking    the held-out reward (`metric`, a pattern: the mean of the keys it matches) fell
                      `threshold` below its best of the last `window` validations while the train
                      reward (critic/score/mean, 3-step mean) rose
    throughput_drop   `metric` < (1 - threshold) x the median of the previous `window` values
    threshold         any metric `op` threshold (>, >=, <, <=, or not_finite) for `window` steps in a row
    no_heartbeat      no heartbeat for `threshold` seconds (the periodic reconcile checks it, not the ingest)
    gpu_hours         the run's GPU-hours reach 80% of `threshold` (a warning), then 100% (stopped with a
                      checkpoint; the periodic reconcile checks it)
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from .engine import SMOOTH, TRAIN_REWARD, RuleSpec, Trigger, evaluate_metrics, metric_value

__all__ = ["CATALOGUE", "OPS", "RECOMMENDED", "SMOOTH", "TRAIN_REWARD", "Kind", "RuleInvalid", "RuleSpec",
           "Trigger", "budget_level", "clean_rule", "effective_rules", "evaluate", "heartbeat_silent",
           "metric_value", "metrics_rules"]
OPS = (">", ">=", "<", "<=", "not_finite")
# A metric name or pattern: what the trainer's keys are made of, plus `*` / `?` for a pattern.
METRIC_RE = re.compile(r"^[A-Za-z0-9_./@:+*?\-]{1,200}$")
MAX_WINDOW = 1000


@dataclass(frozen=True)
class Kind:
    """One entry of the catalogue: what it watches and its recommended thresholds."""

    kind: str
    title: str
    metric: str  # the default metric ("" when the kind reads no metric)
    threshold: float
    window: int
    source: str  # "metrics" (ingest), "heartbeat" or "budget" (the periodic reconcile)
    help: str
    op: str = ""  # only `threshold` takes an op from the rule; the others have theirs built in
    unit: str = ""


CATALOGUE: dict[str, Kind] = {k.kind: k for k in (
    Kind("reward_collapse", "Reward collapse", TRAIN_REWARD, 0.3, 20, "metrics",
         "the reward's 3-step mean fell this far (absolute) below its best over the window"),
    Kind("entropy_collapse", "Entropy collapse", "actor/entropy", 0.05, 3, "metrics",
         "the policy's token entropy stayed below the threshold for the window's steps", op="<"),
    Kind("kl_high", "KL above a bound", "actor/ppo_kl", 0.1, 2, "metrics",
         "the KL stayed above the bound for the window's steps (actor/kl_loss: KL to the reference)", op=">"),
    Kind("grad_norm_spike", "Gradient norm spike or not finite", "actor/grad_norm", 10.0, 20, "metrics",
         "the gradient norm is NaN/inf, or above threshold x the median of the previous window"),
    Kind("clip_frac_high", "Clip fraction high", "actor/pg_clipfrac", 0.2, 3, "metrics",
         "the share of clipped tokens stayed above the threshold for the window's steps", op=">"),
    Kind("length_limit", "Responses at the length limit", "response_length/clip_ratio", 0.5, 3, "metrics",
         "the share of responses that hit the length limit stayed above the threshold", op=">"),
    Kind("zero_adv_groups", "Groups with no learning signal", "critic/zero_adv_group_ratio", 0.9, 5, "metrics",
         "the share of groups whose samples all scored the same (zero advantage) stayed above the threshold",
         op=">"),
    Kind("reward_hacking", "Held-out reward falls while train reward rises", "val-core/*/*/mean@*", 0.05, 5,
         "metrics", "the held-out reward fell this far below its best of the last window validations while "
                    "the train reward (critic/score/mean) rose"),
    Kind("throughput_drop", "Throughput drop", "perf/throughput", 0.5, 10, "metrics",
         "throughput fell below (1 - threshold) x the median of the previous window"),
    Kind("threshold", "Any metric against a threshold", "", 0.0, 1, "metrics",
         "the metric compared with the threshold held for the window's steps in a row"),
    Kind("no_heartbeat", "No heartbeat", "", 60.0, 1, "heartbeat",
         "no heartbeat from the trainer for this many seconds", unit="s"),
    Kind("gpu_hours", "GPU-hour budget of a run", "", 10.0, 1, "budget",
         "warning at 80% of this many GPU-hours, stopped with a checkpoint at 100%", unit="GPU-h"),
)}
# The catalogue's recommended set (what "add the recommended rules" creates): every metrics rule
# with a default metric, and no_heartbeat.
RECOMMENDED = tuple(k for k, spec in CATALOGUE.items()
                    if (spec.source == "metrics" and spec.metric) or k == "no_heartbeat")


class RuleInvalid(ValueError):
    """A rule's field is not acceptable; `field` names it."""

    def __init__(self, field: str, message: str):
        self.field, self.message = field, message
        super().__init__(f"{field}: {message}")


def clean_rule(*, kind: str, metric: str | None, threshold: float | None, window: int | None,
               op: str | None) -> tuple[str, float, int, str]:
    """(metric, threshold, window, op) with the catalogue's defaults filled in; RuleInvalid on a bad field."""
    spec = CATALOGUE.get(kind)
    if spec is None:
        raise RuleInvalid("kind", f"unknown kind {kind!r}; known: {', '.join(CATALOGUE)}")
    metric = spec.metric if metric in (None, "") else metric
    if spec.source == "metrics":
        if not metric:
            raise RuleInvalid("metric", "a metric name is required for this kind (e.g. actor/entropy)")
        if not isinstance(metric, str) or not METRIC_RE.match(metric):
            raise RuleInvalid("metric", "a metric name: letters, digits and _ . / @ : + - (and * ? in a "
                                        "pattern), at most 200 characters")
    else:
        metric = ""
    if threshold is None:
        if kind == "threshold" and op != "not_finite":
            raise RuleInvalid("threshold", "a threshold is required for this kind (but for op not_finite)")
        if kind == "gpu_hours":  # a budget stops runs when spent: never one nobody chose
            raise RuleInvalid("threshold", "a GPU-hour budget needs its threshold (GPU-hours)")
        threshold = spec.threshold
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not math.isfinite(threshold):
        raise RuleInvalid("threshold", "must be a finite number")
    if spec.source != "metrics" and threshold <= 0:
        raise RuleInvalid("threshold", f"must be > 0 ({spec.unit})")
    window = spec.window if window is None else window
    if isinstance(window, bool) or not isinstance(window, int) or not 1 <= window <= MAX_WINDOW:
        raise RuleInvalid("window", f"must be an integer from 1 to {MAX_WINDOW}")
    if kind == "threshold":
        if op not in OPS:
            raise RuleInvalid("op", f"one of {', '.join(OPS)}")
    else:
        op = spec.op
    return metric, float(threshold), window, op


# ------------------------------------------------------------------------------------ evaluation
def metrics_rules(rules: Iterable[RuleSpec]) -> list[RuleSpec]:
    """The rules the ingest evaluates (the others are the reconcile's)."""
    return [r for r in rules if CATALOGUE[r.kind].source == "metrics"]


def evaluate(rules: list[RuleSpec], state: dict[str, Any],
             events: Iterable[tuple[int, dict[str, Any]]]) -> list[Trigger]:
    """Feed `events` ((step, metrics), a batch) to `rules`, updating `state` in place; the triggers, in
    the order they happened. Only metrics rules are evaluated here (engine.evaluate_metrics)."""
    return evaluate_metrics(metrics_rules(rules), state, events)


# -------------------------------------------------------------------- reconcile-side conditions
def heartbeat_silent(*, seconds_since: float | None, threshold_s: float) -> bool:
    """A running run whose last heartbeat (or start) is `seconds_since` ago is silent past the threshold."""
    return seconds_since is not None and seconds_since >= threshold_s


BUDGET_WARN = 0.8


def budget_level(*, used: float, cap: float) -> str:
    """"" below 80% of `cap`, "warn" from 80%, "stop" from 100% (a cap of 0 allows nothing)."""
    if used >= cap:
        return "stop"
    if used >= BUDGET_WARN * cap:
        return "warn"
    return ""


def effective_rules(*, defaults: Iterable[Any], own: Iterable[Any], key: Callable[[Any], tuple]) -> list[Any]:
    """A run's rules: its own, plus its owner's defaults that no own rule of the same key (kind, metric)
    replaces. Disabled rules are dropped after the replacement (so a disabled own rule mutes a default)."""
    own = list(own)
    mine = {key(r) for r in own}
    merged = own + [d for d in defaults if key(d) not in mine]
    return [r for r in merged if getattr(r, "enabled", True)]
