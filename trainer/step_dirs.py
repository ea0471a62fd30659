"""The name of a checkpoint step's folder in a run's output folder (`global_step_<N>`), standard library
only: the platform reads the steps of a run folder without loading torch (trainer.checkpoint does)."""
from __future__ import annotations

import re

STEP_DIR = re.compile(r"^global_step_(\d+)$")


def step_of(path: str | None) -> int | None:
    """N of a path whose last part is a step folder `global_step_N`, else None (also for no path)."""
    from pathlib import PurePath

    match = STEP_DIR.match(PurePath(path).name) if path else None
    return int(match.group(1)) if match else None
