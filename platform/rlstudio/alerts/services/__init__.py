"""Writes of the alerts app, by concern; every public service is importable from here.

    evaluation  the ingest hook: rules evaluated on each stored batch's metrics; a firing
    watch       the reconcile hook: no heartbeat, a run's GPU-hour budget, the monthly quota
    lifecycle   the transition hook: finished, failed, stopped, lost, started after the queue
    notify      a notification: stored, pushed live after the commit, delivery queued; auto-pause
    delivery    e-mail and signed webhooks (called by the Celery tasks)
    manage      users' rules, settings, marking read (AlertInvalid names the field)
"""
from .evaluation import evaluate_stored, fire, rules_cache_clear, run_rules
from .lifecycle import on_transition, settings_for
from .manage import (
    AlertInvalid,
    notifications_mark_read,
    rule_create,
    rule_delete,
    rule_update,
    rules_add_recommended,
    settings_update,
    webhook_by_name,
)
from .notify import email_enabled, notification_json, notify, pause_run, push_to_user, user_group
from .watch import run_gpu_hours, watch_running

__all__ = [
    "AlertInvalid", "email_enabled", "evaluate_stored", "fire", "notification_json", "notifications_mark_read",
    "notify", "on_transition", "pause_run", "push_to_user", "rule_create", "rule_delete", "rule_update",
    "rules_add_recommended", "rules_cache_clear", "run_gpu_hours", "run_rules", "settings_for", "settings_update",
    "user_group", "watch_running", "webhook_by_name",
]
