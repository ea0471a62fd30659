"""A run's record and its ingest token: creating a queued run, issuing and checking tokens."""
from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from rlstudio.accounts.services import audit_record

from ..models import TERMINAL_STATUSES, Run, RunStatus


S = RunStatus
INGEST_TOKEN_PREFIX = "rit_"


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
) -> tuple[Run, str]:
    """Create a queued run with a fresh per-run ingest token.

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
        )
        audit_record(actor=owner, action="run.create", obj=run, data={"name": name, "gpus": gpus})
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
