"""Writes of the accounts app: API tokens (create, revoke, authenticate) and the audit log."""
from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import models, transaction
from django.utils import timezone

from .models import ApiToken, AuditEvent

API_TOKEN_PREFIX = "rls_"
# Writing last_used on every request would turn each API read into a write; once a minute is enough.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def key_hash(key: str) -> str:
    """The sha256 hex digest under which a key is stored."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class NewApiToken:
    """A token just created: `key` exists only here, never in the database."""

    token: ApiToken
    key: str


class ApiTokenRefused(ValueError):
    """A token that may not be created; `field` names the form field (`name`, the form's only one)."""

    def __init__(self, message: str, *, field: str = "name"):
        super().__init__(message)
        self.message, self.field = message, field


_TOKEN_LOCK_SPACE = 0x524C5354  # "RLST": the advisory-lock key space of one user's token creation


def api_token_create(*, user: AbstractBaseUser, name: str = "") -> NewApiToken:
    """Create a personal API token for `user`; the returned key is shown once and never stored.

    A user keeps at most RLSTUDIO_MAX_API_TOKENS_PER_USER tokens (staff included): past it
    ApiTokenRefused, counted under a per-user advisory lock so two creations at once cannot both pass."""
    from django.conf import settings
    from django.db import connection

    key = API_TOKEN_PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        with connection.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s, %s)", [_TOKEN_LOCK_SPACE, user.pk])
        cap = settings.RLSTUDIO_MAX_API_TOKENS_PER_USER
        held = ApiToken.objects.filter(user=user).count()
        if held >= cap:
            raise ApiTokenRefused(f"you already have {held} API tokens, the most one user may keep "
                                  f"(RLSTUDIO_MAX_API_TOKENS_PER_USER is {cap}); revoke one first")
        token = ApiToken.objects.create(
            user=user, name=name.strip()[:100], key_prefix=key[:12], key_hash=key_hash(key)
        )
        audit_record(actor=user, action="api_token.create", obj=token, data={"name": token.name})
    return NewApiToken(token=token, key=key)


def api_token_revoke(*, token: ApiToken, by: AbstractBaseUser | None) -> None:
    """Delete a token (it stops working at once)."""
    with transaction.atomic():
        audit_record(actor=by, action="api_token.revoke", obj=token, data={"name": token.name})
        token.delete()


def api_token_authenticate(*, key: str) -> ApiToken | None:
    """The active token for `key` (its user loaded), or None. Refreshes `last_used`."""
    if not key or not key.startswith(API_TOKEN_PREFIX):
        return None
    token = ApiToken.objects.select_related("user").filter(key_hash=key_hash(key)).first()
    if token is None or not token.user.is_active:
        return None
    now = timezone.now()
    if token.last_used is None or now - token.last_used > LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used=now)
        token.last_used = now
    return token


def audit_record(
    *,
    actor: AbstractBaseUser | None,
    action: str,
    obj: models.Model | None = None,
    data: dict[str, Any] | None = None,
) -> AuditEvent:
    """Append one audit event; `obj` gives the object type (its model label) and id."""
    if actor is not None and not getattr(actor, "is_authenticated", False):
        actor = None  # AnonymousUser is not a row
    return AuditEvent.objects.create(
        actor=actor,
        action=action,
        object_type=obj._meta.label_lower if obj is not None else "",
        object_id=str(obj.pk) if obj is not None and obj.pk is not None else "",
        data=data or {},
    )
