"""A run's sample retention as a value: its modes, its bounds and the one check of a (mode, k) pair.

The telemetry app stores it (`RunRetention`) and applies it at the ingest; the runs app takes it at a
launch (the API's `retention`, the form's fields) and hands it to telemetry through the run-created
hooks (`rlstudio.runs.services.on_run_created`). Both check it here, so that a launch and
`PUT /api/v1/runs/{id}/retention/` refuse the same values with the same words.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import models

RETENTION_K_MAX = 1_000_000  # a retention's k: samples kept per step, or every k-th step


class RetentionMode(models.TextChoices):
    """How many of a run's samples keep their full transcript in the database."""

    ALL = "all", "all samples"
    PER_STEP = "per_step", "the first k samples of each step"
    EVERY_KTH_STEP = "every_kth_step", "all samples of every k-th step"


class RetentionInvalid(ValueError):
    """A retention value refused; `field` is "mode" or "k"."""

    def __init__(self, message: str, *, field: str):
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Retention:
    """A checked retention: `mode` one of RetentionMode, `k` from 1 to RETENTION_K_MAX."""

    mode: str = RetentionMode.ALL
    k: int = 1

    def as_dict(self) -> dict[str, Any]:
        return {"mode": str(self.mode), "k": self.k}


def retention_check(mode: Any, k: Any = 1) -> Retention:
    """`(mode, k)` as a Retention; RetentionInvalid naming "mode" or "k" for a value out of bounds."""
    if not isinstance(mode, str) or mode not in RetentionMode.values:
        raise RetentionInvalid(f"retention mode must be one of {', '.join(RetentionMode.values)}, got {mode!r}"[:300],
                               field="mode")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= RETENTION_K_MAX:
        raise RetentionInvalid(f"retention k must be an integer from 1 to {RETENTION_K_MAX}, got {repr(k)[:30]}",
                               field="k")
    return Retention(mode=str(mode), k=k)
