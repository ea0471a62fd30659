"""A run's record and its ingest token: creating a queued run, issuing and checking tokens.

A new run is handed, inside the transaction that creates it, to the `on_run_created` hooks with the
sample retention chosen at its launch (the telemetry app registers the one that stores it, or copies a
resumed, cloned or forked run's parent's, so that runs never imports telemetry)."""
from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Any, Callable

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from rlstudio.accounts.services import audit_record
from rlstudio.retention import Retention

from ..models import TERMINAL_STATUSES, Run, RunStatus


S = RunStatus
INGEST_TOKEN_PREFIX = "rit_"


_CREATED_HOOKS: list[Callable[..., None]] = []


def on_run_created(hook: Callable[..., None]) -> Callable[..., None]:
    """Register `hook(*, run, retention)` to run inside the transaction that creates a run (idempotent
    per function); `retention` is the Retention chosen at the launch, or None. A hook that raises rolls
    the new run back."""
    if hook not in _CREATED_HOOKS:
        _CREATED_HOOKS.append(hook)
    return hook


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def run_create(
    *,
    owner: AbstractBaseUser,
    name: str,
    dataset,
    model,
    config: dict[str, Any],
    gpus: int,
    val_dataset=None,
    parent: Run | None = None,
    parent_kind: str = "",
    total_steps: int | None = None,
    tool_set: str = "",
    resume_from: str = "",
    reward_model=None,
    project_id: int | None = None,
    fork_changes: list[dict[str, Any]] | None = None,
    tags: list[str] | None = None,
    retention: Retention | None = None,
) -> tuple[Run, str]:
    """Create a queued run with a fresh per-run ingest token, `tags` (already cleaned) and the sample
    `retention` chosen at its launch (None: its parent's for a resume, clone or fork, else keep all),
    which the `on_run_created` hooks store in the same transaction.

    Returns (run, token): the plaintext token exists only in this return value; the run stores
    its sha256. The trainer presents it as `Authorization: Bearer <token>` to report events.
    """
    if gpus < 0:
        raise ValueError(f"gpus must be >= 0, got {gpus}")
    token = INGEST_TOKEN_PREFIX + secrets.token_urlsafe(32)
    # A resume or a fork starts at its checkpoint's step (its first step is the next one), so the lists
    # and its page say where it goes on from, not 0, while it waits and starts (step never goes back).
    from trainer.step_dirs import step_of

    start_step = (step_of(resume_from) or 0) if resume_from else 0
    with transaction.atomic():
        run = Run.objects.create(
            owner=owner,
            name=name,
            dataset=dataset,
            val_dataset=val_dataset,
            model=model,
            reward_model=reward_model,
            config=config,
            gpus=gpus,
            status=S.QUEUED,
            ingest_token_hash=token_hash(token),
            parent=parent,
            parent_kind=parent_kind,
            total_steps=total_steps,
            tool_set=tool_set,
            resume_from=resume_from,
            step=start_step,
            project_id=project_id,
            fork_changes=fork_changes,
            tags=list(tags or []),
        )
        for hook in list(_CREATED_HOOKS):
            hook(run=run, retention=retention)
        data: dict[str, Any] = {"name": name, "gpus": gpus}
        if retention is not None:
            data["retention"] = retention.as_dict()
        audit_record(actor=owner, action="run.create", obj=run, data=data)
    return run, token


def run_token_check(*, run: Run, token: str) -> bool:
    """Whether `token` is this run's ingest token (constant-time comparison of the hashes); a run in a
    final state accepts none."""
    if not token or not run.ingest_token_hash or run.status in TERMINAL_STATUSES:
        return False
    return hmac.compare_digest(token_hash(token), run.ingest_token_hash)


def run_issue_ingest_token(*, run: Run) -> str:
    """A fresh one-run ingest token (stored as its hash; the plaintext goes to the job only)."""
    token = INGEST_TOKEN_PREFIX + secrets.token_urlsafe(32)
    Run.objects.filter(pk=run.pk).update(ingest_token_hash=token_hash(token))
    run.ingest_token_hash = token_hash(token)
    return token
