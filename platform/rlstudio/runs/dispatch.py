"""Sending the runs' Celery tasks once the caller's transaction commits, and what to do when Redis is down.

A launch or a stop answers a web request, and the task it sends is published from that request (in
`transaction.on_commit`: the worker must see the committed rows). When the broker does not answer,
publishing raises kombu's `OperationalError` within the bounded timeouts of the Celery settings
(`CELERY_BROKER_CONNECTION_TIMEOUT`, the socket timeouts in `CELERY_BROKER_TRANSPORT_OPTIONS`,
`CELERY_TASK_PUBLISH_RETRY_POLICY`; kombu's defaults wait forever on a Redis that accepts the TCP
connection and never answers). `send_after_commit` catches that, logs it and hands the error to the
caller's `on_unsent`, which leaves the run where the periodic reconcile finds it again once the broker
is back (a submit goes back to the queue; a stop stays `stopping` and is forced after the grace).
The web request itself answers normally instead of a 500.

The runs' tasks ignore their results (nobody reads them), so publishing never touches Celery's
result store either: its Redis pub/sub consumer retries for about 20 s and then refuses to work
until the process restarts.
"""
from __future__ import annotations

import contextvars
import logging
import time
from contextlib import contextmanager
from typing import Callable

from django.db import transaction

from rlstudio.config.celery import publish

log = logging.getLogger(__name__)


# How long a failed publish counts as the broker being down when nothing was published since.
BROKER_DOWN_TTL_S = 30.0
# When (time.monotonic) this process's last publish failed, if none succeeded since; else None.
_last_failed: list[float | None] = [None]


def broker_was_down() -> bool:
    """Whether the last task this process published failed (the broker unreachable then), within the
    last BROKER_DOWN_TTL_S seconds: a queue pass admits one job only while it is so, the one whose
    submission tries the broker again. Past that it is forgotten (the broker may be back)."""
    failed = _last_failed[0]
    return failed is not None and time.monotonic() - failed < BROKER_DOWN_TTL_S


def broker_was_down_forget() -> None:
    """Forget the last publish's failure (tests: each starts as a fresh process would)."""
    _last_failed[0] = None


def send_now(task_name: str, *args) -> Exception | None:
    """Publish `runs.<task_name>(*args)` (or `task_name` as it is when it names its app: "app.task");
    returns the broker's error instead of raising it."""
    name = task_name if "." in task_name else f"runs.{task_name}"
    error = publish(name, *args)
    _last_failed[0] = time.monotonic() if error is not None else None
    if error is not None:
        log.warning("could not send %s%r: the task queue is unreachable: %s", name, args, error)
    return error


# Inside `one_broker_try`: [the broker's first error], or [] while none failed.
_BATCH: contextvars.ContextVar[list | None] = contextvars.ContextVar("rlstudio_dispatch_batch", default=None)


@contextmanager
def one_broker_try():
    """Within it, once one `send_after_commit` found the broker unreachable, the later ones do not try
    it again (each would wait for the broker's timeouts): their `on_unsent` gets that first error. A
    queue pass sends its submissions so when it commits."""
    token = _BATCH.set([])
    try:
        yield
    finally:
        _BATCH.reset(token)


def send_after_commit(task_name: str, *args, on_unsent: Callable[[Exception], None] | None = None) -> None:
    """Publish the task once the current transaction commits; `on_unsent(error)` if the broker fails."""

    def send() -> None:
        batch = _BATCH.get()
        try:
            error = batch[0] if batch else send_now(task_name, *args)
            if error is not None and batch is not None and not batch:
                batch.append(error)
        except Exception as exc:  # noqa: BLE001 - not the broker's error (this task's own): not sent
            log.exception("could not send the task %s%r", task_name, args)
            error = exc
        if error is not None and on_unsent is not None:
            on_unsent(error)

    # robust: one callback that raises (an on_unsent's error) never stops the later ones (the other
    # jobs a pass admitted) from being sent; Django logs it.
    transaction.on_commit(send, robust=True)
