"""The Celery processes `make run` starts, as (name, argv, grace) for the supervisor: the main worker,
the playground sessions' worker, the dataset validations' worker and beat.

The playground worker runs as many processes as the site admits sessions at once
(RLSTUDIO_PLAYGROUND_MAX_ACTIVE, which the launcher also hands to the web and every worker, so the two
numbers are one): an admitted session always finds a free process, where a single process served them
one after another and a third session at once waited out its 120 s and was dropped unstarted. Each
process serves one session and is then replaced (`--max-tasks-per-child=1`), so the memory of the
models a session loaded goes back to the machine when it ends.

Pure: builds command lines from an environment; nothing is started here.
"""
from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from rlstudio.config.env import PLAYGROUND_MAX_ACTIVE_DEFAULT

CELERY_APP = "rlstudio.config.celery:app"
MAX_PLAYGROUND_SLOTS = 64  # a sanity bound: each slot is a process that may load two models


class WorkerSettingError(ValueError):
    """A setting the worker command lines are built from is not usable (the message names it)."""


def playground_slots(environ: Mapping[str, str]) -> int:
    """Sessions the site admits at once and processes the playground worker runs: the operator's
    RLSTUDIO_PLAYGROUND_MAX_ACTIVE, else the settings' default."""
    raw = (environ.get("RLSTUDIO_PLAYGROUND_MAX_ACTIVE") or "").strip()
    if not raw:
        return PLAYGROUND_MAX_ACTIVE_DEFAULT
    try:
        slots = int(raw)
    except ValueError:
        raise WorkerSettingError(f"RLSTUDIO_PLAYGROUND_MAX_ACTIVE must be a whole number, got {raw!r}") from None
    if not 1 <= slots <= MAX_PLAYGROUND_SLOTS:
        raise WorkerSettingError(
            f"RLSTUDIO_PLAYGROUND_MAX_ACTIVE must be between 1 and {MAX_PLAYGROUND_SLOTS} under make run, got {slots}")
    return slots


def celery_processes(env: Mapping[str, str], *, tag: str, beat_schedule: Path) -> list[tuple[str, list[str], float]]:
    """(name, argv, grace seconds) of each Celery process, from the children's environment `env`
    (which names the two queues and RLSTUDIO_PLAYGROUND_MAX_ACTIVE) and the launcher's tag."""
    celery = [sys.executable, "-m", "celery", "-A", CELERY_APP]
    slots = playground_slots(env)
    return [
        ("celery-worker", celery + ["worker", "--pool=solo", "--loglevel=INFO", "-n", f"rlstudio-{tag}@%h"], 20.0),
        ("celery-playground", celery + ["worker", "--pool=prefork", f"--concurrency={slots}",
                                        "--max-tasks-per-child=1", "--loglevel=INFO",
                                        "-Q", env["RLSTUDIO_PLAYGROUND_QUEUE"],
                                        "-n", f"rlstudio-playground-{tag}@%h"], 10.0),
        ("celery-datasets", celery + ["worker", "--pool=solo", "--loglevel=INFO",
                                      "-Q", env["RLSTUDIO_DATASETS_QUEUE"],
                                      "-n", f"rlstudio-datasets-{tag}@%h"], 20.0),
        ("celery-beat", celery + ["beat", "--loglevel=INFO", "--schedule", str(beat_schedule)], 10.0),
    ]
