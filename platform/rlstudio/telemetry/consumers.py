"""`RunConsumer`: the websocket `/ws/runs/<id>/` that streams a run's events to its viewers.

Only the run's owner, staff and the users the run is shared with (by name, as members of a team it or
its project is shared with, through its project, or with everyone: `runs.selectors.visible_runs`; the
stream only ever reads) get the stream: anonymous connections are closed with 4401, everyone else
(including for a run that does not exist) with 4403. The socket is accepted before closing so the
browser receives the code (a close before accept becomes a bare HTTP 403). The check is made again when
who may read the run changes (a `run.access_changed` group message, sent after the change commits, to
the run's group when its sharing changed: telemetry.access; and a `user.changed` to the user's own
sockets group when their record was saved or they joined or left a team: accounts.sockets,
accounts.teams), and every RLSTUDIO_SOCKET_RECHECK_S seconds whatever happened
(accounts.sockets.RecheckedSocket: a change that sent no message, such as a bulk update, is seen then):
a socket whose user may no longer read the run (unshared, the run made private, the user out of the
team it was shared with, deactivated or no longer staff) leaves its groups, forwards nothing more and
is closed with 4403; the owner's, staff's and the remaining readers' sockets stay open.

A reader (shared with, not the owner nor staff) gets every event without the platform's server paths
(`redact.event_for_viewer`: a checkpoint's path blank, status and log messages scrubbed), applied here to
each event sent to that socket, live or replayed; whether the socket's user manages the run is read at
connect and again at each check above.

Resume: `?resume_after=N` on the URL, or a `{"resume_after": N}` message, sends the stored events
with seq > N (RunEvent, seq order) and then the live ones, with no gap and no duplicate:
  * the consumer joins the run's group *before* reading the database, so an event committed during
    the replay is either in the replay or delivered live (or both). The layer is Redis pub/sub
    (channels_redis.pubsub): group_add sends SUBSCRIBE without waiting for Redis's reply, but the
    command is on its socket before the database read starts, and a missed event would be published
    after a commit that came after that read began;
  * a consumer handles one message at a time, so live messages that arrive during the replay wait
    in this process's queue for the consumer (an unbounded asyncio.Queue in the layer: nothing is
    dropped for capacity) and are handled afterwards;
  * every message is forwarded only if its seq is above the last seq sent, which drops the events
    that were both replayed and delivered live.
A `resume_after` message sent after live events were already forwarded replays only the stored
events above the last one sent (order is never broken); use the URL form to resume at connect.

Delivery through the layer is at most once: while the server's subscriber connection is down (a
Redis restart) group messages are lost, and the layer reconnects and resubscribes without telling
anyone. `layer_watch` probes the layer once per interval per process; when a probe fails every
consumer closes its socket with 4503 (CLOSE_LAYER_LOST) and the browser reconnects with
resume_after, so the replay brings what was lost. An outage shorter than the probe interval can go
unseen by the server: the run page also reconnects with resume_after when an event's seq jumps
past the last one it applied (static/js/run_live.js, docs/live.md).

Batched frames (opt-in): with `?batch=1` on the URL, or a `{"batch": true}` message (alone or next to
`resume_after`), the socket sends `{"type": "batch", "seq": <last seq>, "events": [event, ...]}` frames
instead of one frame per event: one frame per replay chunk and one per group message (an ingest
batch is sent in `run.events` messages of up to 100 events). Events keep their own form, seq order,
and the same no-gap / no-duplicate filter; a batch is never empty. Without the opt-in nothing
changes (one `{"seq", "type", "data", ...}` frame per event, as docs/api.md describes). One frame per
event per viewer was what made a busy run slow to watch: 100 viewers x 200 events/s is 20,000 frames/s
through one server process and its clients; batched, it is the ingest's POST rate x viewers.

Viewers only ever send tiny control messages: anything over MAX_CLIENT_MESSAGE_BYTES (text or
binary) closes the socket with 4009 ("message too big") before it is parsed. Not 1009: Daphne closes
through autobahn, which accepts only 1000 and 3000-4999 from an application and otherwise raises, and
a consumer that raises is closed with 1011. 4009 mirrors 1009 as 4401/4403 mirror HTTP 401/403.
(A message over Daphne's own limit, 1 MiB by default, never gets here: autobahn drops the connection.)
"""
import asyncio
import json
import logging
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from rlstudio.accounts.sockets import CLOSE_FORBIDDEN, RecheckedSocket, active_user, leave_groups, sockets_group
from rlstudio.runs.models import Run
from rlstudio.runs.selectors import can_manage, visible_runs

from .broadcast import run_group
from .layer_watch import layer_watch
from .redact import event_for_viewer, frame_may_hold_redacted
from .selectors import events_after

log = logging.getLogger(__name__)

CLOSE_UNAUTHENTICATED = 4401
REPLAY_CHUNK = 1000  # stored events per database read, and per frame in batch mode
CLOSE_TOO_BIG = 4009  # 1009's meaning in the application range (see the module docstring)
CLOSE_LAYER_LOST = 4503  # the channel layer stopped delivering: reconnect with resume_after
MAX_CLIENT_MESSAGE_BYTES = 64 * 1024
MANAGE, READ = "manage", "read"  # how a socket's user may watch the run (`_may_watch`)


@database_sync_to_async
def _may_watch(user, run_id: int) -> str | None:
    """The run selectors' one visibility rule (owner, staff, or a user the run is shared with, by name,
    through a team or its project, or with everyone), and how:
    MANAGE for the owner and staff (`can_manage`: events as stored), READ for a reader (events without
    server paths), None when the user may not read the run."""
    run = visible_runs(Run.objects.filter(pk=run_id), user=user).only("id", "owner_id").first()
    if run is None:
        return None
    return MANAGE if can_manage(user=user, run=run) else READ


async def _may_still_watch(user, run_id: int) -> str | None:
    """`_may_watch` for a socket already open: its user as the database holds them now (active, staff)."""
    fresh = await active_user(user)
    return None if fresh is None else await _may_watch(fresh, run_id)


_events_after = database_sync_to_async(events_after)


def _batch_arg(value) -> bool | None:
    """A batch opt-in value (`true`/`false`, or "1"/"0" from a query string), or None when it is not one."""
    if isinstance(value, bool):
        return value
    if value in ("1", "true", "yes"):
        return True
    if value in ("0", "false", "no"):
        return False
    return None


def _resume_arg(value) -> int | None:
    """A resume_after value as an int >= 0, or None when it is not one."""
    if isinstance(value, bool):
        return None
    try:
        n = int(value)
    except (TypeError, ValueError):
        return None
    return n if n >= 0 else None


class RunConsumer(RecheckedSocket, AsyncJsonWebsocketConsumer):
    """Joins group `run.<id>`, replays on resume_after, forwards `run.event` messages in seq order."""

    group: str | None = None
    run_id: int = 0
    last_sent: int | None = None  # None until something with a seq was sent: no filtering yet
    batch: bool = False  # the client asked for `{"type": "batch", "events": [...]}` frames
    viewer: str | None = None  # the user's own sockets group (accounts.sockets.sockets_group)
    # revoked (RecheckedSocket): the user may no longer read the run, nothing more is sent
    manager: bool = False  # the user manages the run (owner, staff): events go unredacted

    async def dispatch(self, message):
        """Group messages go straight to their handler.

        Channels' own dispatch first runs `close_old_connections` through `sync_to_async` for every
        message, i.e. on the server's one thread for sync code, where it waits behind whatever ingest
        POST runs there: with 100 viewers that queued every live frame behind the database work
        (py-spy of bench/live.py). The live handlers touch no database (a replay goes through
        database_sync_to_async, which closes stale connections itself), so they skip it.
        """
        if message.get("type") in ("run.events", "run.event"):
            if self.revoked:
                return
            await getattr(self, message["type"].replace(".", "_"))(message)
            return
        await super().dispatch(message)

    async def connect(self):
        user = self.scope.get("user")
        self.run_id = int(self.scope["url_route"]["kwargs"]["run_id"])
        if user is None or not user.is_authenticated:
            await self.accept()
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        access = await _may_watch(user, self.run_id)
        if access is None:
            await self.accept()
            await self.close(code=CLOSE_FORBIDDEN)
            return
        self.manager = access == MANAGE
        # Join before accepting (and before any replay): nothing committed after this is missed.
        self.group = run_group(self.run_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        self.viewer = sockets_group(user.pk)  # the user's record changed: check again (accounts.sockets)
        await self.channel_layer.group_add(self.viewer, self.channel_name)
        await self.accept()
        layer_watch(self.channel_layer).add(self._layer_lost)
        self.recheck_start(what=f"run {self.run_id}")
        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"))
        self.batch = bool(_batch_arg((query.get("batch") or [None])[0]))
        resume = _resume_arg((query.get("resume_after") or [None])[0])
        if resume is not None:
            await self._replay(resume)

    async def disconnect(self, code):
        self.recheck_stop()
        await self.leave_socket_groups()

    async def leave_socket_groups(self) -> None:
        """Leave the run's group and the user's sockets group, and stop hearing from layer_watch."""
        if self.group is not None:
            groups, self.group, self.viewer = [self.group, self.viewer], None, None
            layer_watch(self.channel_layer).discard(self._layer_lost)
            await leave_groups(self.channel_layer, self.channel_name, groups, what=f"run {self.run_id}")

    async def still_allowed(self) -> bool:
        """Whether the user, as the database holds them now, may still read the run (RecheckedSocket's
        `recheck`: on a sharing change, on a save of the user's record and every
        RLSTUDIO_SOCKET_RECHECK_S); whether they still manage it is updated on the way."""
        access = await _may_still_watch(self.scope.get("user"), self.run_id)
        if access is None:
            return False
        self.manager = access == MANAGE  # staff taken away: a reader's events from now on
        return True

    async def run_access_changed(self, message):
        """The run's sharing changed (telemetry.access): check the user again (as `user_changed`)."""
        await self.recheck()

    def _layer_lost(self) -> None:
        """layer_watch's callback: close so the browser reconnects and the replay brings what was lost."""
        self._closing = asyncio.ensure_future(self.close(code=CLOSE_LAYER_LOST))

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
        if not isinstance(content, dict) or not ({"resume_after", "batch"} & content.keys()):
            await self.send_json({"error": 'send {"resume_after": N} with N an integer >= 0 '
                                           'and/or {"batch": true|false}'})
            return
        if "batch" in content:
            batch = content["batch"] if isinstance(content["batch"], bool) else None
            if batch is None:
                await self.send_json({"error": '"batch" must be true or false'})
                return
            self.batch = batch
        if "resume_after" not in content:
            return
        resume = _resume_arg(content.get("resume_after"))
        if resume is None:
            await self.send_json({"error": 'send {"resume_after": N} with N an integer >= 0'})
            return
        await self._replay(resume)

    async def _replay(self, after: int) -> None:
        """Send stored events with seq > max(after, last sent), in chunks, in seq order."""
        cursor = max(after, self.last_sent or 0)
        while True:
            chunk = await _events_after(run_id=self.run_id, after=cursor, limit=REPLAY_CHUNK)
            if not chunk or self.revoked:  # a re-check may close the socket during the replay
                break
            cursor = chunk[-1]["seq"]
            shown = self._shown(chunk)
            if self.batch:
                await self._send_batch(shown)
            else:
                for event in shown:
                    await self.send_json(event)
            self.last_sent = cursor
            if len(chunk) < REPLAY_CHUNK:
                break

    async def run_events(self, message):
        """A chunk of events from one ingest batch (broadcast.run_events_message).

        A batch-mode viewer that has sent nothing of the chunk yet gets the pre-encoded frame as is,
        unless it is a reader and the frame holds an event to redact for them; otherwise the frame is
        decoded, filtered and redacted like any other events."""
        frame = message.get("frame")
        if frame is None:  # the older form: the events themselves
            await self._forward_all(message["events"])
            return
        first, last = message.get("first"), message.get("last")
        if (self.batch and isinstance(first, int) and isinstance(last, int)
                and (self.last_sent is None or first > self.last_sent)
                and (self.manager or not frame_may_hold_redacted(frame))):
            await self.send(text_data=frame)
            self.last_sent = last
            return
        await self._forward_all(json.loads(frame)["events"])

    async def run_event(self, message):
        await self._forward_all([message["event"]])

    def _fresh(self, event) -> bool:
        """Not sent yet (by a replay or an earlier message); advances last_sent when it is fresh."""
        seq = event.get("seq") if isinstance(event, dict) else None
        if not isinstance(seq, int) or isinstance(seq, bool):
            return True
        if self.last_sent is not None and seq <= self.last_sent:
            return False
        self.last_sent = seq
        return True

    def _shown(self, events: list) -> list:
        """`events` as this socket's user may see them (`redact.event_for_viewer`)."""
        if self.manager:
            return events
        return [event_for_viewer(event, manager=False) for event in events]

    async def _forward_all(self, events) -> None:
        fresh = self._shown([event for event in events if self._fresh(event)])
        if self.batch:
            if fresh:
                await self._send_batch(fresh)
            return
        for event in fresh:
            await self.send_json(event)

    async def _send_batch(self, events: list) -> None:
        seqs = [e["seq"] for e in events if isinstance(e, dict) and isinstance(e.get("seq"), int)]
        await self.send_json({"type": "batch", "seq": seqs[-1] if seqs else None, "events": events})
