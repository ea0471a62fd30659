"""Reads of telemetry, always through a run the user may see: their own, one shared with them, or any
for staff (rlstudio.runs.selectors.visible_runs); another user's unshared run is a 404.

Pure reads returning plain dicts (the API answers them as JSON, the pages embed them with
json_script): metrics per step, sample summaries with filters, one sample whole, a GRPO group with
its statistics (the trainer's own where its samples carry them), one prompt across training (by its
stable key, split and content hash, within the run), the memory timeline and the log tail.
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import QuerySet, TextField
from django.db.models.functions import Cast
from django.db.models.expressions import RawSQL
from django.http import Http404

from rlstudio.runs.models import Run
from rlstudio.runs.selectors import can_manage, visible_runs

from . import codec
from .models import MemoryPoint, MetricRow, RunEvent, Sample
from .redact import event_for_viewer

SAMPLE_ORDERS = ("reward", "-reward", "step", "-step", "response_length", "-response_length",
                 "num_turns", "-num_turns", "advantage", "-advantage", "index", "-index", "seq", "-seq")
SUMMARY_FIELDS = ("id", "seq", "step", "uid", "index", "reward", "advantage", "response_length",
                  "num_turns", "finish_reason", "has_tool_call", "prompt_split", "prompt_index", "prompt_hash")
# Rewards this close count as identical: a group whose rewards are all identical has zero advantage.
SAME_REWARD_TOL = 1e-9


def run_visible(*, user: AbstractBaseUser, run_id) -> Run:
    """The run if `user` may read it (owner, staff, shared with them), else Http404 (also for a
    malformed id)."""
    try:
        run = visible_runs(Run.objects.select_related("owner", "dataset", "model"), user=user).filter(pk=run_id).first()
    except (TypeError, ValueError):
        run = None
    if run is None:
        raise Http404("Not found")
    return run


# Metric rows per page of the metrics API and of the run page's first paint (the page fetches the
# rest from the API); the API's limit may go up to METRICS_PAGE_MAX.
METRICS_PAGE_DEFAULT = 1000
METRICS_PAGE_MAX = 5000
STEP_MAX = 2**31 - 1  # MetricRow.step is a PostgreSQL integer


def metrics_page(*, run: Run, after_step: int | None = None, until_step: int | None = None,
                 limit: int = METRICS_PAGE_DEFAULT) -> tuple[list[dict[str, Any]], int | None]:
    """One page of the run's metric rows: ([{step, time (ISO), t (unix), metrics}] in step order with
    after_step < step <= until_step (None: unbounded), at most `limit` of them; the after_step of the
    next page, None on the last).

    Keyed by step (unique per run, indexed), so a page costs one index range scan wherever it starts,
    and rows stored while a client pages (a live run) land on a later page, never twice."""
    qs = MetricRow.objects.filter(run=run).order_by("step")
    if after_step is not None:
        qs = qs.filter(step__gt=after_step)
    if until_step is not None:
        qs = qs.filter(step__lte=until_step)
    # The metrics object as its JSON text, read by orjson (codec.loads): json.loads of 1,000 rows x 80
    # keys through the JSONField, and a model instance per row, were most of a page's time.
    rows = list(qs.values_list("step", "time", Cast("metrics", TextField()))[: limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    return [_metric_row(*r) for r in rows], (rows[-1][0] if more else None)


def _metric_row(step: int, time: datetime, text: str) -> dict[str, Any]:
    return {"step": step, "time": time.isoformat(), "t": time.timestamp(), "metrics": codec.loads(text)}


def metrics_rows(*, run: Run, after_step: int, until_step: int, chunk: int = 2000) -> Iterator[dict[str, Any]]:
    """The run's metric rows with after_step < step <= until_step in step order, as `metrics_page`'s
    rows, read from the database `chunk` rows at a time (a server-side cursor)."""
    qs = (MetricRow.objects.filter(run=run, step__gt=after_step, step__lte=until_step).order_by("step")
          .values_list("step", "time", Cast("metrics", TextField())))
    for row in qs.iterator(chunk_size=chunk):
        yield _metric_row(*row)


@dataclass(frozen=True)
class SampleFilter:
    """Filters of the samples table / API (None = not filtered)."""

    step: int | None = None
    uid: str | None = None
    prompt_split: str | None = None
    prompt_hash: str | None = None
    min_reward: float | None = None
    max_reward: float | None = None
    finish_reason: str | None = None
    has_tool_call: bool | None = None
    order: str = "seq"


def samples_for(*, run: Run, flt: SampleFilter) -> QuerySet[Sample]:
    """The run's samples (summary columns only) narrowed by `flt`, ordered by `flt.order`."""
    if flt.order not in SAMPLE_ORDERS:
        raise ValueError(f"order must be one of {', '.join(SAMPLE_ORDERS)}")
    qs = Sample.objects.filter(run=run).only(*SUMMARY_FIELDS)
    if flt.step is not None:
        qs = qs.filter(step=flt.step)
    if flt.uid is not None:
        qs = qs.filter(uid=flt.uid)
    if flt.prompt_split is not None:
        qs = qs.filter(prompt_split=flt.prompt_split)
    if flt.prompt_hash is not None:
        qs = qs.filter(prompt_hash=flt.prompt_hash)
    if flt.min_reward is not None:
        qs = qs.filter(reward__gte=flt.min_reward)
    if flt.max_reward is not None:
        qs = qs.filter(reward__lte=flt.max_reward)
    if flt.finish_reason:
        qs = qs.filter(finish_reason=flt.finish_reason)
    if flt.has_tool_call is not None:
        qs = qs.filter(has_tool_call=flt.has_tool_call)
    if flt.order.lstrip("-") == "seq":  # unique within a run: no tie to break, and the (run, seq) index serves it
        return qs.order_by(flt.order)
    return qs.order_by(flt.order, "seq")


class SamplePages:
    """A run's filtered samples (`samples_for`) as the API's pager slices them: `count()` and
    `[offset:offset + limit]`. In seq order a page is found by its seqs first (an index-only scan of
    the (run, seq) unique index: `OFFSET 299,900` skips index entries, not 300,000 wide rows read from
    the table and sorted), then its rows by those seqs; in any other order it is the plain slice."""

    def __init__(self, qs: QuerySet[Sample], order: str) -> None:
        self.qs, self.by_seq = qs, order.lstrip("-") == "seq"

    def count(self) -> int:
        return self.qs.count()

    def __getitem__(self, part: slice) -> list[Sample]:
        if not self.by_seq:
            return list(self.qs[part])
        seqs = list(self.qs.values_list("seq", flat=True)[part])
        rows = {s.seq: s for s in self.qs.filter(seq__in=seqs).order_by()} if seqs else {}
        return [rows[seq] for seq in seqs if seq in rows]


def sample_summary_dict(s: Sample) -> dict[str, Any]:
    return {f: getattr(s, f) for f in SUMMARY_FIELDS}


# The samples table's prompt column: the text of the sample's first user message, shortened to
# PROMPT_SHORT characters on one line (`prompt_short`) and whole, up to PROMPT_MAX characters, for
# the cell's title (`prompt`). Read by PostgreSQL for the page's rows only: a transcript (TOASTed
# jsonb) is never loaded into Python for this. Transcripts stored as a bare list of messages (older
# rows) are read too.
PROMPT_SHORT = 90
PROMPT_MAX = 4000
_FIRST_USER_TEXT = ("left(COALESCE(jsonb_path_query_first(transcript, '$.messages[*] ? (@.role == \"user\").content'), "
                    "jsonb_path_query_first(transcript, '$[*] ? (@.role == \"user\").content')) #>> '{}', %s)")


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def sample_rows(*, samples: list[Sample]) -> list[dict[str, Any]]:
    """Summary dicts of one page of samples (the table's rows) with their prompt's text:
    `prompt` (up to PROMPT_MAX characters, "" when the transcript has no user message) and
    `prompt_short` (whitespace collapsed, up to PROMPT_SHORT characters)."""
    texts = dict(Sample.objects.filter(pk__in=[s.pk for s in samples])
                 .annotate(prompt_text=RawSQL(_FIRST_USER_TEXT, (PROMPT_MAX + 1,)))
                 .values_list("pk", "prompt_text")) if samples else {}
    rows = []
    for s in samples:
        text = texts.get(s.pk) or ""
        rows.append({**sample_summary_dict(s), "prompt": _shorten(text, PROMPT_MAX),
                     "prompt_short": _shorten(" ".join(text.split()), PROMPT_SHORT)})
    return rows


def prompt_text(*, sample_id: int) -> str:
    """The text of a sample's first user message, up to PROMPT_MAX characters ("" when none)."""
    text = (Sample.objects.filter(pk=sample_id).annotate(prompt_text=RawSQL(_FIRST_USER_TEXT, (PROMPT_MAX + 1,)))
            .values_list("prompt_text", flat=True).first())
    return _shorten(text or "", PROMPT_MAX)


def sample_get(*, run: Run, sample_id) -> Sample:
    """One sample of `run` (already checked visible), or Http404 (also for malformed ids)."""
    try:
        sample = Sample.objects.filter(run=run, pk=int(sample_id)).first()
    except (TypeError, ValueError):
        sample = None
    if sample is None:
        raise Http404("Not found")
    return sample


def sample_detail_dict(s: Sample) -> dict[str, Any]:
    """The whole sample: summary, transcript (messages, reward parts, ground truth) and token view."""
    transcript = s.transcript if isinstance(s.transcript, dict) else {"messages": s.transcript}
    return {**sample_summary_dict(s), "messages": transcript.get("messages", []),
            "reward_extra": transcript.get("reward_extra") or {},
            "ground_truth": transcript.get("ground_truth"), "data_source": transcript.get("data_source"),
            "validation": bool(transcript.get("validation")), "token_view": s.token_view,
            **{k: transcript.get(k) for k in _TRAINER_GROUP_KEYS}}


def group_stats(rewards: list[float], trainer: tuple[Any, Any, Any] | None = None) -> dict[str, Any]:
    """A group's statistics: the trainer's own when it reported them, else computed from `rewards`.

    rewards: [n] floats of the stored samples. trainer: (group_size, group_mean, group_std) as the
    sample events carried them (the scores and maths of the step's advantage estimator), or None
    (runs from before the trainer reported them: mean and unbiased std of the stored rewards, std None
    for n < 2). `n` is the number of stored samples, `size` the group's size in the step (None when
    unknown), `source` "trainer" or "stored"; flat when every score was the same (zero advantage).
    """
    n = len(rewards)
    if trainer is not None and trainer[1] is not None:
        size, mean, std = trainer
        flat = bool(size and size >= 2 and std is not None and std <= SAME_REWARD_TOL)
        return {"n": n, "size": size, "mean": mean, "std": std, "flat": flat, "source": "trainer"}
    mean = sum(rewards) / n if n else None
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (n - 1)) if n >= 2 else None
    flat = n >= 2 and (max(rewards) - min(rewards)) <= SAME_REWARD_TOL
    return {"n": n, "size": None, "mean": mean, "std": std, "flat": flat, "source": "stored"}


_TRAINER_GROUP_KEYS = ("group_size", "group_mean", "group_std")


def _trainer_groups(qs: QuerySet[Sample]) -> dict[tuple[int, str], tuple[Any, Any, Any]]:
    """{(step, uid): (group_size, group_mean, group_std)} of the samples in `qs` that carry the
    trainer's group statistics (one row per group suffices; they are the same on every sample)."""
    rows = (qs.filter(transcript__has_key="group_mean")
            .values_list("step", "uid", *(f"transcript__{k}" for k in _TRAINER_GROUP_KEYS)))
    return {(step, uid): (size, mean, std) for step, uid, size, mean, std in rows}


def group_for(*, run: Run, step: int, uid: str) -> dict[str, Any]:
    """The samples of the draw `uid` at `step`, side by side, with the group's statistics and the
    prompt's stable key (None, None where its samples carry none)."""
    samples = list(Sample.objects.filter(run=run, step=step, uid=uid).order_by("index", "seq"))
    rewards = [s.reward for s in samples if s.reward is not None]
    details = [sample_detail_dict(s) for s in samples]
    trainer = next(((d["group_size"], d["group_mean"], d["group_std"]) for d in details
                    if d.get("group_mean") is not None), None)
    key = next(((d["prompt_split"], d["prompt_hash"]) for d in details if d["prompt_hash"]), (None, None))
    return {"step": step, "uid": uid, "prompt_split": key[0], "prompt_hash": key[1], "samples": details,
            **group_stats(rewards, trainer)}


def groups_of_step(*, run: Run, step: int) -> list[dict[str, Any]]:
    """Every group of a step with its statistics (uid order), for the flat-group overview."""
    qs = Sample.objects.filter(run=run, step=step)
    trainer = _trainer_groups(qs)
    by_uid: dict[str, list[float]] = {}
    for uid, reward in qs.order_by("uid", "index").values_list("uid", "reward"):
        by_uid.setdefault(uid, [])
        if reward is not None:
            by_uid[uid].append(reward)
    return [{"uid": uid, **group_stats(rw, trainer.get((step, uid)))} for uid, rw in by_uid.items()]


def _draws(qs: QuerySet[Sample]) -> list[dict[str, Any]]:
    """The samples of `qs` grouped by draw (step, uid) in step order: per draw its step, uid, dataset
    row, samples (by index) and group statistics (the trainer's where reported)."""
    trainer = _trainer_groups(qs)
    draws: dict[tuple[int, str], list[Sample]] = {}
    for s in qs.only(*SUMMARY_FIELDS).order_by("step", "seq"):
        draws.setdefault((s.step, s.uid), []).append(s)
    rows = []
    for (step, uid), ss in draws.items():
        ss.sort(key=lambda s: (s.index, s.seq))
        rows.append({"step": step, "uid": uid, "prompt_index": ss[0].prompt_index,
                     "samples": [sample_summary_dict(s) for s in ss],
                     **group_stats([s.reward for s in ss if s.reward is not None], trainer.get((step, uid)))})
    return rows


def prompt_history(*, run: Run, prompt_split: str, prompt_hash: str) -> list[dict[str, Any]]:
    """One prompt of `run` across training: every draw of it (a step's group, step order) whose samples
    were stored, found by the prompt's stable key (its split and content hash) within this run only.
    A prompt drawn twice in a step (an epoch ending inside a dynamic-sampling step) has two rows."""
    return _draws(Sample.objects.filter(run=run, prompt_split=prompt_split, prompt_hash=prompt_hash))


def prompt_key_of(*, run: Run, uid: str) -> tuple[str, str] | None:
    """(prompt_split, prompt_hash) of the draw `uid` in `run`, None when its samples carry no key
    (stored from a trainer that did not report it) or there are none."""
    row = (Sample.objects.filter(run=run, uid=uid, prompt_hash__isnull=False, prompt_split__isnull=False)
           .values_list("prompt_split", "prompt_hash").first())
    return None if row is None else (row[0], row[1])


def draw_history(*, run: Run, uid: str) -> list[dict[str, Any]]:
    """The samples of the one draw `uid` of `run` (samples without a prompt key: their history is unknown)."""
    return _draws(Sample.objects.filter(run=run, uid=uid))


# Memory points the run page holds and the memory API answers by default: the latest ones (a long run
# reports a few a step per worker: 12,000 at 3,000 steps x 4 phases on one GPU, 2.8 MB of JSON); the
# API's limit may go up to MEMORY_POINTS_MAX.
MEMORY_POINTS_DEFAULT = 5000
MEMORY_POINTS_MAX = 50000
_MEMORY_FIELDS = ("seq", "time", "step", "phase", "device", "allocated", "reserved", "peak", "rss", "rank",
                  "device_used")


def memory_for(*, run: Run, since: datetime | None = None, limit: int | None = None) -> list[dict[str, Any]]:
    """The run's memory points in seq order (later than `since` when given); with `limit`, the latest
    `limit` of them (one indexed backward scan, read as tuples: no model instance per point)."""
    qs = MemoryPoint.objects.filter(run=run)
    if since is not None:
        qs = qs.filter(time__gt=since)
    if limit is None:
        rows = list(qs.order_by("seq").values_list(*_MEMORY_FIELDS))
    else:
        rows = list(qs.order_by("-seq").values_list(*_MEMORY_FIELDS)[:limit])[::-1]
    out = []
    for seq, time, step, phase, device, allocated, reserved, peak, rss, rank, used in rows:
        out.append({"seq": seq, "time": time.isoformat(), "t": time.timestamp(), "step": step, "phase": phase,
                    "device": device, "allocated": allocated, "reserved": reserved, "peak": peak, "rss": rss,
                    "rank": rank, "device_used": used})
    return out


def memory_window(*, run: Run, since: datetime | None = None,
                  limit: int | None = None) -> tuple[list[dict[str, Any]], bool]:
    """(the latest `limit` (default MEMORY_POINTS_DEFAULT) memory points in seq order, whether earlier
    ones were left out)."""
    limit = MEMORY_POINTS_DEFAULT if limit is None else limit
    points = memory_for(run=run, since=since, limit=limit + 1)
    return (points[1:], True) if len(points) > limit else (points, False)


def logs_tail(*, run: Run, user: AbstractBaseUser, tail: int = 500) -> list[dict[str, Any]]:
    """The last `tail` log events of the run, oldest first, as `user` may see them (a reader's without
    server paths: `redact.event_for_viewer`)."""
    manager = can_manage(user=user, run=run)
    rows = list(RunEvent.objects.filter(run=run, type="log").order_by("-seq")[:tail])
    out = []
    for e in reversed(rows):
        data = event_for_viewer({"type": "log", "data": e.data}, manager=manager)["data"]
        out.append({"seq": e.seq, "time": e.time.isoformat(), "level": data.get("level", "info"),
                    "message": data.get("message", "")})
    return out


def events_after(*, run_id: int, after: int, limit: int = 1000) -> list[dict[str, Any]]:
    """Stored events with seq > after in seq order (the websocket replay source), as sent live."""
    rows = RunEvent.objects.filter(run_id=run_id, seq__gt=after).order_by("seq")[:limit]
    return [{"seq": e.seq, "type": e.type, "time": e.time.timestamp(), "data": e.data} for e in rows]


def last_seq(*, run_id: int) -> int:
    last = RunEvent.objects.filter(run_id=run_id).order_by("-seq").values_list("seq", flat=True).first()
    return int(last or 0)
