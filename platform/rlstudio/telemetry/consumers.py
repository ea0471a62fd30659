"""`RunConsumer`: the websocket `/ws/runs/<id>/` that streams a run's events to its viewers.

Only the run's owner or staff get the stream: anonymous connections are closed with 4401, everyone
else (including for a run that does not exist) with 4403. The socket is accepted before closing so
the browser receives the code (a close before accept becomes a bare HTTP 403).

Resume: `?resume_after=N` on the URL, or a `{"resume_after": N}` message, sends the stored events
with seq > N (RunEvent, seq order) and then the live ones, with no gap and no duplicate:
  * the consumer joins the run's group *before* reading the database, so an event committed during
    the replay is either in the replay or queued in the channel layer (or both);
  * a consumer handles one message at a time, so live messages that arrive during the replay wait
    in the channel layer (its capacity is sized for bursts) and are handled afterwards;
  * every message is forwarded only if its seq is above the last seq sent, which drops the events
    that were both replayed and queued.
A `resume_after` message sent after live events were already forwarded replays only the stored
events above the last one sent (order is never broken); use the URL form to resume at connect.

Viewers only ever send tiny control messages: anything over MAX_CLIENT_MESSAGE_BYTES (text or
binary) closes the socket with 1009 ("message too big") before it is parsed.
"""
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from rlstudio.runs.models import Run

from .broadcast import run_group
from .selectors import events_after

CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
REPLAY_CHUNK = 1000
CLOSE_TOO_BIG = 1009
MAX_CLIENT_MESSAGE_BYTES = 64 * 1024


@database_sync_to_async
def _may_watch(user, run_id: int) -> bool:
    if user.is_staff:
        return Run.objects.filter(pk=run_id).exists()
    return Run.objects.filter(pk=run_id, owner_id=user.pk).exists()


_events_after = database_sync_to_async(events_after)


def _resume_arg(value) -> int | None:
    """A resume_after value as an int >= 0, or None when it is not one."""
    if isinstance(value, bool):
        return None
    try:
        n = int(value)
    except (TypeError, ValueError):
        return None
    return n if n >= 0 else None


class RunConsumer(AsyncJsonWebsocketConsumer):
    """Joins group `run.<id>`, replays on resume_after, forwards `run.event` messages in seq order."""

    group: str | None = None
    run_id: int = 0
    last_sent: int | None = None  # None until something with a seq was sent: no filtering yet

    async def connect(self):
        user = self.scope.get("user")
        self.run_id = int(self.scope["url_route"]["kwargs"]["run_id"])
        if user is None or not user.is_authenticated:
            await self.accept()
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        if not await _may_watch(user, self.run_id):
            await self.accept()
            await self.close(code=CLOSE_FORBIDDEN)
            return
        # Join before accepting (and before any replay): nothing committed after this is missed.
        self.group = run_group(self.run_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"))
        resume = _resume_arg((query.get("resume_after") or [None])[0])
        if resume is not None:
            await self._replay(resume)

    async def disconnect(self, code):
        if self.group is not None:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive(self, text_data=None, bytes_data=None, **kwargs):
        # Checked before json decoding: a huge message must not cost a parse.
        size = len(text_data.encode("utf-8")) if text_data is not None else len(bytes_data or b"")
        if size > MAX_CLIENT_MESSAGE_BYTES:
            await self.close(code=CLOSE_TOO_BIG)
            return
        await super().receive(text_data=text_data, bytes_data=bytes_data, **kwargs)

    async def receive_json(self, content, **kwargs):
        if self.group is None:
            return
        resume = _resume_arg(content.get("resume_after")) if isinstance(content, dict) else None
        if resume is None:
            await self.send_json({"error": 'send {"resume_after": N} with N an integer >= 0'})
            return
        await self._replay(resume)

    async def _replay(self, after: int) -> None:
        """Send stored events with seq > max(after, last sent), in chunks, in seq order."""
        cursor = max(after, self.last_sent or 0)
        while True:
            chunk = await _events_after(run_id=self.run_id, after=cursor, limit=REPLAY_CHUNK)
            for event in chunk:
                await self.send_json(event)
            if not chunk:
                break
            cursor = chunk[-1]["seq"]
            self.last_sent = cursor
            if len(chunk) < REPLAY_CHUNK:
                break

    async def run_events(self, message):
        """A chunk of events from one ingest batch (broadcast.run_events_send)."""
        for event in message["events"]:
            await self._forward(event)

    async def run_event(self, message):
        await self._forward(message["event"])

    async def _forward(self, event):
        seq = event.get("seq") if isinstance(event, dict) else None
        if isinstance(seq, int) and self.last_sent is not None and seq <= self.last_sent:
            return  # already sent by a replay
        await self.send_json(event)
        if isinstance(seq, int):
            self.last_sent = seq if self.last_sent is None else max(self.last_sent, seq)
