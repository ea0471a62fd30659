"""Rules evaluated as a run's metrics arrive: the ingest hook, and what a firing does.

`evaluate_stored(run=, by_type=)` is registered with telemetry's `on_events_stored` (apps.py): the
ingest calls it inside its transaction once a batch is stored. A batch without metrics events costs
nothing; one with them costs the run's rules (a per-process cache, at most RULES_CACHE_S old, cleared
in this process when a rule changes), one conditional UPDATE of the run's rolling state
(RunAlertState.state, plain SQL, checked against the version this process last committed, `_states`;
a read first only when that cache missed), and the pure evaluation (rules.evaluate): never a query
over the stored metrics. No lock of its own is needed: the ingest holds the run's counter row
(telemetry.ingest_caps.counts_lock) for the whole transaction, so two batches of one run never
evaluate at once, and nothing else writes `state`. A Python fault is logged and the batch is stored
all the same; the state statement is one plain UPDATE of the ingest's transaction (a savepoint around
it cost a third of the hook's CPU, bench/live_alerts.py); firings are written in a savepoint.

A firing is stored with the values that made it (AlertFiring: a marker on the run's charts), tells
the owner (notify: the page header live, e-mail / webhook as the rule says) and, for a rule with
`pause`, stops the run with a checkpoint after the commit.
"""
from __future__ import annotations

import logging
import time
from typing import Any

from django.db import connection, transaction
from django.db.models import Q

from rlstudio.runs.models import Run
from rlstudio.telemetry import codec

from .. import rules as R
from ..models import AlertFiring, AlertRule, NotificationKind, NotificationLevel
from .notify import notify, pause_after_commit

log = logging.getLogger(__name__)
RULES_CACHE_S = 2.0
_cache: dict[int, tuple[float, list[AlertRule]]] = {}
# run id -> (run_rules' list, its metrics rules, their specs)
_specs: dict[int, tuple[list[AlertRule], list[AlertRule], list[R.RuleSpec]]] = {}


def rules_cache_clear() -> None:
    """Forget every cached rule list (a rule changed; other processes see it within RULES_CACHE_S)."""
    _cache.clear()
    _specs.clear()
    _states.clear()


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
        _specs.clear()
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
        rules, specs = _metrics_rules(run)
        if rules:
            _evaluate(run, rules, specs, metrics)
    except Exception:  # a bug here must not lose the batch: it is stored all the same
        log.exception("alerts: rule evaluation of run %s failed; the batch is stored", run.pk)


def _metrics_rules(run: Run) -> tuple[list[AlertRule], list[R.RuleSpec]]:
    """The run's metrics rules and their specs (rebuilt only when run_rules' cached list changes)."""
    rules = run_rules(run)
    hit = _specs.get(run.pk)
    if hit is None or hit[0] is not rules:
        mine = [r for r in rules if R.CATALOGUE[r.kind].source == "metrics"]
        hit = _specs[run.pk] = (rules, mine, [spec(r) for r in mine])
    return hit[1], hit[2]


# A run's rule state as this process last committed it: (version, state). The write below succeeds
# only if the row still has that version, so a state another process (or a rolled-back batch) moved
# on is read again; a hit costs one statement, not a read and a write. A new row's version starts at
# a random number, so a run id used again (a test database) never matches an old entry.
_states: dict[int, tuple[int, dict[str, Any]]] = {}
_READ = "SELECT version, state FROM alerts_runalertstate WHERE run_id = %s"
_UPDATE = ("UPDATE alerts_runalertstate SET state = %s::jsonb, version = version + 1, updated = now() "
           "WHERE run_id = %s AND version = %s RETURNING version")
_INSERT = ("INSERT INTO alerts_runalertstate (run_id, state, flags, version, updated) "
           "VALUES (%s, %s::jsonb, '{}'::jsonb, 1 + floor(random() * 1e15)::bigint, now()) "
           "ON CONFLICT (run_id) DO UPDATE SET "
           "state = EXCLUDED.state, version = alerts_runalertstate.version + 1, updated = now() RETURNING version")


def _read_state(cur, run_id: int) -> tuple[int | None, dict[str, Any]]:
    cur.execute(_READ, [run_id])
    row = cur.fetchone()
    if row is None:
        return None, {}
    raw = row[1]
    state = codec.loads(raw) if isinstance(raw, (str, bytes)) else raw  # Django hands jsonb over as text
    return row[0], state if isinstance(state, dict) else {}


def _evaluate(run: Run, rules: list[AlertRule], specs: list[R.RuleSpec], metrics: list[dict[str, Any]]) -> None:
    """Evaluate the batch on the run's rule state and store the state (see `_states`), then fire."""
    events = [(ev["data"]["step"], ev["data"]["metrics"]) for ev in metrics]
    cached = _states.pop(run.pk, None)
    with connection.cursor() as cur:
        version, state = cached if cached is not None else _read_state(cur, run.pk)
        for attempt in (1, 2):
            triggers = R.evaluate(specs, state, events)
            if version is None:
                cur.execute(_INSERT, [run.pk, codec.dumps(state)])
            else:
                cur.execute(_UPDATE, [codec.dumps(state), run.pk, version])
            row = cur.fetchone()
            if row is not None:
                break
            # Another process moved the state on since this one cached it: read it and evaluate again.
            # (The ingest holds the run's counter row, so no one writes it while this transaction runs.)
            version, state = _read_state(cur, run.pk)
        else:
            raise RuntimeError(f"run {run.pk}: its rule state changed while it was written")
    committed = (row[0], state)
    if len(_states) > 10_000:
        _states.clear()
    transaction.on_commit(lambda: _states.__setitem__(run.pk, committed))
    if triggers:
        by_id = {r.pk: r for r in rules}
        with transaction.atomic():  # firings write through the ORM: a fault there rolls back only them
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
