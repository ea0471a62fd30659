"""`NotificationConsumer`: the websocket `/ws/notifications/` of the page header's notification centre.

Signed-in users only (4401 otherwise; accepted first so the browser sees the code): the socket joins
the user's own group (`notify.<user id>`), so a user only ever hears their own notifications, and the
user's sockets group (`accounts.sockets`): once the user's record is saved and they are no longer
active (deactivated), or at the latest at the next re-check (every RLSTUDIO_SOCKET_RECHECK_S:
`accounts.sockets.RecheckedSocket`, which sees a deactivation that sent no message, such as a bulk
update), the socket leaves its groups, forwards nothing more and is closed with 4403. Server
frames: `{"type": "notification", "notification": {...}}` (the API's fields plus `url`, and `firing`
for an alert: the rule's kind, metric, step and values, which the run page draws as a marker).
Nothing is replayed: a page lists the stored notifications when it loads or its socket reconnects
(GET /api/v1/alerts/notifications/). Clients send nothing; a message over 4 KiB closes with 4009.
"""
import logging

from channels.generic.websocket import AsyncJsonWebsocketConsumer

from rlstudio.accounts.sockets import RecheckedSocket, active_user, leave_groups, sockets_group

from .services.notify import user_group

log = logging.getLogger(__name__)
CLOSE_UNAUTHENTICATED = 4401
CLOSE_TOO_BIG = 4009
MAX_CLIENT_MESSAGE_BYTES = 4096


class NotificationConsumer(RecheckedSocket, AsyncJsonWebsocketConsumer):
    group: str | None = None
    sockets: str | None = None  # the user's sockets group (accounts.sockets)
    # revoked (RecheckedSocket): the user was deactivated, nothing more is sent

    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.accept()
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        self.group, self.sockets = user_group(user.pk), sockets_group(user.pk)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.channel_layer.group_add(self.sockets, self.channel_name)
        await self.accept()
        self.recheck_start(what="notifications")

    async def disconnect(self, code):
        self.recheck_stop()
        await self.leave_socket_groups()

    async def leave_socket_groups(self) -> None:
        """Leave the user's notification group and sockets group."""
        groups, self.group, self.sockets = [self.group, self.sockets], None, None
        await leave_groups(self.channel_layer, self.channel_name, groups, what="notifications")

    async def still_allowed(self) -> bool:
        """Whether the user is still active, as the database holds them now (RecheckedSocket's
        `recheck`: on a save of the user's record and every RLSTUDIO_SOCKET_RECHECK_S)."""
        return await active_user(self.scope.get("user")) is not None

    async def receive(self, text_data=None, bytes_data=None, **kwargs):
        size = len(text_data.encode("utf-8")) if text_data is not None else len(bytes_data or b"")
        if size > MAX_CLIENT_MESSAGE_BYTES:
            await self.close(code=CLOSE_TOO_BIG)

    async def notify_message(self, message):
        if not self.revoked:
            await self.send_json(message["message"])
