"""The backfill of a job's own events file: reports a job made while the platform refused them.

Registered with the runs app (`runs.services.on_job_adopted`) when the telemetry app is ready, so
that runs never imports telemetry.
"""
from __future__ import annotations

import logging

from rlstudio.runs import launch
from rlstudio.runs.models import Run

from . import codec
from .services import events_ingest

log = logging.getLogger(__name__)


def backfill_local_events(*, run_id: int, chunk: int = 500) -> int:
    """Store the reports in the run's own events file that the platform does not have; returns how
    many were new.

    A job adopted after its submit task died (run_submit finding it already in Ray, or run_adopt_job)
    reported while the platform did not know its ingest token: the hash issued with the job was
    rolled back with the task's transaction, so every POST was refused until the adoption, and a short
    job may have finished by then. The trainer's JSONL sink writes every event to `events.jsonl` in the
    run's folder (launch.run_folder, the job's `trainer.default_local_dir`) as it goes; those lines go
    through the ingest (the same validation and limits; stored once per seq, so what did arrive is
    skipped) and their status events end the run as its own reports would have. Nothing to read when
    the job runs on another machine: then only its later reports arrive. A line that is not JSON (the
    last one, mid-write) is skipped.
    """
    run = Run.objects.filter(pk=run_id).first()
    path = launch.run_folder(run) / "events.jsonl" if run is not None else None
    if path is None or not path.is_file():
        return 0
    stored, batch = 0, []
    with path.open("rb") as f:
        for line in f:
            try:
                batch.append(codec.loads(line))
            except ValueError:
                continue
            if len(batch) >= chunk:
                stored += events_ingest(run=run, raw_events=batch).accepted
                batch = []
    if batch:
        stored += events_ingest(run=run, raw_events=batch).accepted
    if stored:
        log.info("run %s: %d reports stored from %s (the job reported before it was adopted)", run_id, stored, path)
    return stored
