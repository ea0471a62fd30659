"""The name of a checkpoint step's folder in a run's output folder (`global_step_<N>`), standard library
only: the platform reads the steps of a run folder without loading torch (trainer.checkpoint does)."""
from __future__ import annotations

import re

STEP_DIR = re.compile(r"^global_step_(\d+)$")
