"""What the periodic reconcile checks on running runs (registered with runs' `on_reconcile_pass`):

- `no_heartbeat` rules: the trainer has not sent a heartbeat for the rule's seconds (the reconcile
  marks a run lost only after RLSTUDIO_HEARTBEAT_TIMEOUT_S; this tells the owner earlier). Fires once
  per silence: again only after a heartbeat came back. A run whose trainer has not reported yet is
  starting (imports, model load), not silent: it fires only past RLSTUDIO_RUN_STARTUP_TIMEOUT_S from
  the run's start (or the rule's seconds, when more), as the reconcile judges it.
- `gpu_hours` rules, a run's GPU-hour budget: its GPU-hours (GPUs x time running) reach 80% of the
  cap → a warning; 100% → the run is stopped with a checkpoint.
- the owner's monthly GPU-hour quota (quotas app): 80% → a warning, 100% → every running GPU run of
  theirs is stopped with a checkpoint. Each level is said once per month.

Runs with no such rule and no GPU cost a dictionary lookup (the rule cache); the pass reads the
running runs once.
"""
from __future__ import annotations

import logging
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from rlstudio.quotas.selectors import month_gpu_hours, quota_for
from rlstudio.runs.models import Run, RunStatus

from .. import rules as R
from ..models import AlertFiring, NotificationKind, NotificationLevel, NotificationSettings, RunAlertState
from .evaluation import run_rules
from .notify import notify, pause_after_commit

log = logging.getLogger(__name__)
S = RunStatus


def run_gpu_hours(run: Run, now: datetime) -> float:
    """GPUs x hours the run has been running (to its end, or now)."""
    if not run.started or run.gpus <= 0:
        return 0.0
    return run.gpus * max(((run.finished or now) - run.started).total_seconds(), 0.0) / 3600.0


def watch_running(now: datetime | None = None) -> dict[str, int]:
    """One pass over the running runs (the reconcile hook); counts of what it said or did."""
    now = now or timezone.now()
    done = {"heartbeat": 0, "budget_warn": 0, "budget_stop": 0, "month_warn": 0, "month_stop": 0}
    gpu_owners = set()
    for run in Run.objects.filter(status=S.RUNNING).select_related("owner").order_by("id"):
        if run.gpus > 0:
            gpu_owners.add(run.owner_id)
        rules = [r for r in run_rules(run) if R.CATALOGUE[r.kind].source != "metrics"]
        if rules:
            try:
                with transaction.atomic():
                    _watch_run(run, rules, now, done)
            except Exception:
                log.exception("alerts: watch of run %s failed", run.pk)
    for owner_id in sorted(gpu_owners):
        try:
            with transaction.atomic():
                _watch_month(owner_id, now, done)
        except Exception:
            log.exception("alerts: monthly budget of user %s failed", owner_id)
    return done


def _watch_run(run: Run, rules, now: datetime, done: dict[str, int]) -> None:
    row, _ = RunAlertState.objects.select_for_update().get_or_create(run_id=run.pk)
    flags = dict(row.flags)
    for rule in rules:
        key = f"r{rule.pk}"
        if rule.kind == "no_heartbeat":
            never = run.last_heartbeat is None  # still starting: start-up is not silence
            last = run.started if never else run.last_heartbeat
            since = (now - last).total_seconds() if last else None
            threshold = (max(rule.threshold, float(settings.RLSTUDIO_RUN_STARTUP_TIMEOUT_S)) if never
                         else rule.threshold)
            silent = R.heartbeat_silent(seconds_since=since, threshold_s=threshold)
            if silent and not flags.get(key):
                flags[key] = True
                done["heartbeat"] += 1
                message = (f"the trainer has not reported since the run started {since:.0f} s ago (start-up "
                           f"grace {threshold:g} s)" if never
                           else f"no heartbeat for {since:.0f} s (threshold {rule.threshold:g} s)")
                firing = AlertFiring.objects.create(
                    run=run, rule=rule, kind=rule.kind, step=run.step,
                    values={"seconds_since_heartbeat": round(since, 1), "threshold": threshold},
                    message=message)
                notify(user=run.owner, run=run, kind=NotificationKind.ALERT, event=rule.kind,
                       title=f"No heartbeat from run “{run.name}” for {since:.0f} s", body=firing.message,
                       level=NotificationLevel.WARNING, email=rule.email, webhook=rule.webhook, firing=firing)
                if rule.pause:
                    pause_after_commit(run_id=run.pk, firing_id=firing.pk, reason=f"rule {rule.pk} (no_heartbeat)")
            elif not silent and flags.get(key):
                flags[key] = False
        elif rule.kind == "gpu_hours":
            used = run_gpu_hours(run, now)
            level = R.budget_level(used=used, cap=rule.threshold)
            said = flags.get(key, "")
            if not level or level == said or (said == "stop"):
                continue
            flags[key] = level
            done[f"budget_{level}"] += 1
            firing = AlertFiring.objects.create(
                run=run, rule=rule, kind=rule.kind, step=run.step,
                values={"gpu_hours": round(used, 4), "cap": rule.threshold, "gpus": run.gpus},
                message=f"{used:.2f} of {rule.threshold:g} GPU-hours used ({100 * used / rule.threshold:.0f}%)")
            if level == "warn":
                notify(user=run.owner, run=run, kind=NotificationKind.BUDGET, event="run_warn",
                       title=f"Run “{run.name}” used {100 * used / rule.threshold:.0f}% of its GPU-hour budget",
                       body=firing.message + "\nIt is stopped with a checkpoint at 100%.",
                       level=NotificationLevel.WARNING, email=rule.email, webhook=rule.webhook, firing=firing)
            else:
                notify(user=run.owner, run=run, kind=NotificationKind.BUDGET, event="run_stop",
                       title=f"Stopping run “{run.name}”: its GPU-hour budget is spent",
                       body=firing.message + "\nIt is being stopped with a checkpoint; raise the budget and "
                                             "resume it from its page.",
                       level=NotificationLevel.CRITICAL, email=rule.email, webhook=rule.webhook, firing=firing)
                pause_after_commit(run_id=run.pk, firing_id=firing.pk, reason=f"rule {rule.pk} (gpu_hours)")
    if flags != row.flags:
        RunAlertState.objects.filter(run_id=run.pk).update(flags=flags)


def month_key(now: datetime) -> str:
    return now.strftime("%Y-%m")


def _watch_month(owner_id: int, now: datetime, done: dict[str, int]) -> None:
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.get(pk=owner_id)
    quota = quota_for(user=user)
    used = month_gpu_hours(user=user, now=now)
    level = R.budget_level(used=used, cap=quota.gpu_hours_per_month)
    if not level:
        return
    prefs, _ = NotificationSettings.objects.select_for_update().get_or_create(user=user)
    said = prefs.month_notices.get(month_key(now), "")
    running = Run.objects.filter(owner=user, status=S.RUNNING, gpus__gt=0).order_by("id")
    share = f"{used:.2f} of your {quota.gpu_hours_per_month:g} GPU-hours this month"
    if level == "warn" and not said:
        notify(user=user, run=None, kind=NotificationKind.BUDGET, event="month_warn", level=NotificationLevel.WARNING,
               title=f"You used {share}", body="At 100% your running GPU runs are stopped with a checkpoint.",
               email="email" in prefs.routes.get("failed", ()), webhook=None)
        done["month_warn"] += 1
    elif level == "stop":
        ids = list(running.values_list("id", flat=True))
        if said != "stop":
            notify(user=user, run=None, kind=NotificationKind.BUDGET, event="month_stop",
                   level=NotificationLevel.CRITICAL, title=f"Monthly GPU-hour quota spent: {share}",
                   body=f"Stopping your running GPU runs with a checkpoint: {', '.join(f'#{i}' for i in ids)}.",
                   email="email" in prefs.routes.get("failed", ()), webhook=None)
        for run_id in ids:  # also a run started later in the month by staff's hand
            done["month_stop"] += 1
            pause_after_commit(run_id=run_id, firing_id=0, reason="monthly GPU-hour quota spent")
    else:
        return
    prefs.month_notices = {month_key(now): level}
    prefs.save(update_fields=["month_notices"])
