"""The event envelope (``Event``: seq, type, time, data) and its wire form: strict validation of one
event (``validate_event``, ``make_event``), one compact JSON line (``encode_event``, ``decode_event``),
and a sample fitted within the wire limits (``fit_sample``)."""

from __future__ import annotations

import json
import time as _time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from trainer.events.checks import PARSERS, Checker
from trainer.events.schema import (
    DATA_CLASSES,
    EVENT_TYPES,
    MAX_EVENT_BYTES,
    MAX_EVENT_TIME,
    MAX_MESSAGE_CHARS,
    MAX_MESSAGES,
    MAX_TOKEN_VIEW,
    SAMPLE_OPTIONAL_KEYS,
    EventData,
    EventError,
    SampleData,
    plain,
)

# The `data` keys each event type allows (validate_event checks every event against them).
_DATA_KEYS: dict[str, frozenset[str]] = {k: frozenset(cls.__dataclass_fields__) for k, cls in DATA_CLASSES.items()}
_EVENT_KEYS = frozenset({"seq", "type", "time", "data"})


@dataclass
class Event:
    """One event as the trainer emits it and the ingest stores it: the envelope and its typed payload."""

    seq: int
    type: str
    time: float
    data: EventData

    def to_dict(self) -> dict[str, Any]:
        """The wire form; optional sample fields that are unset are left out."""
        data = plain(self.data)
        if self.type == "sample":
            for key in SAMPLE_OPTIONAL_KEYS:
                if data.get(key) in (None, {}):
                    data.pop(key, None)
            if not data.get("validation"):
                data.pop("validation", None)
        return {"seq": self.seq, "type": self.type, "time": self.time, "data": data}

    def to_json(self) -> str:
        """One JSON line (no newline); raises EventError when over MAX_EVENT_BYTES or not strict JSON."""
        return encode_event(self)


def make_event(seq: int, data: EventData, *, time: float | None = None) -> Event:
    """An Event for ``data`` (type taken from its class), validated as the platform will."""
    kind = next((k for k, cls in DATA_CLASSES.items() if isinstance(data, cls)), None)
    if kind is None:
        raise EventError(f"event {seq}: data of type {type(data).__name__} is not an event payload")
    event = Event(seq=seq, type=kind, time=_time.time() if time is None else time, data=data)
    return validate_event(event.to_dict())



def validate_event(obj: Any) -> Event:
    """Check one wire-form event strictly and return it typed; EventError(reason) otherwise."""
    if isinstance(obj, Event):
        obj = obj.to_dict()
    if type(obj) is not dict and not isinstance(obj, Mapping):
        raise EventError("event: must be an object with seq, type, time and data")
    seq = obj.get("seq")
    where = f"event {seq}" if isinstance(seq, int) and not isinstance(seq, bool) else "event"
    c = Checker(where)
    unknown = obj.keys() - _EVENT_KEYS
    if unknown:
        c.fail(sorted(unknown)[0], "is not allowed (an event has seq, type, time, data)")
    seq = c.int_(obj, "seq", "seq", minimum=1)
    kind = c.str_(obj, "type", "type", choices=EVENT_TYPES)
    when = c.num(obj, "time", "time")
    if not 0 < when < MAX_EVENT_TIME:
        c.fail("time", "must be unix seconds > 0, before the year 10000")
    data = obj.get("data")
    if type(data) is not dict and not isinstance(data, Mapping):
        c.fail("data", "must be an object")
    allowed = _DATA_KEYS[kind]
    unknown = data.keys() - allowed
    if unknown:
        c.fail(
            f"data.{sorted(unknown)[0]}",
            f"is not a field of a {kind} event ({', '.join(sorted(allowed))})",
        )
    return Event(seq=seq, type=kind, time=when, data=PARSERS[kind](c, data))



def encode_event(event: Event | Mapping[str, Any]) -> str:
    """Validate and encode as one compact JSON line; EventError when over MAX_EVENT_BYTES."""
    ev = validate_event(event)
    line = json.dumps(ev.to_dict(), separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    size = len(line.encode("utf-8"))
    if size > MAX_EVENT_BYTES:
        raise EventError(
            f"event {ev.seq}: encoded size {size} bytes exceeds MAX_EVENT_BYTES ({MAX_EVENT_BYTES})"
        )
    return line


def decode_event(line: str | bytes) -> Event:
    """Parse and validate one JSON line."""
    raw = line.encode("utf-8") if isinstance(line, str) else line
    if len(raw) > MAX_EVENT_BYTES:
        raise EventError(f"event: {len(raw)} bytes exceeds MAX_EVENT_BYTES ({MAX_EVENT_BYTES})")
    try:
        obj = json.loads(raw, parse_constant=lambda name: (_ for _ in ()).throw(ValueError(name)))
    except ValueError as exc:
        raise EventError(f"event: not strict JSON ({exc})") from exc
    return validate_event(obj)


def fit_sample(data: SampleData, *, max_bytes: int = MAX_EVENT_BYTES - 4096) -> SampleData:
    """Shrink a sample to fit the limits before it is emitted.

    Keeps the last MAX_MESSAGES messages and cuts over-long contents (marking them ``[truncated]``);
    if the event would still exceed ``max_bytes`` it drops the token view, then halves the longest
    contents until it fits. The transcript's shape (roles, order, tool calls) is kept.
    """

    def cut(text: str, cap: int) -> str:
        return text if len(text) <= cap else text[: max(cap - 12, 0)] + " [truncated]"

    def size(sample: SampleData) -> int:
        return len(json.dumps(plain(sample), default=str, ensure_ascii=False).encode("utf-8"))

    messages = [dict(m) for m in data.messages[-MAX_MESSAGES:]]
    for m in messages:
        for key in ("content", "raw"):
            if isinstance(m.get(key), str):
                m[key] = cut(m[key], MAX_MESSAGE_CHARS)
    view = (
        data.token_view
        if data.token_view is not None and len(data.token_view.ids) <= MAX_TOKEN_VIEW
        else None
    )
    out = replace(data, messages=messages, token_view=view)
    if out.token_view is not None and size(out) > max_bytes:
        out.token_view = None
    cap = MAX_MESSAGE_CHARS
    while size(out) > max_bytes and cap > 64:
        cap //= 2
        for m in out.messages:
            for key in ("content", "raw"):
                if isinstance(m.get(key), str):
                    m[key] = cut(m[key], cap)
    return out
