"""Reads of alerts, always narrowed to what the caller may see: their own rules, settings and
notifications (another user's are absent: 404); a run's firings and budget for whoever may see the run."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import QuerySet
from django.http import Http404
from django.utils import timezone

from rlstudio.quotas.selectors import month_gpu_hours, quota_for
from rlstudio.runs.models import Run
from rlstudio.runs.selectors import visible_runs

from . import rules as R
from .models import AlertFiring, AlertRule, Notification, NotificationSettings, RunAlertState, WebhookEndpoint
from .services.evaluation import run_rules
from .services.lifecycle import settings_for
from .services.watch import month_key, run_gpu_hours


def rules_for(*, user: AbstractBaseUser, run: Run | None = None, defaults_only: bool = False) -> QuerySet[AlertRule]:
    """The user's own rules (all, one run's own, or their defaults)."""
    qs = AlertRule.objects.filter(owner=user).select_related("webhook", "run").order_by("id")
    if defaults_only:
        return qs.filter(run__isnull=True)
    if run is not None:
        return qs.filter(run=run)
    return qs


def rule_get_for(*, user: AbstractBaseUser, rule_id) -> AlertRule:
    """One of the user's rules, or Http404 (another user's rule does not exist for them)."""
    try:
        rule = rules_for(user=user).filter(pk=int(rule_id)).first()
    except (TypeError, ValueError):
        rule = None
    if rule is None:
        raise Http404("no such rule")
    return rule


def own_run_for(*, user: AbstractBaseUser, run_id) -> Run:
    """A run of the user's own (rules are set on one's own runs), or Http404."""
    try:
        run = Run.objects.filter(pk=int(run_id), owner=user).first()
    except (TypeError, ValueError):
        run = None
    if run is None:
        raise Http404("no such run")
    return run


def visible_run_for(*, user: AbstractBaseUser, run_id) -> Run:
    try:
        run = visible_runs(Run.objects.filter(pk=int(run_id)), user=user).first()
    except (TypeError, ValueError):
        run = None
    if run is None:
        raise Http404("no such run")
    return run


def notifications_for(*, user: AbstractBaseUser, unread: bool = False) -> QuerySet[Notification]:
    qs = Notification.objects.filter(user=user).select_related("firing").order_by("-id")
    return qs.filter(read=False) if unread else qs


def unread_count(*, user: AbstractBaseUser) -> int:
    return Notification.objects.filter(user=user, read=False).count()


def firings_for_run(*, run: Run, limit: int = 500) -> list[AlertFiring]:
    """The run's firings, oldest first (the last `limit`); the caller has checked the run is visible."""
    rows = list(AlertFiring.objects.filter(run=run).select_related("rule").order_by("-id")[:limit])
    return rows[::-1]


def webhooks_available() -> QuerySet[WebhookEndpoint]:
    """The operators' enabled webhooks, by name (no address: users never see or give one)."""
    return WebhookEndpoint.objects.filter(enabled=True).order_by("name")


def settings_of(*, user: AbstractBaseUser) -> NotificationSettings:
    return settings_for(user)


@dataclass(frozen=True)
class RunBudget:
    """A run's GPU-hours next to its cap (the effective gpu_hours rule; None: no cap)."""

    gpus: int
    gpu_hours: float
    cap: float | None
    level: str  # "", "warn", "stop"
    paused_by: str  # the message of the firing that paused the run ("" when none did)

    @property
    def percent(self) -> float | None:
        return None if not self.cap else 100.0 * self.gpu_hours / self.cap


def run_budget(*, run: Run, now: datetime | None = None) -> RunBudget:
    now = now or timezone.now()
    caps = [r.threshold for r in run_rules(run, cached=False) if r.kind == "gpu_hours"]
    cap = min(caps) if caps else None
    used = run_gpu_hours(run, now)
    paused = AlertFiring.objects.filter(run=run, paused=True).order_by("-id").first()
    return RunBudget(gpus=run.gpus, gpu_hours=round(used, 4), cap=cap,
                     level=R.budget_level(used=used, cap=cap) if cap else "",
                     paused_by=paused.message if paused else "")


@dataclass(frozen=True)
class MonthBudget:
    """The user's monthly GPU-hours against their quota, and what the watch said about it."""

    used: float
    quota: float
    level: str
    said: str

    @property
    def percent(self) -> float | None:
        return None if self.quota <= 0 else 100.0 * self.used / self.quota


def month_budget(*, user: AbstractBaseUser, now: datetime | None = None) -> MonthBudget:
    now = now or timezone.now()
    quota = quota_for(user=user).gpu_hours_per_month
    used = month_gpu_hours(user=user, now=now)
    row = NotificationSettings.objects.filter(user=user).first()
    said = row.month_notices.get(month_key(now), "") if row else ""
    level = R.budget_level(used=used, cap=quota) if (quota > 0 or used > 0) else ""
    return MonthBudget(used=round(used, 4), quota=quota, level=level, said=said)


def active_run_budgets(*, user: AbstractBaseUser) -> list[tuple[Run, RunBudget]]:
    """The user's submitting / running / stopping runs with their budgets (the quota page)."""
    from rlstudio.runs.models import ACTIVE_STATUSES

    runs = Run.objects.filter(owner=user, status__in=ACTIVE_STATUSES).order_by("id")
    return [(run, run_budget(run=run)) for run in runs]


def run_state_flags(*, run: Run) -> dict:
    row = RunAlertState.objects.filter(run=run).first()
    return dict(row.flags) if row else {}
