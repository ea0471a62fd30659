"""Writes of telemetry: ingesting what a trainer reports, and a run's sample retention.

`events_ingest(run=..., raw_events=[...])` is the one entry point of the ingest API:

  1. each raw event is size-checked and validated with `trainer.events.validate_event`; a refused
     event gets a reason and the rest of the batch is kept;
  2. in one transaction: every new event becomes a RunEvent (INSERT ... ON CONFLICT DO NOTHING
     RETURNING seq, so a resent batch stores nothing twice and we know exactly which seqs are new),
     metrics are merged into one MetricRow per step, samples (subject to retention) into Sample,
     memory into MemoryPoint; step / total_steps / heartbeat / checkpoint update the run; trainer
     status events move the run through `runs.services.run_transition` where that is legal;
  3. after commit: one compact message per new event to the run's Channels group (seq order) and
     every new sample appended to the run's rollout dump files.

Per-run caps (`ingest_caps`): in the same transaction, before anything is stored, the run's counter
row is locked and the batch is split by RLSTUDIO_RUN_MAX_EVENTS / _SAMPLES / _METRIC_ROWS; events
past a cap are refused with a reason naming it (the answer's `caps` says which caps refused), except
control events (status, heartbeat, checkpoint), which past the events cap are applied, not stored.

Hooks (`on_events_stored`): after a batch is stored, still inside its transaction, each registered
hook gets the run and the batch's new events by type (the alerts app evaluates its rules there, so
that telemetry never imports alerts); a hook owns its own errors and after-commit work.

RunEvent.data of a sample holds its summary (and `sample_id` when the transcript was kept), not the
transcript: RunEvents are the websocket replay source and must stay small; transcripts live in Sample.
"""
from __future__ import annotations

import base64
import logging
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import connection, transaction
from django.db.models import Count, F
from django.db.models.functions import Greatest
from django.utils import timezone

from rlstudio.accounts.services import audit_record
from rlstudio.runs import launch
from rlstudio.runs.failure import trainer_failure
from rlstudio.runs.models import Run, RunStatus
from rlstudio.runs.services import run_reach
from rlstudio.retention import Retention, retention_check
from rlstudio.text import without_nul
from trainer.events.schema import SAMPLE_OPTIONAL_KEYS, EventError, TokenView
from trainer.events.wire import Event, validate_event

from . import codec
from .broadcast import run_events_send
from .fields import json_pack
from .ingest_caps import caps_plan, cap_message, counts_add, counts_lock
from .models import RetentionMode, RunRetention, Sample

log = logging.getLogger(__name__)
S = RunStatus

# The trainer's states that move a run (runs.services.run_reach finds the legal chain to each; a run
# that already moved on, e.g. marked lost, or is ahead of the trainer is left as it is).
TRAINER_STATES = {"running": S.RUNNING, "stopping": S.STOPPING, "stopped": S.STOPPED,
                  "succeeded": S.SUCCEEDED, "failed": S.FAILED}
SAMPLE_SUMMARY_KEYS = ("step", "uid", "index", "reward", "advantage", "response_length", "num_turns",
                       "finish_reason", "tool_calls", "validation", "prompt_split", "prompt_index", "prompt_hash")


# hook(run=..., by_type={"metrics": [event, ...], ...}): the new events of a stored batch, seq order.
_STORED_HOOKS: list[Callable[..., None]] = []


def on_events_stored(hook: Callable[..., None]) -> Callable[..., None]:
    """Register `hook(run=, by_type=)` to run in each ingest transaction once its batch is stored."""
    if hook not in _STORED_HOOKS:
        _STORED_HOOKS.append(hook)
    return hook


@dataclass
class Refusal:
    """One event of a batch that was not stored, and why."""

    index: int
    seq: int | None
    reason: str


@dataclass
class IngestResult:
    accepted: int = 0
    duplicates: int = 0
    refused: list[Refusal] = field(default_factory=list)
    transitions: list[str] = field(default_factory=list)
    caps: list[dict[str, Any]] = field(default_factory=list)  # [{cap, limit, message}] that refused events

    def as_json(self) -> dict[str, Any]:
        out = {
            "accepted": self.accepted,
            "duplicates": self.duplicates,
            "refused": [{"index": r.index, "seq": r.seq, "reason": r.reason} for r in self.refused],
        }
        if self.caps:
            out["caps"] = self.caps
        return out


def _has_tool_call(data: dict[str, Any]) -> bool:
    if data.get("tool_calls"):
        return True
    return any(m.get("role") == "assistant" and m.get("tool_calls") for m in data.get("messages", []))


def sample_summary(data: dict[str, Any], *, sample_id: int | None) -> dict[str, Any]:
    """The compact form of a sample event (what RunEvent stores and the websocket carries)."""
    out = {k: data[k] for k in SAMPLE_SUMMARY_KEYS if k in data}
    out["has_tool_call"] = _has_tool_call(data)
    out["sample_id"] = sample_id
    return out


_OPTIONAL_SAMPLE_KEYS = SAMPLE_OPTIONAL_KEYS
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _fields_of(obj: Any) -> dict[str, Any]:
    """A dataclass instance's fields as a dict, shallow (field names cached per class)."""
    cls = type(obj)
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(cls))
    return {name: getattr(obj, name) for name in names}


def wire_form(event: Event) -> dict[str, Any]:
    """`event.to_dict()` without its deep copy.

    `Event.to_dict` goes through `dataclasses.asdict`, which deep-copies every list element: for a
    sample with a token view that is most of the ingest's CPU time. A validated event's values are
    plain JSON already (the parsed request body, which nothing else holds), so a shallow conversion
    gives the same dict; tests/rlstudio/telemetry/test_ingest_perf_shape.py checks they agree.
    """
    data = _fields_of(event.data)
    if event.type == "sample":
        if isinstance(data.get("token_view"), TokenView):
            data["token_view"] = _fields_of(data["token_view"])
        for key in _OPTIONAL_SAMPLE_KEYS:
            if data.get(key) in (None, {}):
                data.pop(key, None)
        if not data.get("validation"):
            data.pop("validation", None)
    return {"seq": event.seq, "type": event.type, "time": event.time, "data": data}


def parse_events(raw_events: list[Any], *, max_event_bytes: int, body_bytes: int | None = None,
                 body_may_hold_nul: bool = True) -> tuple[list[dict[str, Any]], list[Refusal], int]:
    """Validate a batch: (valid events in wire form, first per seq), refusals, in-batch duplicates.

    The per-event size check encodes each event, which for small events is a large part of the
    ingest's CPU. When the caller knows the whole request body (`body_bytes`, `body_may_hold_nul`
    from the API view) is no bigger than `max_event_bytes` and holds no `\\u0000`, no event in it
    can exceed the limit or hold a NUL, and only sample events are encoded (their text is the line
    of the rollout dump, kept as `ev["_line"]` (UTF-8 bytes) so the dump does not encode it again).
    """
    valid: dict[int, dict[str, Any]] = {}
    refused: list[Refusal] = []
    duplicates = 0
    body_fits = body_bytes is not None and body_bytes <= max_event_bytes and not body_may_hold_nul
    for index, raw in enumerate(raw_events):
        seq = raw.get("seq") if isinstance(raw, dict) else None
        seq = seq if isinstance(seq, int) and not isinstance(seq, bool) else None
        text = None
        if not body_fits or (isinstance(raw, dict) and raw.get("type") == "sample"):
            try:
                text = codec.dumpb(raw)
            except (TypeError, ValueError) as exc:
                refused.append(Refusal(index, seq, f"event {index}: not JSON-encodable ({exc})"))
                continue
            if b"\\u0000" in text:
                # PostgreSQL stores no NUL in text or jsonb, and a model can emit one: keep the event
                # with U+FFFD in its place (what a browser shows for an undecodable character).
                raw = without_nul(raw)
                text = codec.dumpb(raw)
            size = len(text)
            if size > max_event_bytes:
                refused.append(Refusal(index, seq, f"event {seq if seq is not None else index}: {size} bytes "
                                                   f"exceeds the per-event limit of {max_event_bytes}"))
                continue
        try:
            event = wire_form(validate_event(raw))
        except EventError as exc:
            refused.append(Refusal(index, seq, exc.reason))
            continue
        if event["seq"] in valid:
            duplicates += 1
            continue
        if event["type"] == "sample":
            event["_line"] = text  # the event as received (valid, NUL-free): its rollout dump line
        event["_index"] = index  # its place in the request (for a refusal after parsing)
        valid[event["seq"]] = event
    return [valid[s] for s in sorted(valid)], refused, duplicates


def _insert_run_events(run_id: int, events: list[dict[str, Any]], compact: dict[int, dict[str, Any]]) -> set[int]:
    """INSERT the events' RunEvents, skipping (run, seq) already stored; the seqs actually inserted.

    One statement whatever the batch size, and one parameter: the rows travel as one JSON array read
    by `jsonb_to_recordset`. Encoding the batch in one JSON text, and quoting one string, costs
    about a third less CPU than a JSON text per event quoted into a jsonb[] literal (and far less than
    thousands of VALUES tuples with five parameters each).
    """
    if not events:
        return set()
    rows = [{"seq": ev["seq"], "type": ev["type"], "t": ev["time"], "data": compact[ev["seq"]]} for ev in events]
    sql = ("INSERT INTO telemetry_runevent (run_id, seq, type, time, data) "
           "SELECT %s, u.seq, u.type, to_timestamp(u.t), u.data "
           "FROM jsonb_to_recordset(%s::jsonb) AS u(seq bigint, type varchar, t float8, data jsonb) "
           "ON CONFLICT (run_id, seq) DO NOTHING RETURNING seq")
    with connection.cursor() as cur:
        cur.execute(sql, [run_id, codec.dumps(rows)])
        return {row[0] for row in cur.fetchall()}


def _upsert_metrics(run_id: int, events: list[dict[str, Any]]) -> int:
    """One MetricRow per step; a later metrics event of the same step adds/overrides keys. The number
    of rows created (not merged into): `old` reads the table as it was before the statement (all parts
    of a WITH statement see one snapshot), so the count costs no extra round trip."""
    merged: dict[int, tuple[float, dict[str, Any]]] = {}
    for ev in events:
        step = ev["data"]["step"]
        _, metrics = merged.get(step, (0.0, {}))
        merged[step] = (ev["time"], {**metrics, **ev["data"]["metrics"]})
    if not merged:
        return 0
    rows = [{"step": step, "t": merged[step][0], "metrics": merged[step][1]} for step in sorted(merged)]
    sql = ("WITH u AS (SELECT * FROM jsonb_to_recordset(%s::jsonb) AS u(step integer, t float8, metrics jsonb)), "
           "old AS (SELECT m.step FROM telemetry_metricrow m WHERE m.run_id = %s AND m.step IN (SELECT step FROM u)), "
           "up AS (INSERT INTO telemetry_metricrow (run_id, step, time, metrics) "
           "SELECT %s, u.step, to_timestamp(u.t), u.metrics FROM u "
           "ON CONFLICT (run_id, step) DO UPDATE SET metrics = telemetry_metricrow.metrics || "
           "EXCLUDED.metrics, time = EXCLUDED.time RETURNING step) "
           "SELECT count(*) FROM up WHERE step NOT IN (SELECT step FROM old)")
    with connection.cursor() as cur:
        cur.execute(sql, [codec.dumps(rows), run_id, run_id])
        return int(cur.fetchone()[0])


def _insert_memory(run_id: int, events: list[dict[str, Any]]) -> None:
    """The MemoryPoints of the batch's memory events, in one statement (columns as arrays: the ORM's
    bulk_create built a model instance and ten parameters per point)."""
    if not events:
        return
    names = ("step", "phase", "device", "allocated", "reserved", "peak", "rss", "rank", "device_used")
    cols = {name: [ev["data"].get(name) for ev in events] for name in names}
    cols["rank"] = [r or 0 for r in cols["rank"]]
    sql = ("INSERT INTO telemetry_memorypoint (run_id, seq, time, step, phase, device, allocated, reserved, "
           "peak, rss, rank, device_used) SELECT %s, u.seq, to_timestamp(u.t), u.step, u.phase, u.device, "
           "u.allocated, u.reserved, u.peak, u.rss, u.rank, u.device_used FROM unnest(%s::bigint[], "
           "%s::float8[], %s::integer[], %s::varchar[], %s::varchar[], %s::bigint[], %s::bigint[], "
           "%s::bigint[], %s::bigint[], %s::integer[], %s::bigint[]) "
           "AS u(seq, t, step, phase, device, allocated, reserved, peak, rss, rank, device_used) "
           "ON CONFLICT (run_id, seq) DO NOTHING")
    params = [run_id, [ev["seq"] for ev in events], [ev["time"] for ev in events], *(cols[name] for name in names)]
    with connection.cursor() as cur:
        cur.execute(sql, params)


def _retained(run: Run, samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The sample events whose transcript the database keeps, under the run's retention."""
    retention = RunRetention.objects.filter(run=run).first()
    if retention is None or retention.mode == RetentionMode.ALL:
        return samples
    k = max(int(retention.k), 1)
    if retention.mode == RetentionMode.EVERY_KTH_STEP:
        return [ev for ev in samples if ev["data"]["step"] % k == 0]
    steps = {ev["data"]["step"] for ev in samples}
    counts = _counts_per_step(run, steps)
    kept = []
    for ev in samples:
        step = ev["data"]["step"]
        if counts.get(step, 0) < k:
            kept.append(ev)
            counts[step] = counts.get(step, 0) + 1
    return kept


def _counts_per_step(run: Run, steps: set[int]) -> dict[int, int]:
    rows = Sample.objects.filter(run=run, step__in=steps).values("step").annotate(n=Count("id"))
    return {r["step"]: r["n"] for r in rows}


_SAMPLE_COLUMNS = ('seq bigint, step integer, uid varchar, "index" integer, reward float8, advantage float8, '
                   "response_length integer, num_turns integer, finish_reason varchar, has_tool_call boolean, "
                   "transcript jsonb, token_view text, prompt_split varchar, prompt_index integer, prompt_hash varchar")


def _store_samples(run: Run, samples: list[dict[str, Any]]) -> dict[int, int]:
    """Create the Samples in one statement; {seq: sample id}.

    The rows travel as one JSON array (`jsonb_to_recordset`, as the RunEvents): the ORM's bulk_create
    prepared thirteen parameters per row in Python, a quarter of the samples workload's CPU. A token
    view is stored as `CompressedJSONField` stores it (fields.json_pack), carried in the array as
    base64 and decoded by PostgreSQL."""
    rows = []
    for ev in samples:
        d = ev["data"]
        view = d.get("token_view")
        rows.append({
            "seq": ev["seq"], "step": d["step"], "uid": d["uid"], "index": d["index"], "reward": d["reward"],
            "advantage": d["advantage"], "response_length": d["response_length"], "num_turns": d["num_turns"],
            "finish_reason": d["finish_reason"], "has_tool_call": _has_tool_call(d),
            "transcript": {"messages": d["messages"], "reward_extra": d.get("reward_extra", {}),
                           "ground_truth": d.get("ground_truth"), "data_source": d.get("data_source"),
                           "tool_calls": d.get("tool_calls"), "validation": d.get("validation", False),
                           # the trainer's GRPO group (whole groups are reported); absent from older runs
                           **{k: d[k] for k in ("group_size", "group_mean", "group_std") if d.get(k) is not None}},
            "token_view": None if view is None else base64.b64encode(json_pack(view)).decode("ascii"),
            # the prompt's stable identity (absent from older trainers' events: null, history unknown)
            "prompt_split": d.get("prompt_split"), "prompt_index": d.get("prompt_index"),
            "prompt_hash": d.get("prompt_hash"),
        })
    sql = ('INSERT INTO telemetry_sample (run_id, seq, step, uid, "index", reward, advantage, response_length, '
           "num_turns, finish_reason, has_tool_call, transcript, token_view, prompt_split, prompt_index, prompt_hash) "
           'SELECT %s, u.seq, u.step, u.uid, u."index", u.reward, u.advantage, u.response_length, u.num_turns, '
           "u.finish_reason, u.has_tool_call, u.transcript, decode(u.token_view, 'base64'), u.prompt_split, "
           "u.prompt_index, u.prompt_hash "
           f"FROM jsonb_to_recordset(%s::jsonb) AS u({_SAMPLE_COLUMNS}) RETURNING seq, id")
    with connection.cursor() as cur:
        cur.execute(sql, [run.pk, codec.dumps(rows)])
        return dict(cur.fetchall())


def _link_sample_ids(run_id: int, ids: dict[int, int]) -> None:
    if not ids:
        return
    sql = ("UPDATE telemetry_runevent e SET data = jsonb_set(e.data, '{sample_id}', to_jsonb(v.id)) "
           "FROM unnest(%s::bigint[], %s::bigint[]) AS v(seq, id) WHERE e.run_id = %s AND e.seq = v.seq")
    with connection.cursor() as cur:
        cur.execute(sql, [list(ids), list(ids.values()), run_id])


def _apply_status(run: Run, events: list[dict[str, Any]]) -> list[str]:
    """Move the run as the trainer's status events say, where legal; the transitions made."""
    made = []
    for ev in events:
        to = TRAINER_STATES.get(ev["data"]["state"])
        if to is not None:
            # A traceback's last line is the reason; the traceback (its frames name the server's
            # files) goes to the error_log, the owner's and staff's only.
            error, error_log = trainer_failure(ev["data"].get("message", ""))
            made += run_reach(run=run, to=to, error=error or "the trainer reported a failure", error_log=error_log)
    return made


def events_ingest(*, run: Run, raw_events: list[Any], body_bytes: int | None = None,
                  body_may_hold_nul: bool = True) -> IngestResult:
    """Store a batch of trainer events for `run` (see the module docstring); never stores one twice.

    `body_bytes` / `body_may_hold_nul` describe the request body the events were parsed from (the
    API view knows them): they let parse_events skip per-event encoding where it cannot matter.
    """
    events, refused, in_batch_dups = parse_events(
        raw_events, max_event_bytes=settings.RLSTUDIO_INGEST_MAX_EVENT_BYTES, body_bytes=body_bytes,
        body_may_hold_nul=body_may_hold_nul,
    )
    result = IngestResult(refused=refused, duplicates=in_batch_dups)
    if not events:
        return result
    compact = {ev["seq"]: (sample_summary(ev["data"], sample_id=None) if ev["type"] == "sample" else ev["data"])
               for ev in events}
    with transaction.atomic():
        counts = counts_lock(run_id=run.pk)
        plan = caps_plan(run_id=run.pk, counts=counts, events=events)
        _refuse_capped(result, run.pk, plan.refused, plan.reached)
        events = plan.store
        new_seqs = _insert_run_events(run.pk, events, compact)
        new = [ev for ev in events if ev["seq"] in new_seqs]
        result.accepted, result.duplicates = len(new), result.duplicates + len(events) - len(new)
        by_type: dict[str, list[dict[str, Any]]] = {}
        for ev in new:
            by_type.setdefault(ev["type"], []).append(ev)
        new_rows = _upsert_metrics(run.pk, by_type.get("metrics", []))
        samples = by_type.get("sample", [])
        ids = _store_samples(run, _retained(run, samples)) if samples else {}
        _link_sample_ids(run.pk, ids)
        for seq, pk in ids.items():
            compact[seq] = {**compact[seq], "sample_id": pk}
        _insert_memory(run.pk, by_type.get("memory", []))
        counts_add(run=run, counts=counts, events=len(new), samples=len(samples), metric_rows=new_rows,
                   reached=plan.reached,
                   metric_names={k for ev in by_type.get("metrics", []) for k in ev["data"]["metrics"]})
        if plan.apply_only:  # control events past the events cap: they act on the run, unstored
            result.accepted += len(plan.apply_only)
            new = sorted(new + plan.apply_only, key=lambda ev: ev["seq"])
            for ev in plan.apply_only:
                by_type.setdefault(ev["type"], []).append(ev)
            by_type["status"] = sorted(by_type.get("status", []), key=lambda ev: ev["seq"])
        _update_run(run, new, by_type)
        result.transitions = _apply_status(run, by_type.get("status", []))
        for hook in _STORED_HOOKS:
            hook(run=run, by_type=by_type)
        live = [{"seq": ev["seq"], "type": ev["type"], "time": ev["time"], "data": compact[ev["seq"]]}
                for ev in new]
        run_id = run.pk
        transaction.on_commit(lambda: _after_commit(run_id, live, samples))
    return result


def _refuse_capped(result: IngestResult, run_id: int, refused: list[tuple[dict[str, Any], str]],
                   reached: dict[str, int]) -> None:
    """Add the events a per-run cap refused to the answer (in request order), and the caps' sentences."""
    for ev, cap in refused:
        message = cap_message(run_id=run_id, cap=cap, limit=reached[cap])
        result.refused.append(Refusal(ev["_index"], ev["seq"], f"event {ev['seq']}: {message}"))
    result.refused.sort(key=lambda r: r.index)
    result.caps = [{"cap": cap, "limit": limit, "message": cap_message(run_id=run_id, cap=cap, limit=limit)}
                   for cap, limit in reached.items()]


def _update_run(run: Run, new: list[dict[str, Any]], by_type: dict[str, list[dict[str, Any]]]) -> None:
    """step (never backwards), total_steps, last_heartbeat (receipt time), checkpoint_path."""
    updates: dict[str, Any] = {}
    steps = [ev["data"]["step"] for ev in new if ev["type"] in ("metrics", "heartbeat", "status", "checkpoint")]
    if steps:
        updates["step"] = Greatest(F("step"), max(steps))
    totals = [ev["data"]["total_steps"] for ev in by_type.get("status", []) if ev["data"].get("total_steps")]
    if totals:
        updates["total_steps"] = totals[-1]
    if by_type.get("heartbeat"):
        updates["last_heartbeat"] = timezone.now()
    if by_type.get("checkpoint"):
        # Resume reads only from the run's own folder: a path outside it is not recorded.
        folder = launch.run_folder(run)
        for ev in reversed(by_type["checkpoint"]):
            path = ev["data"]["path"][:1024]
            if launch.inside(path, folder):
                updates["checkpoint_path"] = path
                break
            log.warning("run %s: reported checkpoint %r is outside its folder; not recorded", run.pk, path[:200])
    if updates:
        Run.objects.filter(pk=run.pk).update(**updates)


def _after_commit(run_id: int, live: list[dict[str, Any]], samples: list[dict[str, Any]]) -> None:
    try:
        run_events_send(run_id=run_id, events=live)
    except Exception:  # the events are stored: a viewer catches up with resume_after
        log.exception("ingest: broadcast to run %s failed", run_id)
    if samples:
        try:
            rollout_dump_append(run_id=run_id, samples=samples)
        except OSError:
            log.exception("ingest: rollout dump of run %s failed", run_id)


def rollout_dir(run_id: int) -> Path:
    return Path(settings.RLSTUDIO_ROLLOUT_DIR) / str(int(run_id)) / "rollouts"


def rollout_dump_append(*, run_id: int, samples: list[dict[str, Any]]) -> None:
    """Append each sample event (whole, one JSON line) to rollouts/step_<step>.jsonl of the run.

    The line is the event as the trainer sent it (`_line`, from parse_events) when there is one."""
    folder = rollout_dir(run_id)
    folder.mkdir(parents=True, exist_ok=True)
    by_step: dict[int, list[bytes]] = {}
    for ev in samples:
        line = ev.get("_line") or codec.dumpb({k: v for k, v in ev.items() if not k.startswith("_")})
        by_step.setdefault(ev["data"]["step"], []).append(line)
    for step, lines in by_step.items():
        with open(folder / f"step_{step:06d}.jsonl", "ab") as fh:
            fh.write(b"\n".join(lines) + b"\n")


def retention_set(*, run: Run, mode: str, k: int = 1, by: AbstractBaseUser | None) -> RunRetention:
    """Set how many samples of `run` keep their transcript in the database (from now on); a value out of
    bounds is `rlstudio.retention.RetentionInvalid` (a ValueError) naming "mode" or "k"."""
    checked = retention_check(mode, k)
    with transaction.atomic():
        retention, _ = RunRetention.objects.update_or_create(run=run, defaults=checked.as_dict())
        audit_record(actor=by, action="run.retention", obj=run, data=checked.as_dict())
    return retention


INHERITED_RETENTION = ("resume", "clone", "fork")  # the parent kinds whose new run keeps its parent's retention


def retention_for_new_run(*, run: Run, retention: Retention | None) -> None:
    """The run-created hook (`rlstudio.runs.services.on_run_created`, inside the transaction that
    creates `run`): the retention chosen at the launch, else, for a resume, clone or fork, a copy of its
    parent's (a run with no row keeps every sample)."""
    if retention is None and run.parent_id and run.parent_kind in INHERITED_RETENTION:
        parent = RunRetention.objects.filter(run_id=run.parent_id).first()
        retention = Retention(mode=parent.mode, k=parent.k) if parent else None
    if retention is not None:
        RunRetention.objects.update_or_create(run=run, defaults=retention.as_dict())
