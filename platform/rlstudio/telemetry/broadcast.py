"""The push side of telemetry: the Channels group of a run and the message sent to it.

Group message (what `RunConsumer.run_event` receives):
    {"type": "run.event", "event": {"seq": N, "type": "metrics" | "sample" | ..., "data": {...}}}
The consumer forwards `event` to the browser as JSON text. Send it after the event is committed
(`transaction.on_commit(lambda: run_event_send(...))`) so a browser never sees an uncommitted event.
"""
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer


def run_group(run_id: int) -> str:
    """The Channels group every websocket watching run `run_id` joins."""
    return f"run.{int(run_id)}"


def run_event_message(event: dict[str, Any]) -> dict[str, Any]:
    """The group message that carries one event to the run's websockets."""
    return {"type": "run.event", "event": event}


def run_event_send(*, run_id: int, event: dict[str, Any]) -> None:
    """Send one event to everyone watching the run (sync code; call it from on_commit)."""
    async_to_sync(get_channel_layer().group_send)(run_group(run_id), run_event_message(event))


def run_events_send(*, run_id: int, events: list[dict[str, Any]], chunk: int = 100) -> None:
    """Send many events, in order, as `run.events` group messages of up to `chunk` events each
    (one Redis round trip per chunk instead of per event: an ingest batch can hold thousands)."""
    if not events:
        return

    async def send_all() -> None:
        layer, group = get_channel_layer(), run_group(run_id)
        for i in range(0, len(events), chunk):
            await layer.group_send(group, {"type": "run.events", "events": events[i:i + chunk]})

    async_to_sync(send_all)()
