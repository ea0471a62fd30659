"""The live side of a session, in Redis: its Channels group, its event log, its stop flag and its
viewer count. Sync functions (a process-wide client on REDIS_URL); keys under the channel layer's
prefix, so test sessions sharing a Redis never meet, and each expires after KEY_TTL_S.

- The event log (`...:events`, a list of JSON events with seq 1, 2, ...) is what a websocket that
  connects late replays before the live events: the worker appends a batch, then sends it to the group.
- The stop flag (`...:stop`, the reason as its value) is set by the stop endpoint and by the last
  websocket that leaves; the worker reads it between chunks (every PUMP_INTERVAL_S).
- The viewer count (`...:viewers`) is raised on connect and lowered on disconnect.
"""
from __future__ import annotations

import json
from typing import Any

import redis
from django.conf import settings

KEY_TTL_S = 3600
_CLIENT: list[redis.Redis] = []


def _client() -> redis.Redis:
    if not _CLIENT:
        _CLIENT.append(redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5, socket_connect_timeout=5))
    return _CLIENT[0]


def _prefix() -> str:
    layer = (getattr(settings, "CHANNEL_LAYERS", {}).get("default") or {}).get("CONFIG") or {}
    return f"{layer.get('prefix') or 'rlstudio'}:playground"


def group(session_id: int) -> str:
    """The Channels group every websocket of session `session_id` joins."""
    return f"playground.{int(session_id)}"


def _key(session_id: int, what: str) -> str:
    return f"{_prefix()}:{int(session_id)}:{what}"


def reset(session_id: int) -> None:
    """Forget anything a key of this id holds (a new session starts clean)."""
    _client().delete(*(_key(session_id, w) for w in ("events", "stop", "viewers")))


def append(session_id: int, events: list[dict[str, Any]]) -> None:
    key = _key(session_id, "events")
    pipe = _client().pipeline()
    pipe.rpush(key, *(json.dumps(e, ensure_ascii=False) for e in events))
    pipe.expire(key, KEY_TTL_S)
    pipe.execute()


def events_after(session_id: int, seq: int) -> list[dict[str, Any]]:
    """The logged events with a seq above `seq`, in order."""
    out = []
    for raw in _client().lrange(_key(session_id, "events"), 0, -1):
        event = json.loads(raw)
        if int(event.get("seq", 0)) > seq:
            out.append(event)
    return out


def request_stop(session_id: int, reason: str) -> None:
    """Set the stop flag (the first reason stays)."""
    _client().set(_key(session_id, "stop"), reason[:100], ex=KEY_TTL_S, nx=True)


def stop_reason(session_id: int) -> str:
    """The stop flag's reason, '' when none."""
    value = _client().get(_key(session_id, "stop"))
    return value.decode("utf-8", "replace") if value else ""


def viewer_joined(session_id: int) -> int:
    key = _key(session_id, "viewers")
    pipe = _client().pipeline()
    pipe.incr(key)
    pipe.expire(key, KEY_TTL_S)
    return int(pipe.execute()[0])


def viewer_left(session_id: int) -> int:
    """Lower the count; returns the viewers left."""
    return int(_client().decr(_key(session_id, "viewers")))
