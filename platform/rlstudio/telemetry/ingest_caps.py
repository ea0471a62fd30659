"""Per-run caps of the ingest: how much one run may store in all (docs/live.md, "Per-run caps").

  RLSTUDIO_RUN_MAX_EVENTS       RunEvents of any type
  RLSTUDIO_RUN_MAX_SAMPLES      sample events (each a rollout-dump line and, under retention, a Sample)
  RLSTUDIO_RUN_MAX_METRIC_ROWS  MetricRows, i.e. steps with metrics (metrics of a stored step still merge)

They are checked against the run's `RunIngestCount` row, never by counting rows: `counts_lock` locks
that row inside the ingest's transaction (two POSTs of one run are serialized there), `caps_plan`
decides what the batch may store, and `counts_add` adds what was stored. Past the events cap the
control events (status, heartbeat, checkpoint) are still applied to the run, without being stored,
so a run at its cap still finishes, stays alive for the reconcile and keeps its resume point; every
other event past a cap is refused with a reason naming the cap. The first refusal by a cap is audited
(`run.ingest_cap`) once per cap and limit.

Only `rlstudio.telemetry.services.events_ingest` calls these.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import connection

from rlstudio.accounts.services import audit_record
from rlstudio.runs.models import Run

from .models import RunIngestCount

log = logging.getLogger(__name__)

# The sorted names of every metric of run {run}'s stored rows, as a jsonb array (sorted by code point,
# as Python sorts: "C" collation on UTF-8). Also the backfill of migration 0009.
METRIC_NAMES_SQL = ("(SELECT COALESCE(jsonb_agg(k ORDER BY k COLLATE \"C\"), '[]'::jsonb) FROM (SELECT DISTINCT "
                    "jsonb_object_keys(m.metrics) AS k FROM telemetry_metricrow m WHERE m.run_id = {run}) names)")

# Applied to the run past the events cap (not stored): what the run's state needs from its trainer.
CONTROL_TYPES = frozenset({"status", "heartbeat", "checkpoint"})
CAP_SETTINGS = {"events": "RLSTUDIO_RUN_MAX_EVENTS", "samples": "RLSTUDIO_RUN_MAX_SAMPLES",
                "metric_rows": "RLSTUDIO_RUN_MAX_METRIC_ROWS"}
_AFTER = {"events": "only status, heartbeat and checkpoint events are taken from now on (applied, not stored)",
          "samples": "further samples are refused",
          "metric_rows": "metrics of a new step are refused (steps already stored still take metrics)"}
_WHAT = {"events": "stored events", "samples": "samples", "metric_rows": "metric rows (steps)"}


def cap_limits() -> dict[str, int]:
    return {cap: int(getattr(settings, name)) for cap, name in CAP_SETTINGS.items()}


def cap_message(*, run_id: int, cap: str, limit: int) -> str:
    """The sentence that says a cap refused something (the answer's `caps` and each refusal)."""
    return f"run {run_id} reached its cap of {limit} {_WHAT[cap]} ({CAP_SETTINGS[cap]}); {_AFTER[cap]}"


@dataclass
class CapPlan:
    """What a batch may do: `store` (as before), `apply_only` (control events past the events cap),
    `refused` ((event, cap) pairs), and the caps that refused something with their limits."""

    store: list[dict[str, Any]]
    apply_only: list[dict[str, Any]] = field(default_factory=list)
    refused: list[tuple[dict[str, Any], str]] = field(default_factory=list)
    reached: dict[str, int] = field(default_factory=dict)


def counts_lock(*, run_id: int) -> RunIngestCount:
    """The run's counter row, locked until the transaction ends (inside one).

    The first batch of a run creates it from a count of what is already stored (a run older than the
    counters); concurrent first batches meet at the primary key and the loser then waits for the lock."""
    row = RunIngestCount.objects.select_for_update().filter(run_id=run_id).first()
    if row is not None:
        return row
    sql = ("INSERT INTO telemetry_runingestcount (run_id, events, samples, metric_rows, caps_reached, metric_names) "
           "SELECT %s, (SELECT count(*) FROM telemetry_runevent WHERE run_id = %s), "
           "(SELECT count(*) FROM telemetry_runevent WHERE run_id = %s AND type = 'sample'), "
           "(SELECT count(*) FROM telemetry_metricrow WHERE run_id = %s), '{}'::jsonb, "
           f"{METRIC_NAMES_SQL.format(run='%s')} "
           "ON CONFLICT (run_id) DO NOTHING RETURNING events, samples, metric_rows, metric_names")
    with connection.cursor() as cur:
        cur.execute(sql, [run_id] * 5)
        created = cur.fetchone()
    if created is not None:  # ours, and locked by our INSERT until commit
        names = created[3] if isinstance(created[3], list) else json.loads(created[3])
        return RunIngestCount(run_id=run_id, events=created[0], samples=created[1], metric_rows=created[2],
                              caps_reached={}, metric_names=names)
    return RunIngestCount.objects.select_for_update().get(run_id=run_id)


def _stored_seqs(run_id: int, seqs: list[int]) -> set[int]:
    with connection.cursor() as cur:
        cur.execute("SELECT seq FROM telemetry_runevent WHERE run_id = %s AND seq = ANY(%s::bigint[])", [run_id, seqs])
        return {row[0] for row in cur.fetchall()}


def _stored_steps(run_id: int, steps: list[int]) -> set[int]:
    if not steps:
        return set()
    with connection.cursor() as cur:
        cur.execute("SELECT step FROM telemetry_metricrow WHERE run_id = %s AND step = ANY(%s::integer[])",
                    [run_id, steps])
        return {row[0] for row in cur.fetchall()}


def caps_plan(*, run_id: int, counts: RunIngestCount, events: list[dict[str, Any]]) -> CapPlan:
    """Split a valid batch (seq order) by the caps. No query while the batch fits even if every event
    in it were new; near a cap, two indexed lookups tell new events and new steps from stored ones,
    and the caps fill in seq order."""
    limits = cap_limits()
    n_samples = sum(1 for ev in events if ev["type"] == "sample")
    steps = {ev["data"]["step"] for ev in events if ev["type"] == "metrics"}
    if (counts.events + len(events) <= limits["events"] and counts.samples + n_samples <= limits["samples"]
            and counts.metric_rows + len(steps) <= limits["metric_rows"]):
        return CapPlan(store=events)
    stored = _stored_seqs(run_id, [ev["seq"] for ev in events])
    known_steps = _stored_steps(run_id, sorted(steps))
    n_events, n_samples, n_rows = counts.events, counts.samples, counts.metric_rows
    plan = CapPlan(store=[])

    def refuse(ev: dict[str, Any], cap: str) -> None:
        plan.refused.append((ev, cap))
        plan.reached[cap] = limits[cap]

    for ev in events:
        kind = ev["type"]
        if ev["seq"] in stored:  # a resend: the insert skips it and counts it as a duplicate
            plan.store.append(ev)
        elif n_events >= limits["events"]:
            if kind in CONTROL_TYPES:
                plan.apply_only.append(ev)
            else:
                refuse(ev, "events")
        elif kind == "sample" and n_samples >= limits["samples"]:
            refuse(ev, "samples")
        elif kind == "metrics" and ev["data"]["step"] not in known_steps and n_rows >= limits["metric_rows"]:
            refuse(ev, "metric_rows")
        else:
            if kind == "metrics" and ev["data"]["step"] not in known_steps:
                known_steps.add(ev["data"]["step"])
                n_rows += 1
            n_samples += kind == "sample"
            n_events += 1
            plan.store.append(ev)
    return plan


def counts_add(*, run: Run, counts: RunIngestCount, events: int, samples: int, metric_rows: int,
               reached: dict[str, int], metric_names: Iterable[str] = ()) -> None:
    """Add what the batch stored to the locked counter row (the names of the metrics it stored among
    them); audit each cap the batch was refused by, the first time at that limit."""
    first_time = {cap: limit for cap, limit in reached.items() if counts.caps_reached.get(cap) != limit}
    known = counts.metric_names
    from_rows = known is None  # not known yet (a counter row from before the names were kept): once
    if from_rows:
        with connection.cursor() as cur:
            cur.execute(f"SELECT {METRIC_NAMES_SQL.format(run='%s')}", [run.pk])
            found = cur.fetchone()[0]
        known = found if isinstance(found, list) else json.loads(found)
    names = set(known) | set(metric_names)
    new_names = from_rows or len(names) > len(known)
    if not (events or samples or metric_rows or first_time or new_names):
        return
    counts.events += events
    counts.samples += samples
    counts.metric_rows += metric_rows
    counts.caps_reached = {**counts.caps_reached, **first_time}
    fields = ["events", "samples", "metric_rows", "caps_reached"]
    if new_names:
        counts.metric_names = sorted(names)
        fields.append("metric_names")
    counts.save(update_fields=fields)
    for cap, limit in first_time.items():
        log.warning("ingest: %s", cap_message(run_id=run.pk, cap=cap, limit=limit))
        audit_record(actor=None, action="run.ingest_cap", obj=run,
                     data={"cap": cap, "limit": limit, "setting": CAP_SETTINGS[cap]})
