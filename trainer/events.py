"""The events a run reports, and their strict validation (standard library only).

Owns the wire schema shared by the trainer (which emits events to its sinks) and the platform (whose
ingest API validates and stores them). One event per JSON line:

    {"seq": 7, "type": "metrics", "time": 1764440000.25, "data": {"step": 3, "metrics": {...}}}

``seq`` is a per-run sequence number starting at 1 (the platform stores each exactly once), ``time`` is
unix seconds, ``data`` depends on ``type`` (one dataclass per type below). ``validate_event`` accepts a
dict (or a JSON line via ``decode_event``) and returns a typed ``Event`` or raises ``EventError`` with a
reason naming the event and field ("event 3: field data.step must be an int >= 0"). Floats on the wire
are finite (strict JSON: PostgreSQL's jsonb rejects NaN); a metric that is not finite is sent as null.

A sample's ``messages`` are chat messages ({role, content, tool_calls?, tool_call_id?, name?}); an
assistant turn with a tool-call block that could not be parsed also carries ``raw`` (the turn's text as
the model wrote it, a string) and ``tool_call_errors`` ([{reason, message}], see trainer.rollout.parser).
A training sample may carry its GRPO group as the step computed it (``group_size``, ``group_mean``,
``group_std``: the scores of the samples of its prompt, trainer.algorithms.advantages); the trainer
reports whole groups. It also carries the prompt's stable identity, beside the per-draw ``uid``
(verl's uid: new every time the prompt enters a batch, so GRPO groups one draw) and ``index`` (the
sample within its group): ``prompt_split`` (``train`` | ``val``), ``prompt_index`` (the dataset row,
verl's ``index`` of the row) and ``prompt_hash`` (trainer.types.prompt_hash of the rendered prompt);
the platform follows a prompt across steps by split and hash. Older events have none of the three.

Why one file of ~600 lines: it is the wire contract between two programs that never import each
other's code, and a reader checks a change to it in one place (one dataclass and one checker per
event type, with the shared field checkers above them).
"""

from __future__ import annotations

import json
import math
import time as _time
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import Any, Union

# ------------------------------------------------------------------------------------------ limits
MAX_EVENT_BYTES = 1 << 20  # one encoded event (a JSON line)
MAX_MESSAGES = 200  # messages in one sample's transcript
MAX_MESSAGE_CHARS = 100_000  # characters in one message's content
MAX_METRICS = 2000  # metrics in one metrics event
MAX_METRIC_NAME = 200  # characters in a metric name
MAX_TOKEN_VIEW = 32_768  # tokens in one sample's token view
MAX_LOG_CHARS = 20_000  # characters in one log message
MAX_STRING = 4096  # other free-text fields (status message, paths, uid ...)

EVENT_TYPES = ("status", "heartbeat", "metrics", "sample", "memory", "log", "checkpoint")
STATUS_STATES = ("starting", "running", "stopping", "stopped", "succeeded", "failed")
TERMINAL_STATES = ("stopped", "succeeded", "failed")
MEMORY_PHASES = ("rollout", "reward_model", "old_log_prob", "ref", "values", "update_critic", "update", "sync", "idle")
LOG_LEVELS = ("debug", "info", "warning", "error")
FINISH_REASONS = ("stop", "length", "tool_calls", "error")
MESSAGE_ROLES = ("system", "user", "assistant", "tool")
# Sample fields left out of the wire form when unset (older events have none of them).
SAMPLE_OPTIONAL_KEYS = ("reward_extra", "data_source", "ground_truth", "tool_calls", "token_view",
                        "group_size", "group_mean", "group_std", "prompt_split", "prompt_index", "prompt_hash")
PROMPT_SPLITS = ("train", "val")  # a sample's prompt_split: data.train_files or data.val_files
PROMPT_HASH_CHARS = 32  # a prompt_hash: this many lowercase hex digits


def is_prompt_hash(value: str) -> bool:
    """Whether `value` has a prompt_hash's form (PROMPT_HASH_CHARS lowercase hex digits)."""
    return len(value) == PROMPT_HASH_CHARS and not value.strip("0123456789abcdef")


class EventError(ValueError):
    """An event that does not follow the schema; ``reason`` says which field and why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# ------------------------------------------------------------------------------------- data classes
@dataclass
class StatusData:
    state: str
    message: str = ""
    step: int = 0
    total_steps: Union[int, None] = None


@dataclass
class HeartbeatData:
    step: int


@dataclass
class MetricsData:
    step: int
    metrics: dict[str, Union[float, None]]  # None = the value was not finite (NaN / inf)


@dataclass
class TokenView:
    """Per-token view of one trajectory's response (all lists the same length)."""

    ids: list[int]
    pieces: list[str]  # decoded text of each token
    loss_mask: list[int]  # 1 = trained on (assistant tokens)
    logprobs: list[Union[float, None]]  # old (actor) log-probs
    ref_logprobs: Union[list[Union[float, None]], None]  # None when there is no reference model
    advantages: list[Union[float, None]]
    # The rollout engine's log-probs of the sampled tokens (None on tokens it did not generate); the
    # whole list None when not recorded (older events, bypass mode where they are the old log-probs).
    rollout_logprobs: Union[list[Union[float, None]], None] = None


@dataclass
class SampleData:
    step: int
    uid: str
    index: int
    reward: float
    advantage: float
    response_length: int
    num_turns: int
    finish_reason: str
    messages: list[dict[str, Any]]
    reward_extra: dict[str, Any] = field(default_factory=dict)
    data_source: Union[str, None] = None
    ground_truth: Any = None
    tool_calls: Union[int, None] = None
    token_view: Union[TokenView, None] = None
    validation: bool = False  # True for samples from a validation pass
    # The sample's GRPO group at this step, as the advantage estimator saw it: how many samples of the
    # prompt, the mean and (unbiased) std of their scores (a group of one: mean 0, std 1, as verl).
    group_size: Union[int, None] = None
    group_mean: Union[float, None] = None
    group_std: Union[float, None] = None
    # The prompt's stable identity (None in events of older trainers): the data it was read from, its
    # dataset row there (verl's row `index`; `index` above is the sample within its group), and the
    # content hash of the rendered prompt. The uid is new at every draw; these are not.
    prompt_split: Union[str, None] = None
    prompt_index: Union[int, None] = None
    prompt_hash: Union[str, None] = None


@dataclass
class MemoryData:
    step: int
    phase: str
    device: str  # "cpu" or "cuda:<i>"
    rss: int  # process resident set size, bytes
    allocated: int = 0  # CUDA bytes allocated now (0 on the CPU)
    reserved: int = 0  # CUDA bytes reserved by the caching allocator
    peak: int = 0  # CUDA peak allocated since the last reset (RSS peak on the CPU)
    rank: int = 0  # worker rank that measured it (0 for the single-process trainer)
    device_used: int = 0  # bytes in use on the whole device per NVML (0 on the CPU or without NVML)


@dataclass
class LogData:
    level: str
    message: str


@dataclass
class CheckpointData:
    step: int
    path: str


EventData = Union[
    StatusData, HeartbeatData, MetricsData, SampleData, MemoryData, LogData, CheckpointData
]
DATA_CLASSES: dict[str, type] = {
    "status": StatusData,
    "heartbeat": HeartbeatData,
    "metrics": MetricsData,
    "sample": SampleData,
    "memory": MemoryData,
    "log": LogData,
    "checkpoint": CheckpointData,
}
# The `data` keys each event type allows (validate_event checks every event against them).
_DATA_KEYS: dict[str, frozenset[str]] = {k: frozenset(cls.__dataclass_fields__) for k, cls in DATA_CLASSES.items()}
_EVENT_KEYS = frozenset({"seq", "type", "time", "data"})
# 10000-01-01T00:00:00Z: a later time is no datetime Python reads back (PostgreSQL refused far later ones)
MAX_EVENT_TIME = 253_402_300_800


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def plain(obj: Any) -> Any:
    """A plain-container copy of an event's data: dataclasses become dicts, lists and dicts are copied.

    What `dataclasses.asdict` gives, at a fraction of its cost (asdict deep-copies every leaf through
    `copy.deepcopy`; a sample with a token view has thousands): leaves here are str / int / float /
    bool / None, which are immutable, so copying the containers is enough to detach the event from
    the caller's objects.
    """
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    cls = type(obj)
    names = _FIELD_NAMES.get(cls)
    if names is None:
        if not is_dataclass(obj):
            return obj
        names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(obj))
    return {name: plain(getattr(obj, name)) for name in names}


@dataclass
class Event:
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


def finite_or_none(value: float) -> float | None:
    """A metric value as sent: floats, with NaN / inf as None."""
    value = float(value)
    return value if math.isfinite(value) else None


# ---------------------------------------------------------------------------------------- checking
class _Checker:
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
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
        ):
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


def _status(c: _Checker, d: Mapping[str, Any]) -> StatusData:
    return StatusData(
        state=c.str_(d, "state", "data.state", choices=STATUS_STATES),
        message=c.str_(d, "message", "data.message", optional=True, default=""),
        step=c.int_(d, "step", "data.step", optional=True, default=0),
        total_steps=c.int_(d, "total_steps", "data.total_steps", optional=True),
    )


def _heartbeat(c: _Checker, d: Mapping[str, Any]) -> HeartbeatData:
    return HeartbeatData(step=c.int_(d, "step", "data.step"))


def _metrics(c: _Checker, d: Mapping[str, Any]) -> MetricsData:
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


def _messages(c: _Checker, d: Mapping[str, Any]) -> list[dict[str, Any]]:
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


def _all_finite_floats(values: list[Any]) -> bool:
    """True when every entry is a float or None and the floats are finite (a quick whole-list check:
    a sum of floats is finite only if every term is; an overflowing sum just takes the slow path)."""
    kinds = set(map(type, values))
    if not kinds <= {float, type(None)}:
        return False
    floats = values if type(None) not in kinds else [v for v in values if v is not None]
    return math.isfinite(sum(floats))


def _token_view(c: _Checker, d: Any) -> TokenView:
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
            if v is not None and (
                isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
            ):
                c.fail(f"data.token_view.{key}[{i}]", "must be a finite number or null")
    return TokenView(**lists)  # type: ignore[arg-type]


def _sample(c: _Checker, d: Mapping[str, Any]) -> SampleData:
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


def _prompt_hash(c: _Checker, d: Mapping[str, Any]) -> Union[str, None]:
    value = c.str_(d, "prompt_hash", "data.prompt_hash", optional=True)
    if value is not None and not is_prompt_hash(value):
        c.fail("data.prompt_hash", f"must be {PROMPT_HASH_CHARS} lowercase hex digits")
    return value


def _memory(c: _Checker, d: Mapping[str, Any]) -> MemoryData:
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


def _log(c: _Checker, d: Mapping[str, Any]) -> LogData:
    return LogData(
        level=c.str_(d, "level", "data.level", choices=LOG_LEVELS),
        message=c.str_(d, "message", "data.message", limit=MAX_LOG_CHARS),
    )


def _checkpoint(c: _Checker, d: Mapping[str, Any]) -> CheckpointData:
    return CheckpointData(
        step=c.int_(d, "step", "data.step"), path=c.str_(d, "path", "data.path", nonempty=True)
    )


_PARSERS = {
    "status": _status,
    "heartbeat": _heartbeat,
    "metrics": _metrics,
    "sample": _sample,
    "memory": _memory,
    "log": _log,
    "checkpoint": _checkpoint,
}


def validate_event(obj: Any) -> Event:
    """Check one wire-form event strictly and return it typed; EventError(reason) otherwise."""
    if isinstance(obj, Event):
        obj = obj.to_dict()
    if type(obj) is not dict and not isinstance(obj, Mapping):
        raise EventError("event: must be an object with seq, type, time and data")
    seq = obj.get("seq")
    where = f"event {seq}" if isinstance(seq, int) and not isinstance(seq, bool) else "event"
    c = _Checker(where)
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
    return Event(seq=seq, type=kind, time=when, data=_PARSERS[kind](c, data))


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
