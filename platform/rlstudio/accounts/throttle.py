"""Throttling of failed logins and failed API tokens, per account and per address (django-axes).

Both kinds of failure are counted by django-axes in its database tables (`axes_accessattempt`), so
one lockout rule, one admin page and one command (`manage.py axes_reset`, `axes_reset_ip <ip>`,
`axes_reset_username <name>`) cover them:

- a login (the login page, the admin's login) counts against the username typed and the client's
  address; after `AXES_FAILURE_LIMIT` failures within `AXES_COOLOFF_TIME` either one is locked, and
  even the right password is refused until the cool-off has passed since the last failure;
- an API token (`Authorization: Token <key>`) counts against the address and against the token's
  public prefix (`token:<first 12 characters>`, what the profile page shows of a key). An invalid
  key names no account, so the prefix stands for it.
- a wrong old password on the password change (a signed-in session, which may not be its owner's)
  counts as a failed login of the account and the address, so a session cannot guess the password
  without end and take the account over.

The address is REMOTE_ADDR: behind a reverse proxy the ASGI server must put the client's address
there (`daphne --proxy-headers`), or every user shares the proxy's (docs/security.md).
"""
from __future__ import annotations

import math

from axes.handlers.proxy import AxesProxyHandler
from axes.helpers import get_cool_off
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from rlstudio.text import without_nul

TOKEN_PREFIX_CHARS = 12  # ApiToken.key_prefix


def cooloff_minutes(request: HttpRequest | None = None) -> int:
    """Whole minutes a lockout lasts after the last failure (at least 1)."""
    cool_off = get_cool_off(request)
    return max(1, math.ceil(cool_off.total_seconds() / 60)) if cool_off else 1


def lockout_message(request: HttpRequest | None = None, *, what: str = "failed logins") -> str:
    """What a locked-out client is told."""
    minutes = cooloff_minutes(request)
    return (f"Too many {what} for this account or from this address; "
            f"try again in {minutes} minute{'s' if minutes != 1 else ''}.")


def lockout_response(request: HttpRequest, original_response=None, credentials=None) -> HttpResponse:
    """AXES_LOCKOUT_CALLABLE: the login page again, with the lockout message, status 429.

    (axes calls this with `(request, credentials)` on the async path and with three arguments on the
    sync one; neither is needed here.)"""
    return render(request, "accounts/locked_out.html", {"message": lockout_message(request)},
                  status=429)


USERNAME_CHARS = 255  # axes' AccessAttempt.username column


def axes_username(request: HttpRequest, credentials: dict | None = None) -> str | None:
    """AXES_USERNAME_CALLABLE: the name a failure is counted and locked under, as axes reads it (the
    credentials' `username`, else the form's), with any NUL as U+FFFD and cut to USERNAME_CHARS: axes
    stores it in PostgreSQL, which refused a longer one (a 100,000-character username typed at the
    login page was a 500). No real account's name is that long, so nothing else changes."""
    if credentials:
        name = credentials.get("username")
    else:
        name = getattr(request, "data", request.POST).get("username")
    return None if name is None else without_nul(str(name))[:USERNAME_CHARS]


def _token_credentials(key: str) -> dict[str, str]:
    """The name a key's failures are counted under: its public prefix, with any NUL as U+FFFD (axes
    stores the name in PostgreSQL, which refuses a NUL; a `?token=%00` or a header can hold one)."""
    return {"username": "token:" + without_nul(key[:TOKEN_PREFIX_CHARS])}


def token_attempt_allowed(*, request: HttpRequest, key: str) -> bool:
    """False while this address, or this token's prefix, is locked out for failed tokens."""
    return AxesProxyHandler.is_allowed(request, _token_credentials(key))


def token_failure_record(*, request: HttpRequest, key: str) -> None:
    """Count one failed API token against the address and the token's prefix."""
    AxesProxyHandler.user_login_failed(sender=token_failure_record, credentials=_token_credentials(key),
                                       request=request)


def api_token_throttled(*, request: HttpRequest, key: str):
    """(the active ApiToken for `key` or None, locked): the one throttled token check of every way a
    token comes in (the API's `Authorization: Token` header, the upload gate, a websocket's `?token=`).

    While the address or the key's prefix is locked out, no token is looked up: (None, True), the
    right key too. A key that is not a token counts one failure; when that failure is the one over
    the limit the answer is (None, True) as well (and the request's axes flag is cleared, so that
    axes' middleware does not answer a request it never saw with the login page's lockout)."""
    from .services import api_token_authenticate

    if not token_attempt_allowed(request=request, key=key):
        return None, True
    token = api_token_authenticate(key=key)
    if token is not None:
        return token, False
    token_failure_record(request=request, key=key)
    locked = bool(getattr(request, "axes_locked_out", False))
    request.axes_locked_out = False
    return None, locked


def _password_credentials(user) -> dict[str, str]:
    return {"username": without_nul(user.get_username())[:USERNAME_CHARS]}


def password_check_allowed(*, request: HttpRequest, user) -> bool:
    """False while `user`'s account, or this address, is locked out (failed logins and wrong old
    passwords count alike): a signed-in session checking the account's password (the password change)
    is throttled as a login is."""
    return AxesProxyHandler.is_allowed(request, _password_credentials(user))


def password_failure_record(*, request: HttpRequest, user) -> bool:
    """Count one wrong password given for signed-in `user` (the password change's old password) as a
    failed login of the account and the address; whether that failure locked them out. The request's
    axes flag is cleared: the caller answers the lockout itself, not axes' middleware with the login page."""
    AxesProxyHandler.user_login_failed(sender=password_failure_record, credentials=_password_credentials(user),
                                       request=request)
    locked = bool(getattr(request, "axes_locked_out", False))
    request.axes_locked_out = False
    return locked
