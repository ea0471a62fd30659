"""Writes of evaluations: create one (of a run: the run's owner or staff only; of a catalog model:
whoever may see the model, who becomes its owner), admit it within the owner's quota, submit it to Ray
(the Celery task), stop it, store what its job wrote.

Where an evaluation runs: as a Ray job (`jobs.py`: `python -m trainer evaluate`), like a run, on
`gpus` GPUs (0: the CPU; at most 1: the evaluation is one process). Admission is a run's
(`rlstudio.runs.services.queue_registry.QuotaPolicy.job_reason`, under the owner's lock): a running
evaluation counts as one of the owner's concurrent runs and its GPUs against their GPUs and GPU-hours,
so an evaluation on the CPU starts when the owner is under their concurrent-run cap. One evaluation per
user is queued or running at a time; one that must wait stays `queued` with its reason, in the one
queue with the queued runs (`queue.py`): the reconcile's queue pass admits runs and evaluations in the
order they were queued when the quota allows, and an evaluation waits behind its owner's runs queued
before it (as a run waits behind its owner's evaluation queued before it). Further bounds: at most
MAX_CHECKPOINTS checkpoints, MAX_PROMPTS prompts, k <= MAX_K, max_new_tokens <= MAX_NEW_TOKENS.
"""
from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from rlstudio.accounts.services import audit_record
from rlstudio.runs.checkpoints import checkpoint_steps
from rlstudio.runs.dispatch import send_after_commit
from rlstudio.runs.errors import RunRefused
from rlstudio.runs.failure import stored_error
from rlstudio.runs.launch import run_folder, write_spec
from rlstudio.runs.queue import QueuedJob
from rlstudio.text import without_nul

from . import jobs
from .models import ACTIVE_EVALUATION_STATUSES, Evaluation, EvaluationSample, EvaluationStatus
from .selectors import can_manage_evaluation

log = logging.getLogger(__name__)
S = EvaluationStatus
MAX_K = 16
MAX_CHECKPOINTS = 8
MAX_PROMPTS = 64
MAX_NEW_TOKENS = 1024
MAX_GPUS = 1
MAX_ERROR_LOG = 64_000  # characters of a failure's detail kept (its end)
DEFAULT_SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_new_tokens": 256, "seed": 0}
SUBMIT_TASK = "evaluations.submit_evaluation"
QUEUE_KIND = "evaluation"  # an evaluation's kind in the one queue


class EvaluationInvalid(ValueError):
    """A request that cannot be evaluated; `field` names the input that is wrong."""

    def __init__(self, message: str, *, field: str):
        super().__init__(message)
        self.field = field


class EvaluationRefused(RuntimeError):
    """A valid request refused now (another evaluation of the user is queued or running; a stop of
    a finished one)."""


@dataclass
class EvaluationRequest:
    checkpoints: list[int]
    include_base: bool
    k: int
    max_prompts: int
    gpus: int
    sampling: dict[str, Any]
    reward: str = ""  # a catalog model's evaluation: the reward's name ("": the default reward)


def _int(value: Any, field: str, lo: int, hi: int) -> int:
    if value is None:
        raise EvaluationInvalid(f"{field} is required: an integer from {lo} to {hi}", field=field)
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
    """The request's inputs checked and bounded (EvaluationInvalid naming the field; `gpus` at most
    MAX_GPUS here, then within the user's quota and the cluster: `_check_gpus`). A run's evaluation is
    scored with the run's own config: a `reward` in it is refused."""
    if "reward" in data:
        raise EvaluationInvalid("a run's evaluation is scored with the run's own reward; `reward` is only for "
                                "a registered model's evaluation", field="reward")
    include_base = data.get("include_base", False)
    if not isinstance(include_base, bool):
        raise EvaluationInvalid(f"include_base must be true or false, got {include_base!r}", field="include_base")
    steps = data.get("checkpoints", [])
    if not isinstance(steps, list) or (not steps and not include_base):
        raise EvaluationInvalid("checkpoints must be a non-empty list of steps (or empty with include_base)",
                                field="checkpoints")
    if len(steps) > MAX_CHECKPOINTS:
        raise EvaluationInvalid(f"at most {MAX_CHECKPOINTS} checkpoints", field="checkpoints")
    clean = sorted({_int(s, "checkpoints", 0, 10**9) for s in steps})
    missing = [s for s in clean if s not in available]
    if missing:
        raise EvaluationInvalid(f"the run has no checkpoint at step {missing[0]}; its checkpoints: "
                                f"{available or 'none'}", field="checkpoints")
    k = _int(data.get("k"), "k", 1, MAX_K)
    max_prompts = _int(data.get("max_prompts", 32), "max_prompts", 1, MAX_PROMPTS)
    gpus = _int(data.get("gpus", 0), "gpus", 0, MAX_GPUS)
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
    return EvaluationRequest(checkpoints=clean, include_base=include_base, k=k, max_prompts=max_prompts,
                             gpus=gpus, sampling=sampling)


def _policy():
    from rlstudio.runs.services.queue_registry import quota_policy

    return quota_policy()


def _check_gpus(*, user, gpus: int) -> None:
    """EvaluationInvalid on `gpus` when an evaluation of `user` asking `gpus` could never be admitted:
    more than their quota allows at once (`gpus_refusal`; more than the cluster has in all now is
    accepted, and waits queued for GPUs to join)."""
    from rlstudio.runs.services.cluster import gpus_refusal

    why = gpus_refusal(user=user, gpus=gpus, what="evaluation")
    if why:
        raise EvaluationInvalid(why, field="gpus")


def _check_dataset(dataset) -> None:
    if dataset.status != "ready":
        raise EvaluationInvalid(f"dataset {dataset.pk} is {dataset.status}, not ready", field="dataset")


def _check_dataset_readable_by_owner(*, run, dataset) -> None:
    """The run's readers see its evaluations' prompts: a dataset the run's owner may not read (a staff
    member's pick of another user's private dataset) is EvaluationInvalid on `dataset`."""
    from rlstudio.catalog.selectors import visible_to

    row = type(dataset).objects.filter(pk=dataset.pk)
    if row.exists() and not visible_to(row, user=run.owner).exists():  # (one deleted meanwhile: _lock_subject says so)
        raise EvaluationInvalid(f"dataset {dataset.pk} is private to another user: the run's owner and "
                                "readers would see its prompts; pick one the run's owner can read", field="dataset")


def _lock_subject(subject: dict[str, Any]) -> None:
    """FOR KEY SHARE on the evaluation's run or catalog model and its dataset (`rowlocks.lock_for_use`:
    `model_delete`, `run_delete` and `dataset_delete` lock the row FOR UPDATE, then check for
    evaluations); one already deleted is EvaluationInvalid on `run`, `model` or `dataset`."""
    from rlstudio.catalog.models import Dataset, ModelAsset
    from rlstudio.rowlocks import lock_for_use
    from rlstudio.runs.models import Run

    refs = [("run", Run), ("model", ModelAsset), ("dataset", Dataset)]
    gone = lock_for_use((field, cls, getattr(subject.get(field), "pk", None)) for field, cls in refs)
    if gone is not None:
        obj = subject[gone]
        raise EvaluationInvalid(f"the {gone} {getattr(obj, 'name', '')!r} (#{obj.pk}) was deleted", field=gone)


def _create(*, user, req: EvaluationRequest, audit: dict[str, Any], **subject) -> Evaluation:
    """Record the evaluation queued (one queued or running per user: EvaluationRefused) under the
    owner's quota lock, then (committed) run one pass of the queue (`queue_admit_launched`), which
    admits it now when its place in the one queue, the quota and the cluster allow (else it waits,
    queued, with the reason). When that pass cannot run (busy past its wait, or failed: logged) the
    evaluation stays queued with `LAUNCH_PASS_REASON` and is returned all the same (it is saved: an
    error would make its client launch it again, and be refused as one already queued).

    It first locks the rows it references (`_lock_subject`, before the owner's lock, the order the
    deletions take them in), so that its run, model or dataset cannot be deleted between its checks
    and its recording: one deleted meanwhile is EvaluationInvalid naming it."""
    from rlstudio.runs.services.admission import queue_admit_launched

    policy = _policy()
    with transaction.atomic():
        # The lock order: the referenced rows', then the owner's.
        _lock_subject(subject)
        policy.lock_owner(user=user)
        if Evaluation.objects.filter(owner=user, status__in=ACTIVE_EVALUATION_STATUSES).exists():
            raise EvaluationRefused("you already have an evaluation queued or running; wait for it to finish "
                                    "or stop it")
        ev = Evaluation.objects.create(owner=user, checkpoints=req.checkpoints, include_base=req.include_base,
                                       k=req.k, max_prompts=req.max_prompts, gpus=req.gpus, sampling=req.sampling,
                                       reward=req.reward, **subject)
        audit_record(actor=user, action="evaluation.create", obj=ev.subject,
                     data={"evaluation": ev.pk, "gpus": req.gpus, **audit})
    queue_admit_launched(Evaluation, pk=ev.pk)
    ev.refresh_from_db()
    return ev


def evaluation_new(*, user, run, dataset, data: dict[str, Any]) -> Evaluation:
    """Create an evaluation of `run` (RunNotPermitted unless the user manages it) and admit it now when
    the owner's quota allows (else it waits, queued, with the reason). The run's config is checked now
    as the job will build it (`jobs.run_config`: its reward function and tool set resolved again from
    the registries): one that can no longer be used (disabled, deleted, its file changed) is
    EvaluationInvalid naming the key (`reward.name`, `tool_set`), nothing saved."""
    from rlstudio.runs.errors import ConfigInvalid
    from rlstudio.runs.services import check_can_manage

    check_can_manage(user=user, run=run, action="evaluate")
    _check_dataset(dataset)
    _check_dataset_readable_by_owner(run=run, dataset=dataset)
    req = clean_request(data, available=list(checkpoint_steps(run)))
    _check_gpus(user=user, gpus=req.gpus)  # the evaluation is the caller's: their quota admits it
    try:
        jobs.run_config(run)
    except ConfigInvalid as exc:
        raise EvaluationInvalid(f"the run cannot be evaluated now: {exc.message}", field=exc.key) from None
    return _create(user=user, req=req, run=run, dataset=dataset,
                   audit={"checkpoints": req.checkpoints, "base": req.include_base})


def clean_model_request(data: dict[str, Any]) -> EvaluationRequest:
    """A catalog model's evaluation request checked (EvaluationInvalid naming the field): the run
    fields' bounds, with no checkpoints (the model itself is the one column, "base"), and an optional
    `reward`: a string here (absent, null or "": the default reward); whether it names a reward the
    run form accepts is the gate's check, when the config is built (`jobs.model_config`)."""
    data = dict(data)
    reward = data.pop("reward", None)
    if reward is None:
        reward = ""
    if not isinstance(reward, str):
        raise EvaluationInvalid(f"reward must be a reward's name, got {reward!r:.80}", field="reward")
    if data.get("checkpoints") not in (None, []):
        raise EvaluationInvalid("a model's evaluation has no checkpoints: it evaluates the model itself",
                                field="checkpoints")
    if data.get("include_base", True) is not True:
        raise EvaluationInvalid("a model's evaluation always evaluates the model (column 'base'); leave "
                                "include_base out", field="include_base")
    req = clean_request({**data, "checkpoints": [], "include_base": True}, available=[])
    req.reward = reward
    return req


def evaluation_new_for_model(*, user, model, dataset, data: dict[str, Any]) -> Evaluation:
    """Create an evaluation of catalog `model` (one the caller may see: checked by the caller's
    selector; kind policy, else EvaluationInvalid on `model`) owned by `user`, on `dataset`, and admit
    it now when the user's quota allows. Its config is checked now as the job will build it: a
    `reward` the run form's gate refuses is EvaluationInvalid on `reward`, nothing saved."""
    from rlstudio.runs.errors import ConfigInvalid

    if model.kind != "policy":
        raise EvaluationInvalid(f"model {model.pk} is a {model.get_kind_display()}: only a policy (a causal LM) "
                                f"generates answers to evaluate", field="model")
    _check_dataset(dataset)
    req = clean_model_request(data)
    _check_gpus(user=user, gpus=req.gpus)
    try:
        jobs.model_config(model=model, dataset=dataset, gpus=req.gpus, reward=req.reward)
    except ConfigInvalid as exc:
        if exc.key == "reward.name":
            raise EvaluationInvalid(f"reward: {exc.message}", field="reward") from None
        raise EvaluationInvalid(f"the model cannot be evaluated: {exc.key}: {exc.message}", field="model") from None
    return _create(user=user, req=req, model=model, dataset=dataset,
                   audit={"model": model.pk, "reward": req.reward or "default"})


def evaluation_job(ev: Evaluation) -> QueuedJob:
    """A queued evaluation as a job of the one queue (queued when created; staff do not move it)."""
    return QueuedJob(kind=QUEUE_KIND, id=ev.pk, owner_id=ev.owner_id, gpus=ev.gpus, queued_at=ev.created)


def evaluation_admit(*, evaluation_id: int, cluster_free_gpus: float | None = None) -> bool | None:
    """Admit a queued evaluation if its owner's quota and the cluster allow: queued -> running (its
    quota held from now) and the submit task sent once committed; otherwise it stays queued with the
    reason updated. It waits behind its owner's runs queued before it (the one queue's order, under
    the owner's lock that every admission takes). Returns admitted or not; None when the evaluation
    is gone or its row is locked by another transaction (skipped, never waited for: still queued)."""
    from rlstudio.runs.services.cluster import cluster_free_gpus as free_gpus
    from rlstudio.runs.services.queue_order import first_run_ahead

    policy = _policy()
    with transaction.atomic():
        ev = Evaluation.objects.select_related("owner").filter(pk=evaluation_id).first()
        if ev is None:
            return None  # deleted since the pass loaded it: it left the queue
        try:
            policy.lock_owner(user=ev.owner)
        except RunRefused:  # in a pass, a lock it did not take up front is busy: the next pass tries it
            return None
        # Never waiting for the row (the pass holds owners' locks; a delete locks rows, then owners):
        # one locked elsewhere is skipped, as one deleted, and stays queued for the next pass.
        ev = (Evaluation.objects.select_for_update(of=("self",), no_key=True, skip_locked=True)
              .filter(pk=evaluation_id).first())
        if ev is None:
            return None
        if ev.status != S.QUEUED:
            return False
        earlier = first_run_ahead(job=evaluation_job(ev))
        if earlier is not None:
            reason = f"waiting behind your earlier queued run #{earlier.pk}"  # no name: readers see it
        else:
            free = cluster_free_gpus if cluster_free_gpus is not None else free_gpus(needed=ev.gpus)
            reason = policy.job_reason(user=ev.owner, gpus=ev.gpus, cluster_free_gpus=free)
        if reason:
            from rlstudio.runs.services.admission import clip_reason

            reason = clip_reason(reason)
            if ev.queue_reason != reason:
                ev.queue_reason = reason
                ev.save(update_fields=["queue_reason"])
            return False
        ev.status, ev.started, ev.queue_reason = S.RUNNING, timezone.now(), ""
        ev.save(update_fields=["status", "started", "queue_reason"])
        # Sent at commit, as the runs' submissions (one broker try per pass: `runs.dispatch`); an
        # unreachable broker puts the evaluation back in the queue.
        send_after_commit(SUBMIT_TASK, evaluation_id,
                          on_unsent=lambda exc: evaluation_requeue_unsent(evaluation_id=evaluation_id, error=exc))
    return True


def evaluation_requeue_unsent(*, evaluation_id: int, error: Exception | str) -> bool:
    """An admitted evaluation whose submit task never reached the broker goes back to the queue (its
    place kept: its creation time) with SUBMIT_UNSENT_REASON, its quota no longer held; the
    reconcile's pass admits it again once the broker answers. Returns whether it moved (not when a
    task submitted it meanwhile)."""
    from rlstudio.runs.services.admission import SUBMIT_UNSENT_REASON

    log.warning("evaluation %s: its submission was not sent (%s); back to the queue", evaluation_id, error)
    with transaction.atomic():
        moved = (Evaluation.objects.filter(pk=evaluation_id, status=S.RUNNING, ray_submission_id="")
                 .update(status=S.QUEUED, started=None, queue_reason=SUBMIT_UNSENT_REASON))
    return bool(moved)


def evaluation_errors(error: str, error_log: str = "") -> tuple[str, str]:
    """What an evaluation stores for (error, error_log): the reason with its server paths replaced
    (whoever reads the run reads it) and the detail (the job log's tail, the error as it was: the
    owner's and staff's; `rlstudio.runs.failure.stored_error`), bounded and without NUL characters."""
    reason, detail = stored_error(error, error_log)
    return without_nul(reason[:4000]), without_nul(detail[-MAX_ERROR_LOG:])


def evaluation_finish(*, evaluation_id: int, status: str, error: str = "", error_log: str = "",
                      outcome: jobs.Outcome | None = None,
                      only_from: frozenset = ACTIVE_EVALUATION_STATUSES, unsubmitted: str | None = None) -> bool:
    """End an evaluation (once: only from `only_from`), storing the job's results and samples when
    given, and a failure's reason and detail apart (`evaluation_errors`). With `unsubmitted` (the
    reconcile ending one whose submit task it thinks lost: the submission id Ray had no job under),
    only while, under the row's lock, it still has no recorded submission and Ray still has no such
    job: a submit task that got there meanwhile wins. Returns whether it moved."""
    from rlstudio.runs import ray_jobs

    with transaction.atomic():
        ev = Evaluation.objects.select_for_update().filter(pk=evaluation_id).first()
        if ev is None or ev.status not in only_from:
            return False
        if unsubmitted and (ev.ray_submission_id or ray_jobs.job_info(unsubmitted) is not None):
            return False
        ev.error, ev.error_log = evaluation_errors(error, error_log)
        ev.status, ev.finished = status, timezone.now()
        fields = ["status", "error", "error_log", "finished"]
        if outcome is not None and outcome.results is not None:  # model text: PostgreSQL refuses NUL
            ev.results = without_nul(outcome.results)
            fields.append("results")
            EvaluationSample.objects.filter(evaluation=ev).delete()
            EvaluationSample.objects.bulk_create(
                [EvaluationSample(evaluation=ev, column=str(s["column"])[:20], prompt=s["prompt"],
                                  sample=s["sample"], score=float(s.get("score") or 0.0),
                                  correct=bool(s.get("correct")),
                                  answer=without_nul(str(s.get("answer") or "")[:200]),
                                  finish_reason=str(s.get("finish_reason") or "")[:20],
                                  turns=without_nul(s["turns"]))
                 for s in outcome.samples], batch_size=1000)
        ev.save(update_fields=fields)
        audit_record(actor=None, action=f"evaluation.{status}", obj=ev.subject,
                     data={"evaluation": ev.pk, "error": ev.error[:500]})
    return True


def evaluation_submit(*, evaluation_id: int) -> str:
    """Submit an admitted evaluation to Ray (the Celery task's one call). Idempotent: the submission id
    is derived from the evaluation and Ray refuses a second job under it."""
    from rlstudio.runs import ray_jobs
    from rlstudio.runs.errors import ConfigInvalid

    with transaction.atomic():
        ev = (Evaluation.objects.select_for_update(of=("self",)).select_related("run", "model", "dataset")
              .filter(pk=evaluation_id).first())
        if ev is None or ev.status != S.RUNNING:
            return "skipped: " + ("no such evaluation" if ev is None else f"it is {ev.status}")
        if ev.ray_submission_id:
            return "skipped: already submitted"
        if ev.stop_requested:
            ev.status, ev.finished = S.STOPPED, timezone.now()
            ev.save(update_fields=["status", "finished"])
            return "stopped before it was submitted"
        out = jobs.folder(ev)
        submission_id = jobs.submission_id_for(ev)
        try:
            steps = checkpoint_steps(ev.run) if ev.run_id is not None else {}
            spec_path = write_spec(jobs.build_spec(ev, steps=steps), out)
            created = ray_jobs.submit(submission_id=submission_id,
                                      entrypoint=jobs.entrypoint(spec_path=spec_path, out=out),
                                      env_vars=jobs.job_env(ev), num_cpus=settings.RLSTUDIO_RUN_NUM_CPUS,
                                      num_gpus=ev.gpus, job_gpus=ev.gpus,
                                      metadata={"rlstudio_evaluation": str(ev.pk), "owner": str(ev.owner_id)})
        except (OSError, ConfigInvalid, ray_jobs.RayUnavailable) as exc:
            ev.status, ev.finished = S.FAILED, timezone.now()
            ev.error, ev.error_log = evaluation_errors(f"could not submit the evaluation: {type(exc).__name__}: {exc}")
            ev.save(update_fields=["status", "finished", "error", "error_log"])
            return "failed"
        ev.ray_submission_id = submission_id
        ev.save(update_fields=["ray_submission_id"])
    return "submitted" if created else "already in Ray"


class EvaluationNotPermitted(PermissionError):
    """The user reads the evaluation but may not stop it (the API answers 403)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message, self.field = message, None


def check_can_manage_evaluation(*, user, ev: Evaluation, action: str) -> None:
    """Of a run: the run's owner or staff (RunNotPermitted otherwise); of a catalog model: the
    evaluation's owner or staff (EvaluationNotPermitted)."""
    from rlstudio.runs.services import check_can_manage

    if ev.run_id is not None:
        check_can_manage(user=user, run=ev.run, action=f"{action} an evaluation of")
    elif not can_manage_evaluation(user=user, ev=ev):
        raise EvaluationNotPermitted(f"only the evaluation's owner or staff may {action} it")


def evaluation_stop(*, user, ev: Evaluation) -> Evaluation:
    """Stop an evaluation (of a run: the run's owner or staff; of a catalog model: the evaluation's
    owner or staff): a queued one ends now, a running one's Ray job is asked to stop (the reconcile
    records it stopped once Ray says so). EvaluationRefused when it has finished already."""
    from rlstudio.runs import ray_jobs

    check_can_manage_evaluation(user=user, ev=ev, action="stop")
    with transaction.atomic():
        locked = Evaluation.objects.select_for_update().get(pk=ev.pk)
        if locked.status not in ACTIVE_EVALUATION_STATUSES:
            raise EvaluationRefused(f"evaluation {ev.pk} is {locked.status}: nothing to stop")
        if locked.status == S.QUEUED:
            locked.status, locked.finished = S.STOPPED, timezone.now()
            locked.save(update_fields=["status", "finished"])
        elif locked.stop_requested is None:
            locked.stop_requested = timezone.now()
            locked.save(update_fields=["stop_requested"])
        audit_record(actor=user, action="evaluation.stop", obj=ev.subject, data={"evaluation": locked.pk})
        submission_id = locked.ray_submission_id
    if submission_id:
        try:
            ray_jobs.stop(submission_id)
        except ray_jobs.RayUnavailable as exc:  # asked again by the reconcile
            log.warning("evaluation %s: stop not delivered: %s", ev.pk, exc)
    ev.refresh_from_db()
    return ev


_DELETE_HOOKS: list[Callable[[Evaluation], None]] = []


def on_evaluation_delete(hook: Callable[[Evaluation], None]) -> Callable[[Evaluation], None]:
    """Register `hook(ev)`, called inside `evaluation_delete`'s transaction with the evaluation (its row
    locked) before its records are deleted (an app keeping what it needs of them: the quotas app, its
    GPU-hours). An exception from a hook aborts the deletion."""
    if hook not in _DELETE_HOOKS:
        _DELETE_HOOKS.append(hook)
    return hook


def evaluation_delete(*, user, ev: Evaluation) -> None:
    """Delete a finished evaluation, its transcripts and its job folder (found from its own record):
    who may stop it may delete it. EvaluationRefused while it is queued or running (stop it first).
    The `on_evaluation_delete` hooks run in the transaction before the records go.
    The folder is removed only when it is a real folder inside the run's folder (or the models'
    evaluations folder), no link followed (`runs.folders.remove_tree_inside`); the records go anyway."""
    from rlstudio.runs.folders import remove_tree_inside

    check_can_manage_evaluation(user=user, ev=ev, action="delete")
    with transaction.atomic():
        locked = Evaluation.objects.select_for_update().get(pk=ev.pk)
        if locked.status in ACTIVE_EVALUATION_STATUSES:
            raise EvaluationRefused(f"evaluation {ev.pk} is {locked.status}: stop it before deleting it")
        out = jobs.folder(locked)
        root = jobs.model_evaluations_dir() if locked.run_id is None else run_folder(locked.run)
        audit_record(actor=user, action="evaluation.delete", obj=ev.subject,
                     data={"evaluation": locked.pk, "dataset": locked.dataset_id})
        for hook in list(_DELETE_HOOKS):
            hook(locked)
        locked.delete()
    remove_tree_inside(out, root)
