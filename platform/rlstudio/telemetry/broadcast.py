"""The push side of telemetry: the Channels group of a run and the messages sent to it.

Group messages (what `RunConsumer` receives):
    {"type": "run.event", "event": {"seq": N, "type": "metrics" | "sample" | ..., "data": {...}}}
    {"type": "run.events", "first": N, "last": M, "frame": "<JSON text>"}   (ingest batches)
    {"type": "run.access_changed"}   (who may read the run changed: each socket checks its user again)
A run socket also joins its user's sockets group (`accounts.sockets`), whose `{"type": "user.changed"}`
(the user's record was saved) makes it check its user again the same way.
`frame` is the batch websocket frame, `{"type": "batch", "seq": M, "events": [...]}`, encoded once
here: the consumer sends it as is to a batch-mode viewer that has seen nothing of it (the usual case),
and decodes it only to filter or to send one frame per event. Encoding per viewer was most of the
server's CPU with 100 viewers (py-spy of bench/live.py); the layer serialises a group message once
(pub/sub: one PUBLISH per group message), so the frame is encoded once whatever the number of
viewers. `first` / `last` are the seqs of its first and last event (events in seq order), or None
when some event has no integer seq.
Send after the events are committed (`transaction.on_commit`) so a browser never sees an uncommitted one.
"""
import asyncio
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings

from rlstudio.accounts.sockets import group_send_bounded

from . import codec


def run_group(run_id: int) -> str:
    """The Channels group every websocket watching run `run_id` joins."""
    return f"run.{int(run_id)}"


def run_event_message(event: dict[str, Any]) -> dict[str, Any]:
    """The group message that carries one event to the run's websockets."""
    return {"type": "run.event", "event": event}


def _seq(event: Any) -> int | None:
    seq = event.get("seq") if isinstance(event, dict) else None
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else None


def run_events_message(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The group message that carries several events (in seq order) as one pre-encoded batch frame."""
    seqs = [_seq(ev) for ev in events]
    known = all(s is not None for s in seqs)
    frame = codec.dumps({"type": "batch", "seq": seqs[-1] if seqs else None, "events": events})
    return {"type": "run.events", "first": seqs[0] if known and seqs else None,
            "last": seqs[-1] if known and seqs else None, "frame": frame}


def run_event_send(*, run_id: int, event: dict[str, Any]) -> None:
    """Send one event to everyone watching the run (sync code; call it from on_commit)."""
    async_to_sync(get_channel_layer().group_send)(run_group(run_id), run_event_message(event))


def run_access_changed_send(run_id: int) -> None:
    """Tell the run's websockets that who may read it changed (sync code; the sharing service calls it
    after the change commits): each one checks its user again (RunConsumer.run_access_changed)."""
    group_send_bounded(run_group(run_id), {"type": "run.access_changed"})


def run_events_send(*, run_id: int, events: list[dict[str, Any]], chunk: int = 100) -> None:
    """Send many events, in order, as `run.events` group messages of up to `chunk` events each
    (one Redis round trip per chunk instead of per event: an ingest batch can hold thousands)."""
    if not events:
        return

    async def send_all() -> None:
        layer, group = get_channel_layer(), run_group(run_id)
        for i in range(0, len(events), chunk):
            await layer.group_send(group, run_events_message(events[i:i + chunk]))

    async def bounded() -> None:
        # A hung Redis (connection accepted, never answered) would hold the trainer's POST for the
        # layer's socket timeout; TimeoutError goes to the caller (the ingest logs it and answers).
        await asyncio.wait_for(send_all(), timeout=settings.RLSTUDIO_BROADCAST_TIMEOUT_S)

    async_to_sync(bounded)()
