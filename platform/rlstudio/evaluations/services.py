"""Writes of evaluations: create one (the run's owner or staff only), run one (the Celery task).

Where an evaluation runs: in the Celery worker's own process, on its CPU (gpus = 0), not as a Ray job.
It therefore takes none of the user's GPU quota; what bounds it instead: at most MAX_CHECKPOINTS
checkpoints, MAX_PROMPTS prompts, k <= MAX_K, max_new_tokens <= MAX_NEW_TOKENS, and one queued or
running evaluation per user at a time (docs/user-guide.md "Evaluate checkpoints"). An evaluation
left `running` by a worker that died is marked failed once STALE_AFTER has passed since it started, so
it stops blocking its owner.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from rlstudio.runs.launch import dataset_path

from .models import ACTIVE_EVALUATION_STATUSES, Evaluation, EvaluationStatus
from .selectors import checkpoint_steps

MAX_K = 16
MAX_CHECKPOINTS = 8
MAX_PROMPTS = 64
MAX_NEW_TOKENS = 1024
STALE_AFTER = timedelta(hours=6)
DEFAULT_SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_new_tokens": 256, "seed": 0}


class EvaluationInvalid(ValueError):
    """A request that cannot be evaluated; `field` names the input that is wrong."""

    def __init__(self, message: str, *, field: str):
        super().__init__(message)
        self.field = field


class EvaluationRefused(RuntimeError):
    """A valid request refused now (another evaluation of the user is still queued or running)."""


@dataclass
class EvaluationRequest:
    checkpoints: list[int]
    k: int
    max_prompts: int
    sampling: dict[str, Any]


def _int(value: Any, field: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise EvaluationInvalid(f"{field} must be an integer, got {value!r}", field=field)
    if not lo <= value <= hi:
        raise EvaluationInvalid(f"{field} must be between {lo} and {hi}, got {value}", field=field)
    return value


def _float(value: Any, field: str, lo: float, hi: float, *, open_low: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise EvaluationInvalid(f"{field} must be a number, got {value!r}", field=field)
    if value > hi or value < lo or (open_low and value <= lo):
        raise EvaluationInvalid(f"{field} must be in {'(' if open_low else '['}{lo}, {hi}], got {value}",
                                field=field)
    return float(value)


def clean_request(data: dict[str, Any], *, available: list[int]) -> EvaluationRequest:
    """The request's inputs checked and bounded (EvaluationInvalid naming the field)."""
    steps = data.get("checkpoints")
    if not isinstance(steps, list) or not steps:
        raise EvaluationInvalid("checkpoints must be a non-empty list of steps", field="checkpoints")
    if len(steps) > MAX_CHECKPOINTS:
        raise EvaluationInvalid(f"at most {MAX_CHECKPOINTS} checkpoints", field="checkpoints")
    clean = sorted({_int(s, "checkpoints", 0, 10**9) for s in steps})
    missing = [s for s in clean if s not in available]
    if missing:
        raise EvaluationInvalid(f"the run has no checkpoint at step {missing[0]}; its checkpoints: "
                                f"{available or 'none'}", field="checkpoints")
    k = _int(data.get("k"), "k", 1, MAX_K)
    max_prompts = _int(data.get("max_prompts", 32), "max_prompts", 1, MAX_PROMPTS)
    given = data.get("sampling") or {}
    if not isinstance(given, dict):
        raise EvaluationInvalid("sampling must be an object", field="sampling")
    unknown = sorted(set(given) - set(DEFAULT_SAMPLING))
    if unknown:
        raise EvaluationInvalid(f"unknown sampling setting {unknown[0]!r}; known: {sorted(DEFAULT_SAMPLING)}",
                                field=f"sampling.{unknown[0]}")
    s = {**DEFAULT_SAMPLING, **given}
    top_k = _int(s["top_k"], "sampling.top_k", -1, 1000)
    sampling = {"temperature": _float(s["temperature"], "sampling.temperature", 0.0, 2.0),
                "top_p": _float(s["top_p"], "sampling.top_p", 0.0, 1.0, open_low=True),
                "top_k": -1 if top_k == 0 else top_k,
                "max_new_tokens": _int(s["max_new_tokens"], "sampling.max_new_tokens", 1, MAX_NEW_TOKENS),
                "seed": _int(s["seed"], "sampling.seed", 0, 2**31 - 1)}
    return EvaluationRequest(checkpoints=clean, k=k, max_prompts=max_prompts, sampling=sampling)


def evaluation_new(*, user, run, dataset, data: dict[str, Any]) -> Evaluation:
    """Create an evaluation of `run` (RunNotPermitted unless the user manages it) and queue its task."""
    from rlstudio.config.celery import publish
    from rlstudio.runs.services import check_can_manage

    check_can_manage(user=user, run=run, action="evaluate")
    if dataset.status != "ready":
        raise EvaluationInvalid(f"dataset {dataset.pk} is {dataset.status}, not ready", field="dataset")
    req = clean_request(data, available=list(checkpoint_steps(run)))
    with transaction.atomic():
        Evaluation.objects.filter(owner=user, status=EvaluationStatus.RUNNING,
                                  started__lt=timezone.now() - STALE_AFTER).update(
            status=EvaluationStatus.FAILED, finished=timezone.now(),
            error=f"no result {STALE_AFTER} after it started: its worker stopped")
        if Evaluation.objects.select_for_update().filter(owner=user, status__in=ACTIVE_EVALUATION_STATUSES).exists():
            raise EvaluationRefused("you already have an evaluation queued or running; wait for it to finish")
        ev = Evaluation.objects.create(run=run, owner=user, dataset=dataset, checkpoints=req.checkpoints, k=req.k,
                                       max_prompts=req.max_prompts, sampling=req.sampling)
    error = publish("evaluations.run_evaluation", ev.pk)
    if error is not None:
        _finish(ev, status=EvaluationStatus.FAILED, error=f"could not queue the evaluation: {error}")
    return ev


def _finish(ev: Evaluation, *, status: str, error: str = "", results: dict | None = None) -> None:
    ev.status, ev.error, ev.finished = status, error[:4000], timezone.now()
    if results is not None:
        ev.results = results
    ev.save(update_fields=["status", "error", "finished", "results"])


def evaluation_execute(*, evaluation_id: int) -> str:
    """Run a queued evaluation here (the Celery worker) and store its results or its error."""
    from trainer.data.dataset import read_rows
    from trainer.evaluate import evaluate_checkpoints

    with transaction.atomic():
        ev = Evaluation.objects.select_for_update().select_related("run", "dataset").get(pk=evaluation_id)
        if ev.status != EvaluationStatus.QUEUED:
            return f"already {ev.status}"
        ev.status, ev.started = EvaluationStatus.RUNNING, timezone.now()
        ev.save(update_fields=["status", "started"])
    try:
        steps = checkpoint_steps(ev.run)
        gone = [s for s in ev.checkpoints if s not in steps]
        if gone:
            raise FileNotFoundError(f"checkpoint of step {gone[0]} is no longer in the run's folder")
        rows = read_rows(dataset_path(ev.dataset))[: ev.max_prompts]
        s = ev.sampling
        results = evaluate_checkpoints(ev.run.config, [(step, steps[step]) for step in ev.checkpoints], rows,
                                       k=ev.k, temperature=s["temperature"], top_p=s["top_p"], top_k=s["top_k"],
                                       max_new_tokens=s["max_new_tokens"], seed=s["seed"])
    except Exception as exc:  # the evaluation fails with the reason; the worker goes on
        _finish(ev, status=EvaluationStatus.FAILED, error=f"{type(exc).__name__}: {exc}")
        return "failed"
    _finish(ev, status=EvaluationStatus.SUCCEEDED, results=results)
    return "succeeded"
