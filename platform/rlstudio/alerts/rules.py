"""The catalogue of alert rules and their evaluation: pure functions, no Django, no database.

A rule watches one run's metrics (verl's names, as the trainer reports them) and says when a run is
sick. `evaluate(rules, state, events)` takes the rules that apply to a run, the run's rolling state
(a small JSON-able dict kept between ingest batches) and the batch's metrics events in step order,
updates the state in place and returns a `Trigger` for each rule whose condition *became* true
(edge-triggered: a rule fires once, then again only after its condition was false at a later step).

Rolling state: `{"h": {metric: [[step, value], ...]}, "on": [rule ids whose condition holds],
"vh": {rule id: [[step, held-out, train], ...]}}`. A metric's history holds only what the rules on
it need (their window plus a few steps), so a batch costs a few list operations per rule, never a
query over the stored metrics. A non-finite metric value arrives as None (trainer/events.py).

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

import fnmatch
import math
import re
from dataclasses import dataclass, field
from statistics import median
from typing import Any, Callable, Iterable

TRAIN_REWARD = "critic/score/mean"
SMOOTH = 3  # steps in the trailing mean of reward_collapse and reward_hacking's train reward
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
    Kind("reward_hacking", "Held-out reward falls while train reward rises", "val-core/*/reward/mean@*", 0.05, 5,
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


@dataclass(frozen=True)
class RuleSpec:
    """What one rule says, as the evaluator reads it (`id` is the stored rule's id)."""

    id: int
    kind: str
    metric: str
    threshold: float
    window: int
    op: str = ""


@dataclass(frozen=True)
class Trigger:
    """A rule whose condition became true at `step`: the values that made it, and one sentence."""

    rule_id: int
    kind: str
    step: int
    metric: str
    values: dict[str, Any] = field(default_factory=dict)
    message: str = ""


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


# ------------------------------------------------------------------------------------------ state
def _is_pattern(metric: str) -> bool:
    return "*" in metric or "?" in metric


def metric_value(metric: str, metrics: dict[str, Any]) -> tuple[bool, float | None]:
    """(present, value) of `metric` in one metrics event: a name is looked up; a pattern is the mean
    of the finite values of the keys it matches (None when one of them is not finite)."""
    if not _is_pattern(metric):
        if metric not in metrics:
            return False, None
        value = metrics[metric]
        return True, (float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None)
    values = [v for k, v in metrics.items() if fnmatch.fnmatchcase(k, metric)]
    if not values:
        return False, None
    if any(not isinstance(v, (int, float)) or isinstance(v, bool) for v in values):
        return True, None
    return True, sum(values) / len(values)


def _keep(rule: RuleSpec) -> int:
    """How many points of its metric's history a rule needs."""
    return rule.window + SMOOTH + 1


def _push(history: list[list], step: int, value: float | None, keep: int) -> None:
    """Append (step, value), replacing the last point when it is the same step (a merged metrics event)."""
    if history and history[-1][0] == step:
        history[-1][1] = value
    else:
        history.append([step, value])
    if len(history) > keep:
        del history[: len(history) - keep]


def _trailing_mean(values: list[float], n: int) -> float | None:
    return sum(values[-n:]) / n if len(values) >= n else None


# ------------------------------------------------------------------------------------ conditions
def _cmp(op: str, value: float | None, threshold: float) -> bool:
    if op == "not_finite":
        return value is None
    if value is None:
        return False
    return {">": value > threshold, ">=": value >= threshold, "<": value < threshold,
            "<=": value <= threshold}[op]


def _streak(rule: RuleSpec, points: list[list]) -> Trigger | None:
    """`op threshold` on each of the last `window` points."""
    last = points[-rule.window:]
    if len(last) < rule.window or not all(_cmp(rule.op, v, rule.threshold) for _, v in last):
        return None
    now = last[-1][1]
    shown = "not finite" if now is None else f"{now:.4g}"
    cond = "not finite" if rule.op == "not_finite" else f"{rule.op} {rule.threshold:g}"
    span = f" for {rule.window} steps" if rule.window > 1 else ""
    return Trigger(rule.id, rule.kind, last[-1][0], rule.metric,
                   {rule.metric: now, "window": [v for _, v in last], "threshold": rule.threshold},
                   f"{rule.metric} {shown} ({cond}{span})")


def _reward_collapse(rule: RuleSpec, points: list[list]) -> Trigger | None:
    values = [v for _, v in points if v is not None]
    if len(values) < SMOOTH + 1:
        return None
    means = [sum(values[i - SMOOTH:i]) / SMOOTH for i in range(SMOOTH, len(values) + 1)]
    best, now = max(means[-rule.window:]), means[-1]
    if best - now < rule.threshold:
        return None
    return Trigger(rule.id, rule.kind, points[-1][0], rule.metric,
                   {rule.metric: values[-1], "mean_3": now, "best_mean_3": best, "threshold": rule.threshold},
                   f"{rule.metric} collapsed: 3-step mean {now:.4g}, {best - now:.4g} below its best "
                   f"{best:.4g} of the last {rule.window} steps")


def _relative_to_median(rule: RuleSpec, points: list[list], *, spike: bool) -> Trigger | None:
    step, now = points[-1]
    if spike and now is None:
        return Trigger(rule.id, rule.kind, step, rule.metric, {rule.metric: None},
                       f"{rule.metric} is not finite (NaN or inf)")
    before = [v for _, v in points[-rule.window - 1:-1] if v is not None]
    if now is None or len(before) < (5 if spike else 3):
        return None
    med = median(before)
    if spike:
        if med <= 0 or now <= rule.threshold * med:
            return None
        text = f"{rule.metric} {now:.4g} is {now / med:.1f}x the median {med:.4g} of the previous {len(before)} steps"
    else:
        if med <= 0 or now >= (1.0 - rule.threshold) * med:
            return None
        text = (f"{rule.metric} {now:.4g} fell {100 * (1 - now / med):.0f}% below the median {med:.4g} "
                f"of the previous {len(before)} steps")
    return Trigger(rule.id, rule.kind, step, rule.metric,
                   {rule.metric: now, "median": med, "threshold": rule.threshold}, text)


def _reward_hacking(rule: RuleSpec, points: list[list]) -> Trigger | None:
    """`points` here are [step, held-out, train 3-step mean] validation points."""
    if len(points) < 2:
        return None
    step, val, train = points[-1]
    earlier = [p for p in points[-rule.window - 1:-1] if p[1] is not None and p[2] is not None]
    if val is None or train is None or not earlier:
        return None
    peak = max(earlier, key=lambda p: p[1])
    if peak[1] - val < rule.threshold or train <= peak[2]:
        return None
    return Trigger(rule.id, rule.kind, step, rule.metric,
                   {rule.metric: val, "best_heldout": peak[1], "best_step": peak[0], TRAIN_REWARD: train,
                    "train_at_best": peak[2], "threshold": rule.threshold},
                   f"held-out reward {val:.4g} fell {peak[1] - val:.4g} below its best {peak[1]:.4g} (step "
                   f"{peak[0]}) while the train reward rose {peak[2]:.4g} -> {train:.4g}")


CONDITIONS: dict[str, Callable[[RuleSpec, list[list]], Trigger | None]] = {
    "reward_collapse": _reward_collapse,
    "entropy_collapse": _streak,
    "kl_high": _streak,
    "grad_norm_spike": lambda r, p: _relative_to_median(r, p, spike=True),
    "clip_frac_high": _streak,
    "length_limit": _streak,
    "zero_adv_groups": _streak,
    "throughput_drop": lambda r, p: _relative_to_median(r, p, spike=False),
    "threshold": _streak,
}


# ------------------------------------------------------------------------------------ evaluation
def metrics_rules(rules: Iterable[RuleSpec]) -> list[RuleSpec]:
    """The rules the ingest evaluates (the others are the reconcile's)."""
    return [r for r in rules if CATALOGUE[r.kind].source == "metrics"]


def evaluate(rules: list[RuleSpec], state: dict[str, Any],
             events: Iterable[tuple[int, dict[str, Any]]]) -> list[Trigger]:
    """Feed `events` ((step, metrics) in step order) to `rules`, updating `state` in place; the
    triggers, in the order they happened. Only metrics rules are evaluated here."""
    rules = metrics_rules(rules)
    if not rules:
        return []
    history: dict[str, list[list]] = state.setdefault("h", {})
    val_history: dict[str, list[list]] = state.setdefault("vh", {})
    on: set[int] = set(state.get("on", ()))
    keep: dict[str, int] = {}
    for rule in rules:
        keep[rule.metric] = max(keep.get(rule.metric, 0), _keep(rule))
        if rule.kind == "reward_hacking":
            keep[TRAIN_REWARD] = max(keep.get(TRAIN_REWARD, 0), SMOOTH + 1)
    fired: list[Trigger] = []
    for step, metrics in events:
        seen: set[str] = set()
        for metric, n in keep.items():
            present, value = metric_value(metric, metrics)
            if present:
                _push(history.setdefault(metric, []), step, value, n)
                seen.add(metric)
        if not seen:
            continue
        for rule in rules:
            if rule.metric not in seen:
                continue
            if rule.kind == "reward_hacking":
                train = _trailing_mean([v for _, v in history.get(TRAIN_REWARD, []) if v is not None], SMOOTH)
                points = val_history.setdefault(str(rule.id), [])
                _push(points, step, history[rule.metric][-1][1], rule.window + 1)
                points[-1] = [step, points[-1][1], train]
                trigger = _reward_hacking(rule, points)
            else:
                trigger = CONDITIONS[rule.kind](rule, history[rule.metric])
            if trigger is None:
                on.discard(rule.id)
            elif rule.id not in on:
                on.add(rule.id)
                fired.append(trigger)
    _forget_unused(state, rules)
    state["on"] = sorted(on)
    return fired


def _forget_unused(state: dict[str, Any], rules: list[RuleSpec]) -> None:
    """Drop the history of metrics no rule reads any more (a rule was deleted or changed)."""
    metrics = {r.metric for r in rules} | ({TRAIN_REWARD} if any(r.kind == "reward_hacking" for r in rules) else set())
    for key in [k for k in state.get("h", {}) if k not in metrics]:
        del state["h"][key]
    ids = {str(r.id) for r in rules if r.kind == "reward_hacking"}
    for key in [k for k in state.get("vh", {}) if k not in ids]:
        del state["vh"][key]


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
