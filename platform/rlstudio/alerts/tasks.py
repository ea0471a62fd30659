"""Celery tasks of alerts: thin (take an id, call the delivery service), retries owned here.

    alerts.deliver(notification_id)  → e-mail it (when asked) and queue its webhook delivery
    alerts.webhook(delivery_id)      → one signed POST; retried with backoff (RLSTUDIO_WEBHOOK_BACKOFF_S
                                       doubling, at most RLSTUDIO_WEBHOOK_MAX_ATTEMPTS attempts in all)
"""
from __future__ import annotations

import logging
import smtplib

from celery import shared_task

log = logging.getLogger(__name__)


@shared_task(bind=True, name="alerts.deliver", acks_late=True, ignore_result=True)
def deliver(self, notification_id: int) -> str:
    from django.conf import settings

    from rlstudio.config.celery import publish

    from .models import Notification
    from .services.delivery import delivery_for, email_send

    n = Notification.objects.select_related("user", "run", "firing").filter(pk=notification_id).first()
    if n is None:
        return "no such notification"
    done = []
    delivery = delivery_for(n) if self.request.retries == 0 else None  # queued once, not per e-mail retry
    if delivery is not None:
        error = publish("alerts.webhook", delivery.pk)
        done.append("webhook queued" if error is None else f"webhook not queued: {error}")
    try:
        if email_send(n):
            done.append("e-mailed")
    except (smtplib.SMTPException, OSError) as exc:
        if self.request.retries >= 3:
            log.warning("alerts: e-mail of notification %s failed for good: %s", notification_id, exc)
            return "e-mail failed"
        raise self.retry(exc=exc, countdown=settings.RLSTUDIO_WEBHOOK_BACKOFF_S * 2 ** self.request.retries)
    return ", ".join(done) or "nothing to deliver"


@shared_task(bind=True, name="alerts.webhook", acks_late=True, ignore_result=True)
def webhook(self, delivery_id: int) -> str:
    from django.conf import settings

    from .services.delivery import backoff_s, delivery_attempt

    attempt = self.request.retries + 1
    final = attempt >= settings.RLSTUDIO_WEBHOOK_MAX_ATTEMPTS
    result = delivery_attempt(delivery_id, final=final)
    if result is None:
        return "nothing to do"
    if result.delivered:
        return f"delivered (HTTP {result.status})"
    if result.retry and not final:
        raise self.retry(countdown=backoff_s(attempt), max_retries=settings.RLSTUDIO_WEBHOOK_MAX_ATTEMPTS - 1)
    return f"failed: {result.error}"
