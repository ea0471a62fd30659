"""The evaluation of metrics rules over a batch of steps: pure Python, no Django (rules.evaluate is
the entry point; rules.py holds the catalogue).

A batch is walked metric by metric, not event by event: each metric a rule reads gets its new points
(one list comprehension over the batch), appended to its history once; then each rule walks its
metric's new points with the state it needs carried along (a streak's length, a running 3-step sum),
so a point costs a comparison or two for most rules, not a slice of the window. The ingest sees
about one metrics event per training step, but a busy platform (or the benchmark) brings thousands a
second, and this runs inside the ingest's transaction (bench/live_alerts.py measures it).

History: `state["h"][metric]` = [steps, values] (two columns: no list per point), the last points
the rules on it need; a step already there (metrics of one step merged from two events) is replaced,
not appended.
"""
from __future__ import annotations

import fnmatch
from bisect import bisect_left, insort
from dataclasses import dataclass, field
from typing import Any, Iterable

TRAIN_REWARD = "critic/score/mean"
SMOOTH = 3  # steps in the trailing mean of reward_collapse and reward_hacking's train reward
STREAK_KINDS = frozenset({"entropy_collapse", "kl_high", "clip_frac_high", "length_limit", "zero_adv_groups",
                          "threshold"})


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


# ------------------------------------------------------------------------------------ values
_MISSING = object()
# (pattern, an event's keys) -> the keys it matches: a run reports the same keys step after step, so a
# pattern is matched against a key set once, not per event.
_matches: dict[tuple[str, tuple[str, ...]], tuple[str, ...]] = {}


def is_pattern(metric: str) -> bool:
    return "*" in metric or "?" in metric


def number(value: Any) -> float | None:
    """A metric value as a float; None for null (a non-finite value) or anything not a number."""
    if type(value) is float:
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def _matching(metric: str, keys: tuple[str, ...]) -> tuple[str, ...]:
    hit = _matches.get((metric, keys))
    if hit is None:
        if len(_matches) > 4096:
            _matches.clear()
        hit = _matches[(metric, keys)] = tuple(k for k in keys if fnmatch.fnmatchcase(k, metric))
    return hit


def metric_value(metric: str, metrics: dict[str, Any]) -> tuple[bool, float | None]:
    """(present, value) of `metric` in one metrics event: a name is looked up; a pattern is the mean
    of the values of the keys it matches (None when one of them is not finite)."""
    if not is_pattern(metric):
        value = metrics.get(metric, _MISSING)
        return (False, None) if value is _MISSING else (True, number(value))
    matched = _matching(metric, tuple(metrics))
    if not matched:
        return False, None
    values = [number(metrics[k]) for k in matched]
    if any(v is None for v in values):
        return True, None
    return True, sum(values) / len(values)


def _cmp(op: str, value: float | None, threshold: float) -> bool:
    if value is None:
        return op == "not_finite"
    if op == ">":
        return value > threshold
    if op == "<":
        return value < threshold
    if op == ">=":
        return value >= threshold
    if op == "<=":
        return value <= threshold
    return False


# ---------------------------------------------------------------------------- rule walkers
# Each walker takes the rule, its metric's history as two columns (steps, values: the kept history
# followed by the batch's new points), the index of the first new point and whether the rule's
# condition held before it (`on`); it returns the triggers of the new points where the condition
# became true (edge-triggered) and whether it holds after the last one. A point where the condition
# cannot be told yet (too little history) turns it off.

def _holds(op: str, values: list[float | None], thr: float) -> list[bool]:
    """`value op thr` for each value, in one comprehension per op (the walk's hot loop)."""
    if op == ">":
        return [v is not None and v > thr for v in values]
    if op == "<":
        return [v is not None and v < thr for v in values]
    if op == ">=":
        return [v is not None and v >= thr for v in values]
    if op == "<=":
        return [v is not None and v <= thr for v in values]
    return [_cmp(op, v, thr) for v in values]


Walk = tuple[list[Trigger], bool]


def _walk_streak(rule: RuleSpec, steps: list[int], values: list, start: int, on: bool) -> Walk:
    op, thr, window = rule.op, rule.threshold, rule.window
    first = max(start - window, 0)
    holds = _holds(op, values[first:], thr)
    if not any(holds[start - first:]):  # the usual case: nothing holds, nothing to walk
        return [], False
    streak = 0
    for ok in reversed(holds[:start - first]):  # the streak the history ends with
        if not ok:
            break
        streak += 1
    fired = []
    for j, ok in enumerate(holds[start - first:], start):
        if not ok:
            streak, on = 0, False
            continue
        streak += 1
        if streak < window:
            on = False
        elif not on:
            on = True
            last = values[j - window + 1:j + 1]
            now = last[-1]
            shown = "not finite" if now is None else f"{now:.4g}"
            cond = "not finite" if op == "not_finite" else f"{op} {thr:g}"
            span = f" for {window} steps" if window > 1 else ""
            fired.append(Trigger(rule.id, rule.kind, steps[j], rule.metric,
                                 {rule.metric: now, "window": last, "threshold": thr},
                                 f"{rule.metric} {shown} ({cond}{span})"))
    return fired, on


def _walk_collapse(rule: RuleSpec, steps: list[int], values: list, start: int, on: bool) -> Walk:
    finite = [(j, v) for j, v in enumerate(values) if v is not None]
    # 3-step sums of the finite values: sums[i] ends at finite[i + SMOOTH - 1]
    sums = [finite[i][1] + finite[i + 1][1] + finite[i + 2][1] for i in range(len(finite) - 2)] if SMOOTH == 3 \
        else [sum(v for _, v in finite[i:i + SMOOTH]) for i in range(len(finite) - SMOOTH + 1)]
    fired = []
    for n, (j, v) in enumerate(finite, 1):  # n finite values up to and including this one
        if j < start:
            continue
        if n < SMOOTH + 1:
            on = False
            continue
        upto = n - SMOOTH + 1  # sums[:upto] end at or before this point
        best, now = max(sums[max(upto - rule.window, 0):upto]) / SMOOTH, sums[upto - 1] / SMOOTH
        if best - now < rule.threshold:
            on = False
        elif not on:
            on = True
            fired.append(Trigger(rule.id, rule.kind, steps[j], rule.metric,
                                 {rule.metric: v, "mean_3": now, "best_mean_3": best, "threshold": rule.threshold},
                                 f"{rule.metric} collapsed: 3-step mean {now:.4g}, {best - now:.4g} below its best "
                                 f"{best:.4g} of the last {rule.window} steps"))
    return fired, on


def _walk_median(rule: RuleSpec, steps: list[int], values: list, start: int, on: bool, *, spike: bool) -> Walk:
    """The previous `window` points' finite values are kept sorted (bisect), so each point's median is
    an index, not a sort."""
    thr, window = rule.threshold, rule.window
    win = sorted(v for v in values[max(start - window, 0):start] if v is not None)
    need = 5 if spike else 3
    fired = []
    for j in range(start, len(values)):
        now = values[j]
        if spike and now is None:
            if not on:
                fired.append(Trigger(rule.id, rule.kind, steps[j], rule.metric, {rule.metric: None},
                                     f"{rule.metric} is not finite (NaN or inf)"))
            on = True
        elif now is None or len(win) < need:
            on = False
        else:
            n = len(win)
            med = win[n // 2] if n % 2 else (win[n // 2 - 1] + win[n // 2]) / 2
            holds = med > 0 and (now > thr * med if spike else now < (1.0 - thr) * med)
            if not holds:
                on = False
            elif not on:
                on = True
                if spike:
                    text = (f"{rule.metric} {now:.4g} is {now / med:.1f}x the median {med:.4g} of the previous "
                            f"{n} steps")
                else:
                    text = (f"{rule.metric} {now:.4g} fell {100 * (1 - now / med):.0f}% below the median "
                            f"{med:.4g} of the previous {n} steps")
                fired.append(Trigger(rule.id, rule.kind, steps[j], rule.metric,
                                     {rule.metric: now, "median": med, "threshold": thr}, text))
        if now is not None:
            insort(win, now)
        if j - window >= 0:  # the point leaving the window
            gone = values[j - window]
            if gone is not None:
                del win[bisect_left(win, gone)]
    return fired, on


def _train_at(train: list[list], step: int) -> float | None:
    """The train reward's 3-step mean at `step` (its last SMOOTH finite values up to that step);
    `train` is its history's [steps, values]."""
    vals = []
    for s, v in zip(reversed(train[0]), reversed(train[1])):
        if s <= step and v is not None:
            vals.append(v)
            if len(vals) == SMOOTH:
                return sum(vals) / SMOOTH
    return None


def _walk_hacking(rule: RuleSpec, steps: list[int], values: list, start: int, on: bool, vh: list[list],
                  train: list[list]) -> Walk:
    """`vh`: this rule's validation points [[step, held-out, train mean]], extended here."""
    fired = []
    for j in range(start, len(values)):
        step, val = steps[j], values[j]
        point = [step, val, _train_at(train, step)]
        if vh and vh[-1][0] == step:
            vh[-1] = point
        else:
            vh.append(point)
        del vh[:-(rule.window + 1)]
        earlier = [p for p in vh[:-1] if p[1] is not None and p[2] is not None]
        if val is None or point[2] is None or not earlier:
            on = False
            continue
        peak = max(earlier, key=lambda p: p[1])
        if peak[1] - val < rule.threshold or point[2] <= peak[2]:
            on = False
        elif not on:
            on = True
            fired.append(Trigger(rule.id, rule.kind, step, rule.metric,
                                 {rule.metric: val, "best_heldout": peak[1], "best_step": peak[0],
                                  TRAIN_REWARD: point[2], "train_at_best": peak[2], "threshold": rule.threshold},
                                 f"held-out reward {val:.4g} fell {peak[1] - val:.4g} below its best {peak[1]:.4g} "
                                 f"(step {peak[0]}) while the train reward rose {peak[2]:.4g} -> {point[2]:.4g}"))
    return fired, on


def _keep(rule: RuleSpec) -> int:
    """How many points of its metric's history a rule needs."""
    return rule.window + SMOOTH + 1


# ---------------------------------------------------------------------------------- the batch
def _merged_steps(events: Iterable[tuple[int, dict[str, Any]]]) -> list[tuple[int, dict[str, Any]]]:
    """The events in step order, one per step (a step's metrics from several events merged)."""
    events = list(events)
    steps = [e[0] for e in events]
    if all(a < b for a, b in zip(steps, steps[1:])):  # the usual batch: nothing to sort or merge
        return events
    out: list[tuple[int, dict[str, Any]]] = []
    for step, metrics in sorted(events, key=lambda e: e[0]):
        if out and out[-1][0] == step:
            out[-1] = (step, {**out[-1][1], **metrics})
        else:
            out.append((step, metrics))
    return out


def _new_points(metric: str, batch: list[tuple[int, dict[str, Any]]], batch_steps: list[int],
                key_sets: list[tuple[str, ...]] | None) -> tuple[list[int], list]:
    """The batch's (steps, values) of one metric (a name, or a pattern's mean). Values are what the
    ingest validated (trainer.events: finite numbers or None), used as they are."""
    if key_sets is not None and is_pattern(metric):
        distinct = {id(keys): keys for keys in key_sets}  # key_sets holds one tuple per distinct set
        matched_in = {i: _matching(metric, keys) for i, keys in distinct.items()}
        steps, values = [], []
        for (s, m), keys in zip(batch, key_sets):
            matched = matched_in[id(keys)]
            if matched:
                vals = [m[k] for k in matched]
                steps.append(s)
                values.append(None if None in vals else sum(vals) / len(vals))
        return steps, values
    values = [m.get(metric, _MISSING) for _, m in batch]
    if _MISSING in values:  # the metric is absent from some steps
        pairs = [(s, v) for s, v in zip(batch_steps, values) if v is not _MISSING]
        return [s for s, _ in pairs], [v for _, v in pairs]
    return batch_steps, values


def evaluate_metrics(rules: list[RuleSpec], state: dict[str, Any],
                     events: Iterable[tuple[int, dict[str, Any]]]) -> list[Trigger]:
    """Feed a batch of (step, metrics) to metrics `rules`, updating `state` in place; the triggers in
    the order they happened (rules.evaluate's docstring says what fires when)."""
    if not rules:
        return []
    batch = _merged_steps(events)
    batch_steps = [s for s, _ in batch]
    history: dict[str, list[list]] = state.setdefault("h", {})  # metric -> [steps, values]
    val_history: dict[str, list[list]] = state.setdefault("vh", {})
    on: set[int] = set(state.get("on", ()))
    keep: dict[str, int] = {}
    for rule in rules:
        keep[rule.metric] = max(keep.get(rule.metric, 0), _keep(rule))
        if rule.kind == "reward_hacking":
            keep[TRAIN_REWARD] = max(keep.get(TRAIN_REWARD, 0), SMOOTH + 1)
    key_sets = None
    if any(is_pattern(m) for m in keep):  # each event's key set hashed once, matched once per pattern
        sets: dict[tuple[str, ...], tuple[str, ...]] = {}
        key_sets = [sets.setdefault(keys, keys) for keys in (tuple(m) for _, m in batch)]
    starts: dict[str, int] = {}  # metric -> index of its first new point in its history
    for metric in keep:
        steps, values = _new_points(metric, batch, batch_steps, key_sets)
        if not steps:
            continue
        col = history.get(metric)
        if not (isinstance(col, list) and len(col) == 2):  # none yet (or an older state's layout)
            col = history[metric] = [[], []]
        while col[0] and col[0][-1] >= steps[0]:  # a step seen already: its point is replaced
            col[0].pop()
            col[1].pop()
        starts[metric] = len(col[0])
        col[0].extend(steps)
        col[1].extend(values)
    found: list[tuple[int, int, Trigger]] = []
    for order, rule in enumerate(rules):
        start = starts.get(rule.metric)
        if start is None:
            continue
        (steps, values), was_on = history[rule.metric], rule.id in on
        if rule.kind in STREAK_KINDS:
            fired, now_on = _walk_streak(rule, steps, values, start, was_on)
        elif rule.kind == "reward_collapse":
            fired, now_on = _walk_collapse(rule, steps, values, start, was_on)
        elif rule.kind in ("grad_norm_spike", "throughput_drop"):
            fired, now_on = _walk_median(rule, steps, values, start, was_on, spike=rule.kind == "grad_norm_spike")
        elif rule.kind == "reward_hacking":
            fired, now_on = _walk_hacking(rule, steps, values, start, was_on,
                                          val_history.setdefault(str(rule.id), []),
                                          history.get(TRAIN_REWARD, [[], []]))
        else:
            raise ValueError(f"rule {rule.id}: kind {rule.kind!r} is not a metrics rule")
        (on.add if now_on else on.discard)(rule.id)
        found += [(t.step, order, t) for t in fired]
    for metric, n in keep.items():  # trim once per batch, to what the rules need
        col = history.get(metric)
        if col is not None and len(col[0]) > n:
            del col[0][:-n]
            del col[1][:-n]
    _forget_unused(state, rules)
    state["on"] = sorted(on)
    found.sort(key=lambda f: (f[0], f[1]))
    return [t for _, _, t in found]


def _forget_unused(state: dict[str, Any], rules: list[RuleSpec]) -> None:
    """Drop the history of metrics no rule reads any more (a rule was deleted or changed)."""
    metrics = {r.metric for r in rules} | ({TRAIN_REWARD} if any(r.kind == "reward_hacking" for r in rules) else set())
    for key in [k for k in state.get("h", {}) if k not in metrics]:
        del state["h"][key]
    ids = {str(r.id) for r in rules if r.kind == "reward_hacking"}
    for key in [k for k in state.get("vh", {}) if k not in ids]:
        del state["vh"][key]
