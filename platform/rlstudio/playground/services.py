"""Writes of the playground: check a request (targets the user may use, bounded settings and messages),
create a session within the user's quota and queue its task, stop it, start and finish it.

Where a session runs: the Celery task `playground.run_session` (runner.py), on the worker's CPU; it
holds no GPU, so it takes nothing of the GPU quota. Its quota: one session per user queued or running
at a time (a second is refused with PlaygroundRefused until the first ends or is stopped), none for a
user whose quota allows no concurrent run (max_concurrent_runs 0), and at most
RLSTUDIO_PLAYGROUND_MAX_ACTIVE sessions on the site at once. Each runs at most RLSTUDIO_PLAYGROUND_MAX_S
seconds; a queued one that waited QUEUE_MAX_S without a worker is not started. Targets are catalog
models the user sees and checkpoints of runs they see, by id; the paths are found again from the
catalog and the run's own folder when it runs, never taken from the request.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import redis
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from rlstudio.accounts.services import audit_record
from rlstudio.text import without_nul

from . import streams
from .models import ACTIVE_SESSION_STATUSES, PlaygroundSession, SessionStatus
from .selectors import QUEUE_MAX_S, checkpoint_steps, stale_q, visible_model, visible_run

S = SessionStatus
RUN_TASK = "playground.run_session"
KEYS = ("a", "b")
MAX_TARGETS = 2
MAX_NEW_TOKENS = 512
MAX_TURNS = 8
MAX_MESSAGES = 40
MAX_MESSAGE_CHARS = 8000
MAX_TOTAL_CHARS = 32000
ROLES = ("system", "user", "assistant")
DEFAULT_SETTINGS: dict[str, Any] = {"temperature": 0.7, "top_p": 1.0, "top_k": -1, "max_new_tokens": 256,
                                    "seed": None, "tools": False, "max_turns": 4}


class PlaygroundInvalid(ValueError):
    """A request that cannot be answered; `field` names the input that is wrong."""

    def __init__(self, message: str, *, field: str):
        super().__init__(message)
        self.field = field


class PlaygroundRefused(RuntimeError):
    """A valid request refused now (another session of the user is active, the quota, the site cap)."""


def max_seconds() -> int:
    return int(settings.RLSTUDIO_PLAYGROUND_MAX_S)


def _int(value: Any, field: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise PlaygroundInvalid(f"{field} must be an integer, got {value!r}"[:300], field=field)
    if not lo <= value <= hi:
        raise PlaygroundInvalid(f"{field} must be between {lo} and {hi}, got {value}", field=field)
    return value


def _float(value: Any, field: str, lo: float, hi: float, *, open_low: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise PlaygroundInvalid(f"{field} must be a number, got {value!r}"[:300], field=field)
    if value > hi or value < lo or (open_low and value <= lo):
        raise PlaygroundInvalid(f"{field} must be in {'(' if open_low else '['}{lo}, {hi}], got {value}", field=field)
    return float(value)


def clean_settings(given: Any) -> dict[str, Any]:
    """The sampling settings, bounded (PlaygroundInvalid naming `settings.<key>`)."""
    if given is None:
        given = {}
    if not isinstance(given, dict):
        raise PlaygroundInvalid("settings must be an object", field="settings")
    unknown = sorted(set(given) - set(DEFAULT_SETTINGS))
    if unknown:
        raise PlaygroundInvalid(f"unknown setting {unknown[0]!r}; known: {sorted(DEFAULT_SETTINGS)}",
                                field=f"settings.{unknown[0]}"[:100])
    s = {**DEFAULT_SETTINGS, **given}
    top_k = _int(s["top_k"], "settings.top_k", -1, 1000)
    tools = s["tools"]
    if not isinstance(tools, bool):
        raise PlaygroundInvalid(f"settings.tools must be true or false, got {tools!r}"[:300], field="settings.tools")
    return {"temperature": _float(s["temperature"], "settings.temperature", 0.0, 2.0),
            "top_p": _float(s["top_p"], "settings.top_p", 0.0, 1.0, open_low=True),
            "top_k": -1 if top_k == 0 else top_k,
            "max_new_tokens": _int(s["max_new_tokens"], "settings.max_new_tokens", 1, MAX_NEW_TOKENS),
            "seed": None if s["seed"] is None else _int(s["seed"], "settings.seed", 0, 2**31 - 1),
            "tools": tools,
            "max_turns": _int(s["max_turns"], "settings.max_turns", 1, MAX_TURNS)}


def clean_messages(given: Any, field: str) -> list[dict[str, str]]:
    """A conversation: 1..MAX_MESSAGES {"role": system|user|assistant, "content": text}, a system
    message only first, ending with the user's message."""
    if not isinstance(given, list) or not given:
        raise PlaygroundInvalid(f"{field} must be a non-empty list of {{role, content}}", field=field)
    if len(given) > MAX_MESSAGES:
        raise PlaygroundInvalid(f"{field}: at most {MAX_MESSAGES} messages", field=field)
    out, total = [], 0
    for i, m in enumerate(given):
        where = f"{field}[{i}]"
        if not isinstance(m, dict) or set(m) - {"role", "content"}:
            raise PlaygroundInvalid(f"{where} must be an object with role and content only", field=where)
        role, content = m.get("role"), m.get("content")
        if role not in ROLES or (role == "system" and i > 0):
            raise PlaygroundInvalid(f"{where}.role must be one of {', '.join(ROLES)} (system only first), "
                                    f"got {role!r}"[:300], field=f"{where}.role")
        if not isinstance(content, str) or len(content) > MAX_MESSAGE_CHARS:
            raise PlaygroundInvalid(f"{where}.content must be a text of at most {MAX_MESSAGE_CHARS} characters",
                                    field=f"{where}.content")
        if "\x00" in content:  # PostgreSQL's jsonb refuses it; a user's message with one is bad input
            raise PlaygroundInvalid(f"{where}.content must not contain the NUL character (U+0000)",
                                    field=f"{where}.content")
        total += len(content)
        out.append({"role": role, "content": content})
    if total > MAX_TOTAL_CHARS:
        raise PlaygroundInvalid(f"{field}: at most {MAX_TOTAL_CHARS} characters in all", field=field)
    if out[-1]["role"] != "user" or not out[-1]["content"].strip():
        raise PlaygroundInvalid(f"{field} must end with a non-empty user message", field=field)
    return out


class TargetNotFound(LookupError):
    """A target the user may not use (or that does not exist): the API answers 404 naming the field."""

    def __init__(self, message: str, *, field: str):
        super().__init__(message)
        self.field = field


def _max_params() -> int:
    return int(settings.RLSTUDIO_PLAYGROUND_MAX_PARAMS)


def _check_size(model, field: str) -> None:
    n = getattr(model, "num_parameters", None) if model is not None else None
    if n and n > _max_params():
        raise PlaygroundInvalid(f"this model has {n:,} parameters; the playground answers with models of at most "
                                f"{_max_params():,} (it runs on the worker's CPU)", field=field)


def clean_target(user, given: Any, field: str) -> dict[str, Any]:
    """{"model": id} or {"run": id, "step": int}, checked against what the user may see."""
    from django.http import Http404

    if not isinstance(given, dict) or not given:
        raise PlaygroundInvalid(f"{field} must be {{model}} or {{run, step}}", field=field)
    unknown = sorted(set(given) - {"model", "run", "step", "messages"})
    if unknown:
        raise PlaygroundInvalid(f"{field}: unknown key {unknown[0]!r}", field=f"{field}.{unknown[0]}"[:100])
    if ("model" in given) == ("run" in given):
        raise PlaygroundInvalid(f"{field} must name a model or a run's checkpoint (run and step), not both",
                                field=field)
    if "model" in given:
        model_id = _int(given["model"], f"{field}.model", 1, 2**63 - 1)
        try:
            model = visible_model(user=user, model_id=model_id)
        except Http404:
            raise TargetNotFound(f"no model with id {model_id}", field=f"{field}.model") from None
        if getattr(model, "kind", "policy") == "reward":
            raise PlaygroundInvalid(f"model {model.pk} is a reward model: it scores, it does not chat",
                                    field=f"{field}.model")
        _check_size(model, f"{field}.model")
        return {"kind": "model", "model": model.pk, "run": None, "step": None, "label": model.name[:200]}
    run_id = _int(given["run"], f"{field}.run", 1, 2**63 - 1)
    try:
        run = visible_run(user=user, run_id=run_id)
    except Http404:
        raise TargetNotFound(f"no run with id {run_id}", field=f"{field}.run") from None
    step = _int(given.get("step"), f"{field}.step", 0, 10**9)
    steps = list(checkpoint_steps(run))
    if step not in steps:
        raise PlaygroundInvalid(f"run {run.pk} has no checkpoint at step {step}; its checkpoints: {steps or 'none'}",
                                field=f"{field}.step")
    _check_size(run.model, f"{field}.run")
    return {"kind": "checkpoint", "model": None, "run": run.pk, "step": step,
            "label": f"{run.name[:180]} step {step}"}


@dataclass
class SessionRequest:
    targets: list[dict[str, Any]]
    messages: dict[str, list[dict[str, str]]]
    settings: dict[str, Any]


def clean_request(user, data: Any) -> SessionRequest:
    if not isinstance(data, dict):
        raise PlaygroundInvalid("the body must be an object", field="body")
    given = data.get("targets")
    if not isinstance(given, list) or not 1 <= len(given) <= MAX_TARGETS:
        raise PlaygroundInvalid(f"targets must be a list of 1 or {MAX_TARGETS} targets", field="targets")
    settings_ = clean_settings(data.get("settings"))
    shared = clean_messages(data.get("messages"), "messages") if "messages" in data else None
    targets, messages = [], {}
    for i, t in enumerate(given):
        target = clean_target(user, t, f"targets[{i}]")
        key = KEYS[i]
        own = t.get("messages") if isinstance(t, dict) else None
        if own is not None:
            messages[key] = clean_messages(own, f"targets[{i}].messages")
        elif shared is not None:
            messages[key] = shared
        else:
            raise PlaygroundInvalid("messages is required (or messages in every target)", field="messages")
        targets.append({"key": key, **target})
    return SessionRequest(targets=targets, messages=messages, settings=settings_)


def expire_stale(*, user=None) -> int:
    """Sessions a worker never took or never finished (`selectors.stale_q`) are failed, saying so: the
    user's (at their next session), or everyone's (Celery beat, every 30 s). Returns how many."""
    now = timezone.now()
    mine = PlaygroundSession.objects.all() if user is None else PlaygroundSession.objects.filter(owner=user)
    stale = mine.filter(stale_q(now))
    return (stale.filter(status=S.QUEUED).update(status=S.FAILED, error="no worker took the session in time",
                                                 finished=now)
            + stale.filter(status=S.RUNNING).update(status=S.FAILED, error="the worker did not finish the session",
                                                    finished=now))


def _lock_targets(targets: list[dict[str, Any]]) -> None:
    """FOR KEY SHARE on the runs and models the targets name (`rowlocks.lock_for_use`, before the
    owner's lock: the order `run_delete` takes its locks in), so that a run is not deleted between the
    checks and the session's recording (`run_delete` locks the run, then refuses while a session on it
    is queued or running); one already deleted is PlaygroundInvalid on its target."""
    from rlstudio.catalog.models import ModelAsset
    from rlstudio.rowlocks import lock_for_use
    from rlstudio.runs.models import Run

    refs = []
    for i, t in enumerate(targets):
        kind = "model" if t["kind"] == "model" else "run"
        refs.append((f"targets[{i}].{kind}", ModelAsset if kind == "model" else Run, t[kind]))
    gone = lock_for_use(refs)
    if gone is not None:
        kind = gone.rsplit(".", 1)[1]
        raise PlaygroundInvalid(f"{gone}: the {kind} was deleted", field=gone)


def session_new(*, user, data: Any) -> PlaygroundSession:
    """Check the request, create the session within the user's quota and queue its task."""
    from rlstudio.quotas.selectors import quota_for
    from rlstudio.runs.services.queue_registry import quota_policy

    req = clean_request(user, data)
    with transaction.atomic():
        _lock_targets(req.targets)
        quota_policy().lock_user(user=user)
        expire_stale(user=user)
        if quota_for(user=user).max_concurrent_runs <= 0:
            raise PlaygroundRefused("your quota allows no concurrent job, so no playground session")
        if PlaygroundSession.objects.filter(owner=user, status__in=ACTIVE_SESSION_STATUSES).exists():
            raise PlaygroundRefused("you already have a playground session running; stop it or wait for it to end")
        active = PlaygroundSession.objects.filter(status__in=ACTIVE_SESSION_STATUSES,
                                                  created__gte=timezone.now() - timedelta(seconds=max_seconds() + 60))
        if active.count() >= int(settings.RLSTUDIO_PLAYGROUND_MAX_ACTIVE):
            raise PlaygroundRefused("the playground is busy (every slot of the site is in use); try again shortly")
        session = PlaygroundSession.objects.create(owner=user, targets=req.targets, messages=req.messages,
                                                   settings=req.settings)
        try:  # before the task is sent (on commit): a stale key of this id never reaches its page
            streams.reset(session.pk)
        except redis.RedisError as exc:
            raise PlaygroundRefused(f"the live channel (Redis) is unavailable: {exc}"[:300]) from None
        audit_record(actor=user, action="playground.start", obj=session,
                     data={"targets": [{k: t[k] for k in ("kind", "model", "run", "step")} for t in req.targets]})
        transaction.on_commit(lambda: _send(session.pk))
    return session


def _send(session_id: int) -> None:
    from rlstudio.config.celery import publish

    error = publish(RUN_TASK, session_id)
    if error is not None:
        session_finish(session_id=session_id, status=S.FAILED, error=f"could not queue the session: {error}")


def session_stop(*, user, session: PlaygroundSession, reason: str = "stopped by the user") -> PlaygroundSession:
    """Tell the session to stop (its worker hears it within a chunk); a queued one ends now."""
    try:
        streams.request_stop(session.pk, reason)
    except redis.RedisError as exc:  # a running session still ends at its time limit
        raise PlaygroundRefused(f"the live channel (Redis) is unavailable: {exc}"[:300]) from None
    with transaction.atomic():
        locked = PlaygroundSession.objects.select_for_update().get(pk=session.pk)
        if locked.status == S.QUEUED:
            locked.status, locked.stop_reason, locked.finished = S.STOPPED, reason[:100], timezone.now()
            locked.save(update_fields=["status", "stop_reason", "finished"])
        audit_record(actor=user, action="playground.stop", obj=locked, data={"reason": reason[:100]})
    session.refresh_from_db()
    return session


def session_start(*, session_id: int) -> PlaygroundSession | None:
    """queued -> running, or None when it must not run (gone, already taken, stopped, waited too long)."""
    with transaction.atomic():
        s = PlaygroundSession.objects.select_for_update().filter(pk=session_id).first()
        if s is None or s.status != S.QUEUED:
            return None
        now = timezone.now()
        reason = streams.stop_reason(s.pk)
        if reason or (now - s.created).total_seconds() > QUEUE_MAX_S:
            s.status, s.finished = (S.STOPPED, now) if reason else (S.FAILED, now)
            s.stop_reason = reason[:100]
            s.error = "" if reason else "no worker took the session in time"
            s.save(update_fields=["status", "finished", "stop_reason", "error"])
            return None
        s.status, s.started = S.RUNNING, now
        s.save(update_fields=["status", "started"])
    return s


def session_finish(*, session_id: int, status: str, results: dict[str, Any] | None = None, error: str = "",
                   stop_reason: str = "") -> bool:
    """End an active session once, storing what each target answered."""
    with transaction.atomic():
        s = PlaygroundSession.objects.select_for_update().filter(pk=session_id).first()
        if s is None or s.status not in ACTIVE_SESSION_STATUSES:
            return False
        s.status, s.stop_reason, s.finished = status, stop_reason[:100], timezone.now()
        s.error = without_nul(error[:4000])
        if results is not None:
            s.results = without_nul(results)  # model text: PostgreSQL's JSON refuses NUL
        s.save(update_fields=["status", "error", "stop_reason", "finished", "results"])
    return True


def run_sessions_delete(run) -> None:
    """Delete the sessions that answered from `run`'s checkpoints (none is live: the run's deletion
    refuses then, `selectors.run_delete_refusal`): the runs app's `on_run_delete` hook (registered in
    apps.py), called inside the run's deletion, so they go with it; audited as
    `playground.sessions_delete` (the run and the sessions' ids) when there were any."""
    from .selectors import sessions_on

    sessions = sessions_on(run_id=run.pk)
    ids = list(sessions.order_by("pk").values_list("pk", flat=True))
    if ids:
        audit_record(actor=None, action="playground.sessions_delete", data={"run": run.pk, "sessions": ids})
        sessions.delete()
