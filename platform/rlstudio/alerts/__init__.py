"""Watchdogs: alert rules on a run's training health, notifications (page header, e-mail, operator
webhooks), lifecycle notifications, auto-pause and GPU-hour budgets (docs/alerts.md)."""
