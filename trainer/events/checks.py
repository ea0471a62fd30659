"""The field checks of an event's payload: one checker per event type (``PARSERS``), with the shared
field checkers (``Checker``) above them.

Every refusal is an EventError whose reason names the event and the field ("event 3: field data.step
must be an int >= 0"). The ingest checks thousands of events per request, so the usual payload is
checked whole with C-speed builtins and only a faulty one is walked to name its fault.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, Callable, Union

from trainer.events.schema import (
    FINISH_REASONS,
    LOG_LEVELS,
    MAX_LOG_CHARS,
    MAX_MESSAGE_CHARS,
    MAX_MESSAGES,
    MAX_METRIC_NAME,
    MAX_METRICS,
    MAX_STRING,
    MAX_TOKEN_VIEW,
    MEMORY_PHASES,
    MESSAGE_ROLES,
    PROMPT_HASH_CHARS,
    PROMPT_SPLITS,
    STATUS_STATES,
    CheckpointData,
    EventData,
    EventError,
    HeartbeatData,
    LogData,
    MemoryData,
    MetricsData,
    SampleData,
    StatusData,
    TokenView,
    is_prompt_hash,
)

class Checker:
    """Field checks that raise EventError with 'event <seq>: field <path> must ...'."""

    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, path: str, what: str) -> None:
        raise EventError(f"{self.where}: field {path} {what}")

    def int_(
        self,
        obj: Mapping[str, Any],
        key: str,
        path: str,
        *,
        minimum: int | None = 0,
        optional: bool = False,
        default: Any = None,
    ) -> Any:
        if key not in obj:
            if optional:
                return default
            self.fail(path, "is missing")
        value = obj[key]
        if value is None and optional:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(path, f"must be an int{'' if minimum is None else f' >= {minimum}'}")
        if minimum is not None and value < minimum:
            self.fail(path, f"must be an int >= {minimum}")
        return value

    def num(
        self,
        obj: Mapping[str, Any],
        key: str,
        path: str,
        *,
        optional: bool = False,
        nullable: bool = False,
        default: Any = None,
    ) -> Any:
        if key not in obj:
            if optional:
                return default
            self.fail(path, "is missing")
        value = obj[key]
        if value is None and (nullable or optional):
            return None if nullable else default
        if not _finite_number(value):
            self.fail(path, "must be a finite number")
        return float(value)

    def str_(
        self,
        obj: Mapping[str, Any],
        key: str,
        path: str,
        *,
        choices: tuple[str, ...] | None = None,
        limit: int = MAX_STRING,
        optional: bool = False,
        default: Any = None,
        nonempty: bool = False,
    ) -> Any:
        if key not in obj:
            if optional:
                return default
            self.fail(path, "is missing")
        value = obj[key]
        if value is None and optional:
            return default
        if not isinstance(value, str):
            self.fail(path, "must be a string")
        if choices is not None and value not in choices:
            self.fail(path, f"must be one of {', '.join(choices)} (got {value!r})")
        if len(value) > limit:
            self.fail(path, f"must be at most {limit} characters (got {len(value)})")
        if nonempty and not value:
            self.fail(path, "must not be empty")
        return value

    def list_(self, obj: Mapping[str, Any], key: str, path: str, *, limit: int) -> list[Any]:
        if key not in obj:
            self.fail(path, "is missing")
        value = obj[key]
        if not isinstance(value, list):
            self.fail(path, "must be a list")
        if len(value) > limit:
            self.fail(path, f"must have at most {limit} items (got {len(value)})")
        return value

    def json_value(self, value: Any, path: str) -> Any:
        """Any strict-JSON value (finite floats)."""
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            self.fail(path, f"must be plain JSON with finite numbers ({exc})")
        return value


def _status(c: Checker, d: Mapping[str, Any]) -> StatusData:
    return StatusData(
        state=c.str_(d, "state", "data.state", choices=STATUS_STATES),
        message=c.str_(d, "message", "data.message", optional=True, default=""),
        step=c.int_(d, "step", "data.step", optional=True, default=0),
        total_steps=c.int_(d, "total_steps", "data.total_steps", optional=True),
    )


def _heartbeat(c: Checker, d: Mapping[str, Any]) -> HeartbeatData:
    return HeartbeatData(step=c.int_(d, "step", "data.step"))


def _metrics(c: Checker, d: Mapping[str, Any]) -> MetricsData:
    step = c.int_(d, "step", "data.step")
    metrics = d.get("metrics")
    if not isinstance(metrics, dict):
        c.fail("data.metrics", "must be an object {name: number}")
    if len(metrics) > MAX_METRICS:
        c.fail("data.metrics", f"must have at most {MAX_METRICS} entries (got {len(metrics)})")
    # The usual event, checked whole with C-speed builtins: names are non-empty strings within the
    # limit, values are finite floats or None. Anything else is walked below, which names the fault.
    if (not metrics or (set(map(type, metrics)) <= {str} and min(map(len, metrics)) > 0
                        and max(map(len, metrics)) <= MAX_METRIC_NAME
                        and _all_finite_floats(list(metrics.values())))):
        return MetricsData(step=step, metrics=dict(metrics))
    out: dict[str, float | None] = {}
    for name, value in metrics.items():
        if not isinstance(name, str) or not name or len(name) > MAX_METRIC_NAME:
            c.fail(
                "data.metrics",
                f"names must be non-empty strings of at most {MAX_METRIC_NAME} characters",
            )
        # Fast path for the common cases (the ingest checks thousands per request); anything
        # else goes through c.num, which gives the same result or the reason.
        if value is None:
            out[name] = None
        elif type(value) is float and math.isfinite(value):
            out[name] = value
        else:
            out[name] = c.num(metrics, name, f"data.metrics[{name!r}]", nullable=True)
    return MetricsData(step=step, metrics=out)


_STR = frozenset({str})
_JSON_SCALARS = frozenset({str, type(None), bool, int})


def _messages(c: Checker, d: Mapping[str, Any]) -> list[dict[str, Any]]:
    messages = c.list_(d, "messages", "data.messages", limit=MAX_MESSAGES)
    for i, msg in enumerate(messages):
        path = f"data.messages[{i}]"
        if not isinstance(msg, dict):
            c.fail(path, "must be an object with role and content")
        c.str_(msg, "role", f"{path}.role", choices=MESSAGE_ROLES)
        content = msg.get("content")
        if content is not None:
            c.str_(msg, "content", f"{path}.content", limit=MAX_MESSAGE_CHARS)
        elif not msg.get("tool_calls"):
            c.fail(f"{path}.content", "must be a string (null only on a message with tool_calls)")
        if "tool_calls" in msg and not isinstance(msg["tool_calls"], list):
            c.fail(f"{path}.tool_calls", "must be a list")
        if "raw" in msg:
            c.str_(msg, "raw", f"{path}.raw", limit=MAX_MESSAGE_CHARS)
        if "tool_call_errors" in msg and not isinstance(msg["tool_call_errors"], list):
            c.fail(f"{path}.tool_call_errors", "must be a list")
        # A message of string keys and string / null / bool / int values is plain JSON as it is (the
        # usual chat message); anything else (tool calls, floats) is checked by encoding it.
        if not (set(map(type, msg)) <= _STR and set(map(type, msg.values())) <= _JSON_SCALARS):
            c.json_value(msg, path)
    return messages


def _finite_number(value: Any) -> bool:
    """Whether `value` is a JSON number (not a boolean) that a float holds finitely: an int past a
    float's range (a 400-digit JSON integer) is not, and `math.isfinite` would raise OverflowError on it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _all_finite_floats(values: list[Any]) -> bool:
    """True when every entry is a float or None and the floats are finite (a quick whole-list check:
    a sum of floats is finite only if every term is; an overflowing sum just takes the slow path)."""
    kinds = set(map(type, values))
    if not kinds <= {float, type(None)}:
        return False
    floats = values if type(None) not in kinds else [v for v in values if v is not None]
    return math.isfinite(sum(floats))


def _token_view(c: Checker, d: Any) -> TokenView:
    if not isinstance(d, dict):
        c.fail("data.token_view", "must be an object")
    ids = c.list_(d, "ids", "data.token_view.ids", limit=MAX_TOKEN_VIEW)
    n = len(ids)
    lists: dict[str, list[Any] | None] = {"ids": ids}
    for key in ("pieces", "loss_mask", "logprobs", "ref_logprobs", "advantages", "rollout_logprobs"):
        if key in ("ref_logprobs", "rollout_logprobs") and d.get(key) is None:
            lists[key] = None
            continue
        value = c.list_(d, key, f"data.token_view.{key}", limit=MAX_TOKEN_VIEW)
        if len(value) != n:
            c.fail(
                f"data.token_view.{key}", f"must have one entry per token ({n}), got {len(value)}"
            )
        lists[key] = value
    # Each list is first checked whole with C-speed builtins; only a list that fails that quick
    # check is walked element by element, which finds (and names) the bad entry.
    if not (set(map(type, ids)) <= {int} and (not ids or min(ids) >= 0)):
        for i, tok in enumerate(ids):
            if isinstance(tok, bool) or not isinstance(tok, int) or tok < 0:
                c.fail(f"data.token_view.ids[{i}]", "must be an int >= 0")
    pieces = lists["pieces"] or []
    if not set(map(type, pieces)) <= {str}:
        for i, piece in enumerate(pieces):
            if not isinstance(piece, str):
                c.fail(f"data.token_view.pieces[{i}]", "must be a string")
    mask = lists["loss_mask"] or []
    if not (set(map(type, mask)) <= {int} and set(mask) <= {0, 1}):
        for i, m in enumerate(mask):
            if m not in (0, 1) or isinstance(m, bool):
                c.fail(f"data.token_view.loss_mask[{i}]", "must be 0 or 1")
    for key in ("logprobs", "ref_logprobs", "advantages", "rollout_logprobs"):
        values = lists[key]
        if values is None or _all_finite_floats(values):
            continue
        for i, v in enumerate(values):
            if v is not None and not _finite_number(v):
                c.fail(f"data.token_view.{key}[{i}]", "must be a finite number or null")
    return TokenView(**lists)  # type: ignore[arg-type]


def _sample(c: Checker, d: Mapping[str, Any]) -> SampleData:
    extra = d.get("reward_extra") or {}
    if not isinstance(extra, dict):
        c.fail("data.reward_extra", "must be an object")
    validation = d.get("validation", False)
    if not isinstance(validation, bool):
        c.fail("data.validation", "must be true or false")
    return SampleData(
        step=c.int_(d, "step", "data.step"),
        uid=c.str_(d, "uid", "data.uid", nonempty=True),
        index=c.int_(d, "index", "data.index"),
        reward=c.num(d, "reward", "data.reward"),
        advantage=c.num(d, "advantage", "data.advantage"),
        response_length=c.int_(d, "response_length", "data.response_length"),
        num_turns=c.int_(d, "num_turns", "data.num_turns"),
        finish_reason=c.str_(d, "finish_reason", "data.finish_reason", choices=FINISH_REASONS),
        messages=_messages(c, d),
        reward_extra=c.json_value(extra, "data.reward_extra"),
        data_source=c.str_(d, "data_source", "data.data_source", optional=True),
        ground_truth=c.json_value(d.get("ground_truth"), "data.ground_truth"),
        tool_calls=c.int_(d, "tool_calls", "data.tool_calls", optional=True),
        token_view=None if d.get("token_view") is None else _token_view(c, d["token_view"]),
        validation=validation,
        group_size=c.int_(d, "group_size", "data.group_size", minimum=1, optional=True),
        group_mean=c.num(d, "group_mean", "data.group_mean", optional=True),
        group_std=c.num(d, "group_std", "data.group_std", optional=True),
        prompt_split=c.str_(d, "prompt_split", "data.prompt_split", choices=PROMPT_SPLITS, optional=True),
        prompt_index=c.int_(d, "prompt_index", "data.prompt_index", optional=True),
        prompt_hash=_prompt_hash(c, d),
    )


def _prompt_hash(c: Checker, d: Mapping[str, Any]) -> Union[str, None]:
    value = c.str_(d, "prompt_hash", "data.prompt_hash", optional=True)
    if value is not None and not is_prompt_hash(value):
        c.fail("data.prompt_hash", f"must be {PROMPT_HASH_CHARS} lowercase hex digits")
    return value


def _memory(c: Checker, d: Mapping[str, Any]) -> MemoryData:
    device = c.str_(d, "device", "data.device")
    if device != "cpu" and not (device.startswith("cuda:") and device[5:].isdigit()):
        c.fail("data.device", f"must be 'cpu' or 'cuda:<index>' (got {device!r})")
    return MemoryData(
        step=c.int_(d, "step", "data.step"),
        phase=c.str_(d, "phase", "data.phase", choices=MEMORY_PHASES),
        device=device,
        rss=c.int_(d, "rss", "data.rss"),
        allocated=c.int_(d, "allocated", "data.allocated", optional=True, default=0),
        reserved=c.int_(d, "reserved", "data.reserved", optional=True, default=0),
        peak=c.int_(d, "peak", "data.peak", optional=True, default=0),
        rank=c.int_(d, "rank", "data.rank", optional=True, default=0),
        device_used=c.int_(d, "device_used", "data.device_used", optional=True, default=0),
    )


def _log(c: Checker, d: Mapping[str, Any]) -> LogData:
    return LogData(
        level=c.str_(d, "level", "data.level", choices=LOG_LEVELS),
        message=c.str_(d, "message", "data.message", limit=MAX_LOG_CHARS),
    )


def _checkpoint(c: Checker, d: Mapping[str, Any]) -> CheckpointData:
    return CheckpointData(
        step=c.int_(d, "step", "data.step"), path=c.str_(d, "path", "data.path", nonempty=True)
    )


PARSERS: dict[str, Callable[[Checker, Mapping[str, Any]], EventData]] = {
    "status": _status,
    "heartbeat": _heartbeat,
    "metrics": _metrics,
    "sample": _sample,
    "memory": _memory,
    "log": _log,
    "checkpoint": _checkpoint,
}

