"""`manage.py rlstudio_stop_runs [--wait S]`: stop every active run with a checkpoint, for a shutdown.

The launcher (`make run`) runs it on the first Ctrl-C, before it stops any of its children: each
running run is stopped through `runs.services.run_stop` with a checkpoint (the Stop button with "save
a checkpoint" ticked: the trainer finishes its step, checkpoints and exits), by the platform itself
(no user is recorded as having stopped it); a
run still submitting is stopped once it runs; a run already stopping is waited for. Queued runs stay
queued (they start at the next start): the queue is paused meanwhile (`queue_paused`), so a slot a
stopped run frees is handed to no queued run that would die with the cluster. It then waits up to --wait seconds (default
RLSTUDIO_SHUTDOWN_STOP_S; 0: stop nothing) for them to reach a final state, following their jobs
with the reconcile's own `reconcile_run` (so it does not depend on Celery beat's rhythm), and prints
one line per run. Each run it asks gets the audit event `run.shutdown_stop` with the reason
"stopped: the platform was shut down". A run's name is its owner's text: it is printed with its control
characters escaped (`rlstudio.text.terminal_safe`), since these lines reach the operator's terminal.
"""
from __future__ import annotations

import logging
import time
from typing import Callable

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from rlstudio.accounts.services import audit_record
from rlstudio.runs import ray_jobs
from rlstudio.runs.models import Run, RunStatus
from rlstudio.runs.reconcile import reconcile_run
from rlstudio.runs.selectors import SHUTDOWN_STOP_ACTION
from rlstudio.runs.services import RunRefused, queue_paused, run_stop
from rlstudio.text import terminal_safe

S = RunStatus
ACTIVE = (S.SUBMITTING, S.RUNNING, S.STOPPING)
REASON = "stopped: the platform was shut down"
log = logging.getLogger(__name__)
POLL_S = 1.0


def _label(run: Run) -> str:
    return f"run #{run.pk} “{terminal_safe(run.name)}”"


def _ask(run: Run, say: Callable[[str], None]) -> bool:
    """Stop a running run with a checkpoint, as the platform; False when it had moved on meanwhile."""
    try:
        run_stop(run=run, by=None, checkpoint=True, reason=REASON)
    except RunRefused as exc:
        say(f"{_label(run)}: not stopped ({exc})")
        return False
    audit_record(actor=None, action=SHUTDOWN_STOP_ACTION, obj=run, data={"reason": REASON, "checkpoint": True})
    return True


def _follow(run: Run, say: Callable[[str], None]) -> None:
    """One reconcile of a submitted run that is starting or stopping (Ray's job state and the trainer's
    events → its status), as the beat's pass does; an error is said and left to the next poll."""
    if run.status not in (S.SUBMITTING, S.STOPPING) or not run.ray_submission_id:
        return
    try:
        reconcile_run(run)
    except ray_jobs.RayUnavailable:
        pass  # the next poll (or the beat) tries again
    except Exception as exc:  # noqa: BLE001 - one run's error must not leave the others unasked
        log.exception("shutdown: reconciling run %s failed", run.pk)
        say(f"{_label(run)}: could not be followed this time ({type(exc).__name__}); trying again")


def _ended(run: Run) -> str:
    step = f"step {run.step}" + (f" of {run.total_steps}" if run.total_steps else "")
    if run.status == S.STOPPED:
        saved = f"with a checkpoint ({run.checkpoint_path})" if run.checkpoint_path else "without a checkpoint"
        return f"{_label(run)}: stopped at {step} {saved}"
    return f"{_label(run)}: ended {run.status} at {step}"


def _active(exclude=()) -> dict[int, Run]:
    return {r.pk: r for r in Run.objects.filter(status__in=ACTIVE).exclude(pk__in=list(exclude))
            .select_related("owner").order_by("pk")}


def stop_active_runs(*, wait_s: float, say: Callable[[str], None], poll_s: float = POLL_S,
                     clock: Callable[[], float] = time.monotonic, pick_up_new: bool = False) -> dict[int, str]:
    """Stop the active runs with a checkpoint and wait up to `wait_s` for them; run id → final status
    (or the status it was still in when the wait ended). `pick_up_new`: a run that becomes active during
    the wait (the queue could not be paused) is stopped too."""
    runs = _active()
    if not runs:
        say("no active runs")
        return {}
    say(f"stopping {len(runs)} active run(s) with a checkpoint; waiting up to {wait_s:.0f} s")
    asked: set[int] = set()
    outcome: dict[int, str] = {}
    deadline = clock() + wait_s
    while True:
        if pick_up_new:
            for pk, run in _active(exclude=[*runs, *outcome]).items():
                say(f"{_label(run)}: became active during the shutdown; stopping it too")
                runs[pk] = run
        for pk, run in runs.items():  # every running run is asked first, then each is followed
            run.refresh_from_db()
            if run.status == S.RUNNING and pk not in asked:
                asked.add(pk)
                _ask(run, say)
        for pk, run in list(runs.items()):
            run.refresh_from_db()
            _follow(run, say)
            run.refresh_from_db()
            if run.is_terminal:
                say(_ended(run))
                outcome[pk] = run.status
                del runs[pk]
        if not runs or clock() >= deadline:
            break
        time.sleep(poll_s)
    for pk, run in runs.items():
        say(f"{_label(run)}: still {run.status} after the {wait_s:.0f} s wait (step {run.step}); "
            "if its job ends with the Ray head, the next start marks it lost and Resume continues "
            "from its last checkpoint")
        outcome[pk] = run.status
    return outcome


class Command(BaseCommand):
    help = "Stop every active run with a checkpoint and wait for them (the launcher's Ctrl-C)."

    def add_arguments(self, parser):
        parser.add_argument("--wait", type=float, default=None,
                            help="seconds to wait for the runs to end (default RLSTUDIO_SHUTDOWN_STOP_S; 0: stop nothing)")

    def handle(self, *args, wait: float | None = None, **options):
        wait_s = float(settings.RLSTUDIO_SHUTDOWN_STOP_S) if wait is None else wait
        if not wait_s >= 0:  # also NaN: its deadline never comes
            raise CommandError(f"--wait must be 0 or more seconds, not {wait_s}")

        def say(line: str) -> None:
            self.stdout.write(line)
            self.stdout.flush()

        if wait_s == 0:
            say("RLSTUDIO_SHUTDOWN_STOP_S is 0: runs are left as they are")
            return
        with queue_paused() as paused:  # a slot a stopped run frees goes to no queued run meanwhile
            if not paused:
                say("the queue could not be paused (a queue pass held it): a run admitted now is stopped too")
            stop_active_runs(wait_s=wait_s, say=say, pick_up_new=not paused)
