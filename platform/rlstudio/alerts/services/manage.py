"""Users' writes: their rules (per run or default), their notification settings, marking notifications
read. Each checks what it is given (AlertInvalid naming the field) and is audited; a webhook is
chosen by the name an operator registered it under, never by an address."""
from __future__ import annotations

from typing import Any

from django.db import transaction

from rlstudio.accounts.services import audit_record
from rlstudio.runs.models import Run
from rlstudio.text import ascii_uint

from .. import rules as R
from ..models import CHANNELS, LIFECYCLE_EVENTS, AlertRule, Notification, NotificationSettings, WebhookEndpoint
from .evaluation import rules_cache_clear

RULE_FIELDS = ("kind", "metric", "op", "threshold", "window", "enabled", "email", "webhook", "pause")


class AlertInvalid(ValueError):
    """A field of a rule or of the settings is not acceptable; `field` names it."""

    def __init__(self, field: str, message: str):
        self.field, self.message = field, message
        super().__init__(f"{field}: {message}")


def webhook_by_name(name: str | None) -> WebhookEndpoint | None:
    """The enabled operator webhook called `name` (None for no name); AlertInvalid when there is none."""
    if name in (None, ""):
        return None
    if isinstance(name, str) and "\x00" in name:
        raise AlertInvalid("webhook", "must not contain the NUL character (U+0000)")
    endpoint = WebhookEndpoint.objects.filter(name=name, enabled=True).first() if isinstance(name, str) else None
    if endpoint is None:
        known = ", ".join(WebhookEndpoint.objects.filter(enabled=True).values_list("name", flat=True)) or "none"
        raise AlertInvalid("webhook", f"no webhook named {str(name)[:64]!r}; registered by the operators: {known}")
    return endpoint


def _bool(data: dict[str, Any], name: str, default: bool) -> bool:
    value = data.get(name, default)
    if not isinstance(value, bool):
        raise AlertInvalid(name, "must be true or false")
    return value


def _number(value: Any, name: str) -> Any:
    if value is None or value == "":
        return None
    if name == "window":
        number = ascii_uint(value.strip()) if isinstance(value, str) else None
        return value if number is None else number
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            raise AlertInvalid(name, "must be a number") from None
    return value


def _clean(data: dict[str, Any], *, base: AlertRule | None = None) -> dict[str, Any]:
    def pick(name: str, default: Any) -> Any:
        return data[name] if name in data else default

    kind = pick("kind", base.kind if base else None)
    if not isinstance(kind, str):
        raise AlertInvalid("kind", f"one of {', '.join(R.CATALOGUE)}")
    try:
        metric, threshold, window, op = R.clean_rule(
            kind=kind, metric=pick("metric", base.metric if base else None),
            threshold=_number(pick("threshold", base.threshold if base else None), "threshold"),
            window=_number(pick("window", base.window if base else None), "window"),
            op=pick("op", base.op if base else None))
    except R.RuleInvalid as exc:
        raise AlertInvalid(exc.field, exc.message) from None
    webhook = (webhook_by_name(data["webhook"]) if "webhook" in data
               else (base.webhook if base else None))
    return {"kind": kind, "metric": metric, "threshold": threshold, "window": window, "op": op,
            "enabled": _bool(data, "enabled", base.enabled if base else True),
            "email": _bool(data, "email", base.email if base else False),
            "pause": _bool(data, "pause", base.pause if base else False), "webhook": webhook}


def rule_create(*, owner, data: dict[str, Any], run: Run | None = None) -> AlertRule:
    """A rule of `owner`'s: for `run` (which must be theirs) or, without one, a default for all their runs."""
    if run is not None and run.owner_id != owner.pk:
        raise AlertInvalid("run", "rules can be set only on your own runs")
    values = _clean(data)
    with transaction.atomic():
        rule = AlertRule.objects.create(owner=owner, run=run, **values)
        audit_record(actor=owner, action="alert_rule.create", obj=rule, data=_audit(rule))
    rules_cache_clear()
    return rule


def rule_update(*, rule: AlertRule, by, data: dict[str, Any]) -> AlertRule:
    """Change some fields of a rule (its owner only: the selectors never hand out another's)."""
    values = _clean(data, base=rule)
    with transaction.atomic():
        before = _audit(rule)
        for name, value in values.items():
            setattr(rule, name, value)
        rule.save()
        audit_record(actor=by, action="alert_rule.change", obj=rule, data={"before": before, "after": _audit(rule)})
    rules_cache_clear()
    return rule


def rule_delete(*, rule: AlertRule, by) -> None:
    with transaction.atomic():
        audit_record(actor=by, action="alert_rule.delete", obj=rule, data=_audit(rule))
        rule.delete()
    rules_cache_clear()


def rules_add_recommended(*, owner) -> list[AlertRule]:
    """The catalogue's recommended rules as `owner`'s defaults (in-app notification only), skipping
    the kinds and metrics they already have a default for."""
    have = set(AlertRule.objects.filter(owner=owner, run__isnull=True).values_list("kind", "metric"))
    made = []
    for kind in R.RECOMMENDED:
        spec = R.CATALOGUE[kind]
        if (kind, spec.metric) not in have:
            made.append(rule_create(owner=owner, data={"kind": kind}))
    return made


def _audit(rule: AlertRule) -> dict[str, Any]:
    return {"run": rule.run_id, "kind": rule.kind, "metric": rule.metric, "op": rule.op, "threshold": rule.threshold,
            "window": rule.window, "enabled": rule.enabled, "email": rule.email, "pause": rule.pause,
            "webhook": rule.webhook.name if rule.webhook_id else None}


def settings_update(*, user, routes: dict[str, Any] | None = None, webhook: Any = ...) -> NotificationSettings:
    """Where each lifecycle event goes ({event: [app | email | webhook, ...]}, events missing from
    `routes` keep theirs) and the operator webhook lifecycle events use (by name; None for none)."""
    with transaction.atomic():
        row, _ = NotificationSettings.objects.select_for_update().get_or_create(user=user)
        if routes is not None:
            if not isinstance(routes, dict):
                raise AlertInvalid("routes", "an object {event: [channel, ...]}")
            new = dict(row.routes)
            for event, channels in routes.items():
                if event not in LIFECYCLE_EVENTS:
                    raise AlertInvalid("routes", f"unknown event {str(event)[:40]!r}; known: {', '.join(LIFECYCLE_EVENTS)}")
                if not isinstance(channels, list) or any(c not in CHANNELS for c in channels):
                    raise AlertInvalid("routes", f"{event}: a list of channels from {', '.join(CHANNELS)}")
                new[event] = [c for c in CHANNELS if c in channels]
            row.routes = new
        if webhook is not ...:
            row.webhook = webhook_by_name(webhook)
        if any("webhook" in chans for chans in row.routes.values()) and row.webhook is None:
            raise AlertInvalid("webhook", "choose a webhook for the events routed to one")
        row.save()
        audit_record(actor=user, action="notification_settings.change", obj=None,
                     data={"routes": row.routes, "webhook": row.webhook.name if row.webhook else None})
    return row


def notifications_mark_read(*, user, ids: list[int] | None = None) -> int:
    """Mark the user's notifications read (all of them when `ids` is None); how many changed."""
    qs = Notification.objects.filter(user=user, read=False)
    if ids is not None:
        if not isinstance(ids, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in ids):
            raise AlertInvalid("ids", "a list of notification ids")
        qs = qs.filter(pk__in=ids)
    return qs.update(read=True)
