"""`NotificationConsumer`: the websocket `/ws/notifications/` of the page header's notification centre.

Signed-in users only (4401 otherwise; accepted first so the browser sees the code): the socket joins
the user's own group (`notify.<user id>`), so a user only ever hears their own notifications. Server
frames: `{"type": "notification", "notification": {...}}` (the API's fields plus `url`, and `firing`
for an alert: the rule's kind, metric, step and values, which the run page draws as a marker).
Nothing is replayed: a page lists the stored notifications when it loads or its socket reconnects
(GET /api/v1/alerts/notifications/). Clients send nothing; a message over 4 KiB closes with 4009.
"""
import logging

from channels.generic.websocket import AsyncJsonWebsocketConsumer

from .services.notify import user_group

log = logging.getLogger(__name__)
CLOSE_UNAUTHENTICATED = 4401
CLOSE_TOO_BIG = 4009
MAX_CLIENT_MESSAGE_BYTES = 4096


class NotificationConsumer(AsyncJsonWebsocketConsumer):
    group: str | None = None

    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.accept()
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        self.group = user_group(user.pk)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code):
        if self.group is not None:
            try:
                await self.channel_layer.group_discard(self.group, self.channel_name)
            except Exception as exc:  # Redis is down; the layer already dropped the membership
                log.warning("notifications: group_discard failed: %r", exc)

    async def receive(self, text_data=None, bytes_data=None, **kwargs):
        size = len(text_data.encode("utf-8")) if text_data is not None else len(bytes_data or b"")
        if size > MAX_CLIENT_MESSAGE_BYTES:
            await self.close(code=CLOSE_TOO_BIG)

    async def notify_message(self, message):
        await self.send_json(message["message"])
