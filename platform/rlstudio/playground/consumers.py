"""`PlaygroundConsumer`: the websocket `/ws/playground/<id>/` that streams a session's answers.

Only the session's owner (and staff) get the stream, and only while they may use every target the
session answers from, a run's checkpoint or a catalog model (`selectors.session_targets_visible`):
anonymous connections are closed with 4401, everyone else (also for a session that does not exist)
with 4403, after accepting so the browser sees the code. The socket also joins the user's sockets
group (`accounts.sockets`): once the user's record is saved, and in any case every
RLSTUDIO_SOCKET_RECHECK_S seconds (`accounts.sockets.RecheckedSocket`: a bulk update or a run's
sharing changed sends no message to this socket), the check is made again
(`RecheckedSocket.recheck`), and a socket whose user may no longer read the session (deactivated, no
longer staff for another user's session, a checkpoint's run or a catalog model no longer shared with
them) leaves its groups, forwards nothing more and is closed with 4403 (which,
as any leaving, may stop the session). The socket joins the session's group before it reads the
event log, then sends the logged events and the live ones, each once, in seq order (frames
`{"type": "events", "events": [...]}`; event shapes in trainer.playground and runner.py, then
`{"type": "end", "status", ...}`).

Leaving stops the session: when the last websocket of a session disconnects (the page was closed or
left), the stop flag is set ("page left") and the worker ends the generation within a chunk. Clients
send nothing; a message over MAX_CLIENT_MESSAGE_BYTES closes the socket with 4009.
"""
import logging

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.http import Http404

from rlstudio.accounts.sockets import CLOSE_FORBIDDEN, RecheckedSocket, active_user, leave_groups, sockets_group

from . import streams
from .selectors import session_get_for, session_targets_visible

log = logging.getLogger(__name__)
CLOSE_UNAUTHENTICATED = 4401
CLOSE_TOO_BIG = 4009
MAX_CLIENT_MESSAGE_BYTES = 4096
LEFT = "page left"


@database_sync_to_async
def _may_watch(user, session_id: int) -> bool:
    """The session is the user's (any for staff) and they may use what it answers from."""
    try:
        session = session_get_for(user=user, session_id=session_id)
    except Http404:
        return False
    return session_targets_visible(user=user, session=session)


async def _may_still_watch(user, session_id: int) -> bool:
    """`_may_watch` for a socket already open: its user as the database holds them now (active, staff)."""
    fresh = await active_user(user)
    return fresh is not None and await _may_watch(fresh, session_id)


class PlaygroundConsumer(RecheckedSocket, AsyncJsonWebsocketConsumer):
    group: str | None = None
    sockets: str | None = None  # the user's sockets group (accounts.sockets)
    # revoked (RecheckedSocket): the user may no longer read the session, nothing more is sent
    viewing: bool = False  # counted in the session's viewers (streams.viewer_joined) until it disconnects
    session_id: int = 0
    last_sent: int = 0

    async def connect(self):
        user = self.scope.get("user")
        self.session_id = int(self.scope["url_route"]["kwargs"]["session_id"])
        if user is None or not user.is_authenticated:
            await self.accept()
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        if not await _may_watch(user, self.session_id):
            await self.accept()
            await self.close(code=CLOSE_FORBIDDEN)
            return
        self.group, self.sockets = streams.group(self.session_id), sockets_group(user.pk)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.channel_layer.group_add(self.sockets, self.channel_name)
        await sync_to_async(streams.viewer_joined, thread_sensitive=False)(self.session_id)
        self.viewing = True
        await self.accept()
        self.recheck_start(what=f"playground {self.session_id}")
        logged = await sync_to_async(streams.events_after, thread_sensitive=False)(self.session_id, 0)
        await self._forward(logged)

    async def disconnect(self, code):
        self.recheck_stop()
        await self.leave_socket_groups()
        if not self.viewing:
            return
        self.viewing = False
        try:
            left = await sync_to_async(streams.viewer_left, thread_sensitive=False)(self.session_id)
            if left <= 0:
                await sync_to_async(streams.request_stop, thread_sensitive=False)(self.session_id, LEFT)
        except Exception as exc:  # the time limit still ends the session
            log.warning("playground %s: could not flag the stop: %r", self.session_id, exc)

    async def leave_socket_groups(self) -> None:
        """Leave the session's group and the user's sockets group."""
        groups, self.group, self.sockets = (self.group, self.sockets), None, None
        await leave_groups(self.channel_layer, self.channel_name, groups, what="playground")

    async def still_allowed(self) -> bool:
        """Whether the user, as the database holds them now, may still read the session (RecheckedSocket's
        `recheck`: on a save of the user's record and every RLSTUDIO_SOCKET_RECHECK_S)."""
        return await _may_still_watch(self.scope.get("user"), self.session_id)

    async def receive(self, text_data=None, bytes_data=None, **kwargs):
        size = len(text_data.encode("utf-8")) if text_data is not None else len(bytes_data or b"")
        if size > MAX_CLIENT_MESSAGE_BYTES:
            await self.close(code=CLOSE_TOO_BIG)

    async def playground_events(self, message):
        await self._forward(message["events"])

    async def _forward(self, events):
        if self.revoked:
            return
        fresh = [e for e in events if int(e.get("seq", 0)) > self.last_sent]
        if fresh:
            self.last_sent = int(fresh[-1]["seq"])
            await self.send_json({"type": "events", "events": fresh})
