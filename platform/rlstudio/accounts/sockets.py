"""A user's own websocket group, told when the user's record changes, so that open sockets check them again.

Every websocket of a signed-in user (a run's `/ws/runs/<id>/`, `/ws/playground/<id>/`,
`/ws/notifications/`) joins `sockets_group(user.pk)`. After a save of the user's record commits (an
operator deactivates the user or takes staff away; any save but a login's `last_login`, and not the
creation), one `{"type": "user.changed"}` message goes to that group: its handler
(`RecheckedSocket.user_changed`, every such consumer's) reads the user from the database again and
closes with 4403 a socket its user may no longer have (every socket of a deactivated user). A user who
joins or leaves a team gets the same message (`accounts.teams`: a team's shares are theirs to read for as
long as they are a member). One
receiver here, in the app that owns the user, so that the apps whose consumers listen (telemetry,
playground, alerts) import accounts and never each other.
A failed send is logged: the change stands, and those sockets see it at their next re-check.

Not every change sends a message: a bulk `User.objects.filter(...).update(is_active=False)`, a run's
sharing changed without `run_share` (a queryset update, raw SQL) or a failed send say nothing. So
each of those sockets also checks its user and access again on its own every
RLSTUDIO_SOCKET_RECHECK_S seconds (`RecheckedSocket`): access revoked by any means ends within that
interval.
"""
from __future__ import annotations

import asyncio
import logging
from importlib import import_module
from typing import Awaitable, Callable

from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models.signals import post_save

log = logging.getLogger(__name__)

USER_CHANGED = {"type": "user.changed"}
CLOSE_FORBIDDEN = 4403  # HTTP 403 in the application range of close codes: the access is gone


def sockets_group(user_id: int) -> str:
    """The Channels group every websocket of user `user_id` joins (whatever it streams)."""
    return f"user.sockets.{int(user_id)}"


def group_send_bounded(group: str, message: dict) -> None:
    """Send `message` to the Channels `group` from sync code, giving up (asyncio.TimeoutError) after
    RLSTUDIO_BROADCAST_TIMEOUT_S: a hung Redis must not hold the request or task that sends it."""

    async def send() -> None:
        await asyncio.wait_for(get_channel_layer().group_send(group, message),
                               timeout=settings.RLSTUDIO_BROADCAST_TIMEOUT_S)

    async_to_sync(send)()


def user_changed_send(user_id: int) -> None:
    """Tell every open websocket of the user that their record changed (sync code, after the commit)."""
    group_send_bounded(sockets_group(user_id), dict(USER_CHANGED))


@database_sync_to_async
def still_signed_in(scope) -> bool:
    """Whether what signed a socket's user in at its handshake still does: for a `?token=` socket its
    API token still exists (a revoked token is deleted); for a session socket its session, read from the
    store again, still signs that user in (Django's own check: a password changed elsewhere changes the
    session hash and signs every other session out; a sign-out deletes the session)."""
    from types import SimpleNamespace

    from django.contrib import auth

    from .models import ApiToken
    from .ws_auth import TOKEN_ID_SCOPE_KEY

    user = scope.get("user")
    if user is None or not getattr(user, "is_authenticated", False):
        return False
    if TOKEN_ID_SCOPE_KEY in scope:
        token_id = scope[TOKEN_ID_SCOPE_KEY]
        return token_id is not None and ApiToken.objects.filter(pk=token_id, user_id=user.pk).exists()
    session_key = getattr(scope.get("session"), "session_key", None)
    if not session_key:
        return False
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    now = auth.get_user(SimpleNamespace(session=store))
    return bool(now.is_authenticated) and now.pk == user.pk


@database_sync_to_async
def active_user(user):
    """`user` as the database holds them now, or None when they are gone or no longer active."""
    return get_user_model().objects.filter(pk=getattr(user, "pk", None), is_active=True).first()


async def leave_groups(layer, channel_name: str, groups, *, what: str) -> None:
    """Take `channel_name` out of each of `groups` (None entries skipped). A failed discard (Redis is
    down: the layer has already dropped the membership) is logged, naming the socket as `what`."""
    for group in groups:
        if group is None:
            continue
        try:
            await layer.group_discard(group, channel_name)
        except Exception as exc:  # at worst this process stays subscribed to the group and ignores it
            log.warning("%s: group_discard failed: %r", what, exc)


class RecheckedSocket:
    """Mixin for a signed-in user's websocket consumer (listed before Channels' consumer class): the one
    access re-check of an open socket, `recheck`, and its periodic run.

    The consumer provides `still_allowed` (may the socket's user, as the database holds them now,
    still have what the socket streams? read through database_sync_to_async) and
    `leave_socket_groups` (leave every group the socket joined; a second call does nothing).
    `recheck` asks `still_signed_in` (the session or API token of the handshake still signs the user in:
    a password changed elsewhere, a sign-out or a revoked token ends the socket as it ends that
    session's pages) and `still_allowed` and, on False, marks the socket `revoked` (its consumer forwards
    nothing more), leaves its groups and closes it with 4403 (CLOSE_FORBIDDEN). It is the only
    re-check: the `user.changed` handler here, the consumer's own group message handlers (a run's
    `run.access_changed`) and the periodic task all await it.

    One asyncio task per socket runs it every RLSTUDIO_SOCKET_RECHECK_S seconds: `recheck_start`
    (once the socket is accepted) starts it, and it ends when `recheck` answers False, on
    `recheck_stop` (the consumer's disconnect), and in any case when the consumer itself ends (its
    `__call__` returns, raises or is cancelled), so no task outlives its socket. A check that raises
    (the database unreachable) is logged and tried again at the next interval; the socket stays open
    meanwhile. A socket not (or no longer) between `recheck_start` and `recheck_stop` is not checked.
    """

    revoked: bool = False  # `recheck` found the access gone: closed with 4403, nothing more is sent
    _recheck: asyncio.Task | None = None
    _recheck_open: bool = False  # between recheck_start and recheck_stop (a disconnect)

    async def __call__(self, scope, receive, send):
        try:
            return await super().__call__(scope, receive, send)
        finally:
            self.recheck_stop()

    async def still_allowed(self) -> bool:
        """Whether the socket's user, read from the database again, may still have what it streams."""
        raise NotImplementedError

    async def leave_socket_groups(self) -> None:
        """Leave every Channels group the socket joined (nothing when it has left them already)."""
        raise NotImplementedError

    async def still_signed_in(self) -> bool:
        """Whether the session or API token the socket was opened with still signs its user in
        (`still_signed_in` of the module)."""
        return await still_signed_in(self.scope)

    async def recheck(self) -> bool:
        """Whether the socket stays open: unless `still_allowed`, leave the groups and close with 4403.

        The state is read again after the database read: a socket closed meanwhile (by another check
        or a disconnect) is neither left nor closed a second time."""
        if not self._recheck_open or self.revoked:
            return False
        if await self.still_signed_in() and await self.still_allowed():
            return True
        if not self._recheck_open or self.revoked:  # closed meanwhile (another check, a disconnect)
            return False
        self.revoked = True
        await self.leave_socket_groups()
        await self.close(code=CLOSE_FORBIDDEN)
        return False

    async def user_changed(self, message) -> None:
        """The user's record was saved (`user.changed` to `sockets_group`): check them again."""
        await self.recheck()

    def recheck_start(self, *, what: str) -> None:
        """Start the periodic re-check of this socket (`what` names it in the log)."""
        self.recheck_stop()
        self._recheck_open = True
        every = float(settings.RLSTUDIO_SOCKET_RECHECK_S)
        self._recheck = asyncio.get_running_loop().create_task(_recheck_every(every, self.recheck, what))

    def recheck_stop(self) -> None:
        """Stop checking this socket: cancel the re-check task, if one runs (never the calling task
        itself: a check that closes its socket ends its task by answering False)."""
        self._recheck_open = False
        task, self._recheck = self._recheck, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()


async def _recheck_every(every: float, check: Callable[[], Awaitable[bool]], what: str) -> None:
    """Await `check()` every `every` seconds until it answers False (the socket was closed)."""
    while True:
        await asyncio.sleep(every)
        try:
            still_open = await check()
        except Exception as exc:  # the database is down: the socket stays, the next interval tries again
            log.warning("%s: access re-check failed: %r", what, exc)
            continue
        if not still_open:
            return


def _send_for_user(user_id: int) -> None:
    try:
        user_changed_send(user_id)
    except Exception as exc:  # Redis down or hung (or no layer yet, e.g. a bootstrap command): see above
        log.warning("user %s: user-changed message not sent: %r", user_id, exc)


def _user_saved(sender, instance, created=False, update_fields=None, **kwargs) -> None:
    """post_save of the user model: after the commit, tell the user's sockets to check again."""
    if created or (update_fields is not None and set(update_fields) <= {"last_login"}):
        return
    user_id = instance.pk
    transaction.on_commit(lambda: _send_for_user(user_id))


def connect() -> None:
    """Register the receiver (the accounts app's ready)."""
    post_save.connect(_user_saved, sender=get_user_model(), dispatch_uid="accounts.sockets.user_saved")
