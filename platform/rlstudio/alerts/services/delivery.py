"""Delivering a notification outside the page: e-mail through Django's mail settings, and webhooks.

Called from the Celery tasks (alerts/tasks.py), never from a request. A webhook body is JSON fit for
Slack-style incoming webhooks (`text` is what Slack, Mattermost and the like show; `rlstudio` carries
the structured notification), POSTed with

    Content-Type: application/json
    X-RLStudio-Event: <kind>.<event>            (alert.kl_high, lifecycle.failed, budget.run_stop, ...)
    X-RLStudio-Delivery: <delivery id>          (the same on every attempt: receivers can drop repeats)
    X-RLStudio-Timestamp: <unix seconds>
    X-RLStudio-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>." + body, keyed by the endpoint's secret>

The secret comes from the environment variable the operator named (never stored in the database);
without it nothing is sent. Redirects are not followed (the address is the operator's, as registered).
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.mail import send_mail
from django.utils import timezone

from ..models import DeliveryStatus, Notification, WebhookDelivery, WebhookEndpoint
from .notify import email_enabled, notification_json

SIGNATURE_HEADER = "X-RLStudio-Signature"
TIMESTAMP_HEADER = "X-RLStudio-Timestamp"


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The signature header's value: sha256=<hex HMAC-SHA256("<timestamp>." + body)>."""
    mac = hmac.new(secret.encode("utf-8"), f"{int(timestamp)}.".encode("ascii") + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def verify(secret: str, timestamp: str, body: bytes, signature: str, *, now: float | None = None,
           tolerance_s: float = 300) -> bool:
    """What a receiver does: the signature matches and the timestamp is recent (replays refused)."""
    try:
        ts = int(timestamp)
    except (TypeError, ValueError):
        return False
    if abs((now if now is not None else time.time()) - ts) > tolerance_s:
        return False
    return hmac.compare_digest(sign(secret, ts, body), signature or "")


def run_url(run_id: int) -> str:
    return f"{settings.RLSTUDIO_PUBLIC_URL.rstrip('/')}/runs/{int(run_id)}/"


def webhook_body(n: Notification) -> dict[str, Any]:
    """The JSON a webhook receives for a notification: `text` (what Slack and the like show) and, unless
    the endpoint's body_format is "slack", `rlstudio` (the notification's fields)."""
    data = notification_json(n)
    if n.run_id:
        data["url"] = run_url(n.run_id)
        data["run_name"] = n.run.name if n.run else None
    icon = {"critical": ":rotating_light:", "warning": ":warning:"}.get(n.level, ":information_source:")
    text = f"{icon} *{n.title}*"
    if n.body:
        text += "\n" + n.body
    if n.run_id and data["url"] not in text:
        text += f"\n<{data['url']}|Open the run>"
    if n.webhook_id and n.webhook.body_format == "slack":
        return {"text": text}
    return {"text": text, "rlstudio": data}


def encode(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False, sort_keys=True).encode("utf-8")


# ------------------------------------------------------------------------------------------ e-mail
def email_send(n: Notification) -> bool:
    """E-mail the notification to its user (once: `emailed` is set). False when e-mail is off, the user
    has no address, or it was sent already; mail errors are raised (the task retries)."""
    if not n.email or n.emailed or not email_enabled() or not n.user.email:
        return False
    lines = [n.body] if n.body else []
    if n.run_id and run_url(n.run_id) not in n.body:
        lines.append(run_url(n.run_id))
    lines.append("\n--\nRL Studio notification settings: "
                 f"{settings.RLSTUDIO_PUBLIC_URL.rstrip('/')}/alerts/")
    send_mail(subject=f"[RL Studio] {n.title}", message="\n".join(lines),
              from_email=settings.DEFAULT_FROM_EMAIL, recipient_list=[n.user.email], fail_silently=False)
    Notification.objects.filter(pk=n.pk).update(emailed=timezone.now())
    return True


# ----------------------------------------------------------------------------------------- webhooks
class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        raise urllib.error.HTTPError(req.full_url, code, f"redirect to {newurl} not followed", headers, fp)


_opener = urllib.request.build_opener(_NoRedirect)


@dataclass(frozen=True)
class Attempt:
    """One POST's outcome: `retry` when trying again may help (network, 5xx, 408, 429)."""

    delivered: bool
    retry: bool
    status: int | None = None
    error: str = ""


def webhook_post(endpoint: WebhookEndpoint, body: bytes, *, delivery_id: int, event: str) -> Attempt:
    """POST `body` to the endpoint once, signed; never raises."""
    secret = os.environ.get(endpoint.secret_env, "")
    if not secret:
        return Attempt(False, False, error=f"{endpoint.secret_env} is not set in this process's environment: "
                                           "nothing sent unsigned")
    if not endpoint.url.lower().startswith(("http://", "https://")):
        return Attempt(False, False, error="only http(s) URLs are delivered to")
    ts = int(time.time())
    req = urllib.request.Request(endpoint.url, data=body, method="POST", headers={
        "Content-Type": "application/json", "User-Agent": "RL-Studio-Webhooks/1",
        "X-RLStudio-Event": event, "X-RLStudio-Delivery": str(delivery_id),
        TIMESTAMP_HEADER: str(ts), SIGNATURE_HEADER: sign(secret, ts, body)})
    try:
        with _opener.open(req, timeout=settings.RLSTUDIO_WEBHOOK_TIMEOUT_S) as resp:
            resp.read(4096)
            return Attempt(True, False, status=resp.status)
    except urllib.error.HTTPError as exc:
        retry = exc.code >= 500 or exc.code in (408, 429)
        return Attempt(False, retry, status=exc.code, error=f"HTTP {exc.code}: {str(exc.reason)[:300]}")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return Attempt(False, True, error=f"{type(exc).__name__}: {str(getattr(exc, 'reason', exc))[:300]}")


def delivery_for(n: Notification) -> WebhookDelivery | None:
    """The notification's delivery row to its webhook (made once, with the body every attempt sends)."""
    if n.webhook_id is None:
        return None
    delivery, _ = WebhookDelivery.objects.get_or_create(endpoint_id=n.webhook_id, notification=n,
                                                        defaults={"body": webhook_body(n)})
    return delivery


def delivery_attempt(delivery_id: int, *, final: bool) -> Attempt | None:
    """One attempt of a delivery, recorded (attempts, last status, error; delivered or, when it cannot
    succeed or `final`, failed). None when there is nothing to do (delivered or failed already)."""
    d = WebhookDelivery.objects.select_related("endpoint", "notification").filter(pk=delivery_id).first()
    if d is None or d.status != DeliveryStatus.PENDING:
        return None
    if not d.endpoint.enabled:
        result = Attempt(False, False, error="the endpoint is disabled")
    else:
        n = d.notification
        result = webhook_post(d.endpoint, encode(d.body), delivery_id=d.pk, event=f"{n.kind}.{n.event}")
    now = timezone.now()
    status = (DeliveryStatus.DELIVERED if result.delivered
              else DeliveryStatus.FAILED if (final or not result.retry) else DeliveryStatus.PENDING)
    WebhookDelivery.objects.filter(pk=d.pk).update(
        attempts=d.attempts + 1, response_status=result.status, error=result.error, last_attempt=now,
        status=status, delivered=now if result.delivered else None)
    return result


def backoff_s(attempt: int) -> float:
    """Seconds before attempt `attempt + 1` (1-based): RLSTUDIO_WEBHOOK_BACKOFF_S doubling, at most 4 min."""
    return min(settings.RLSTUDIO_WEBHOOK_BACKOFF_S * (2 ** (attempt - 1)), 240.0)
