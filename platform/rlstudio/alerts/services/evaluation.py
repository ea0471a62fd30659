"""Rules evaluated as a run's metrics arrive: the ingest hook, and what a firing does.

`evaluate_stored(run=, by_type=)` is registered with telemetry's `on_events_stored` (apps.py): the
ingest calls it inside its transaction once a batch is stored. A batch without metrics events costs
nothing; one with them costs the run's rules (a per-process cache, at most RULES_CACHE_S old, cleared
in this process when a rule changes), one locked read and one write of the run's rolling state
(RunAlertState), and the pure evaluation (rules.evaluate): never a query over the stored metrics.
It runs in a savepoint and logs its own errors, so a fault here never fails an ingest.

A firing is stored with the values that made it (AlertFiring: a marker on the run's charts), tells
the owner (notify: the page header live, e-mail / webhook as the rule says) and, for a rule with
`pause`, stops the run with a checkpoint after the commit.
"""
from __future__ import annotations

import logging
import time
from typing import Any

from django.db import transaction
from django.db.models import Q

from rlstudio.runs.models import Run

from .. import rules as R
from ..models import AlertFiring, AlertRule, NotificationKind, NotificationLevel, RunAlertState
from .notify import notify, pause_after_commit

log = logging.getLogger(__name__)
RULES_CACHE_S = 2.0
_cache: dict[int, tuple[float, list[AlertRule]]] = {}


def rules_cache_clear() -> None:
    """Forget every cached rule list (a rule changed; other processes see it within RULES_CACHE_S)."""
    _cache.clear()


def run_rules(run: Run, *, cached: bool = True) -> list[AlertRule]:
    """The rules that apply to `run`: its own and its owner's defaults not replaced by one of its own
    (same kind and metric), enabled ones only (rules.effective_rules)."""
    now = time.monotonic()
    hit = _cache.get(run.pk) if cached else None
    if hit is not None and hit[0] > now:
        return hit[1]
    rows = list(AlertRule.objects.filter(Q(run=run) | Q(run__isnull=True), owner_id=run.owner_id)
                .select_related("webhook").order_by("id"))
    rules = R.effective_rules(defaults=[r for r in rows if r.run_id is None], own=[r for r in rows if r.run_id],
                              key=lambda r: (r.kind, r.metric))
    if len(_cache) > 10_000:
        _cache.clear()
    _cache[run.pk] = (now + RULES_CACHE_S, rules)
    return rules


def spec(rule: AlertRule) -> R.RuleSpec:
    return R.RuleSpec(id=rule.pk, kind=rule.kind, metric=rule.metric, threshold=rule.threshold,
                      window=rule.window, op=rule.op)


def evaluate_stored(*, run: Run, by_type: dict[str, list[dict[str, Any]]]) -> None:
    """The ingest hook (see the module docstring)."""
    metrics = by_type.get("metrics")
    if not metrics:
        return
    try:
        rules = [r for r in run_rules(run) if R.CATALOGUE[r.kind].source == "metrics"]
        if not rules:
            return
        with transaction.atomic():
            _evaluate(run, rules, metrics)
    except Exception:
        log.exception("alerts: rule evaluation of run %s failed; the batch is stored", run.pk)


def _evaluate(run: Run, rules: list[AlertRule], metrics: list[dict[str, Any]]) -> None:
    row = RunAlertState.objects.select_for_update().filter(run_id=run.pk).first()
    if row is None:
        row = RunAlertState.objects.create(run_id=run.pk)
    state = row.state or {}
    events = sorted(((ev["data"]["step"], ev["data"]["metrics"]) for ev in metrics), key=lambda e: e[0])
    by_id = {r.pk: r for r in rules}
    triggers = R.evaluate([spec(r) for r in rules], state, events)
    RunAlertState.objects.filter(run_id=run.pk).update(state=state)
    for trigger in triggers:
        fire(run=run, rule=by_id[trigger.rule_id], trigger=trigger)


def fire(*, run: Run, rule: AlertRule, trigger: R.Trigger) -> AlertFiring:
    """Store a firing, tell the owner, and pause the run when the rule says so (after the commit)."""
    firing = AlertFiring.objects.create(run=run, rule=rule, kind=trigger.kind, metric=trigger.metric,
                                        step=trigger.step, values=trigger.values, message=trigger.message)
    title = f"{R.CATALOGUE[rule.kind].title} on run “{run.name}” at step {trigger.step}"
    body = trigger.message
    if rule.pause:
        title = f"Pausing run “{run.name}”: {R.CATALOGUE[rule.kind].title.lower()} at step {trigger.step}"
        body += "\nThe run is being stopped with a checkpoint; resume it from its page."
    level = NotificationLevel.CRITICAL if rule.pause else NotificationLevel.WARNING
    notify(user=run.owner, run=run, kind=NotificationKind.ALERT, event=rule.kind, title=title, body=body,
           level=level, email=rule.email, webhook=rule.webhook, firing=firing)
    if rule.pause:
        pause_after_commit(run_id=run.pk, firing_id=firing.pk, reason=f"rule {rule.pk} ({rule.kind})")
    return firing
