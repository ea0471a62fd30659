"""The events a run reports, and their strict validation (standard library only): a package.

Owns the wire schema shared by the trainer (which emits events to its sinks) and the platform (whose
ingest API validates and stores them). One event per JSON line:

    {"seq": 7, "type": "metrics", "time": 1764440000.25, "data": {"step": 3, "metrics": {...}}}

``seq`` is a per-run sequence number starting at 1 (the platform stores each exactly once), ``time`` is
unix seconds, ``data`` depends on ``type`` (one dataclass per type, in ``schema``). ``validate_event``
accepts a dict (or a JSON line via ``decode_event``) and returns a typed ``Event`` or raises ``EventError`` with a
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

The package's modules: ``schema`` (the limits, the allowed values, one dataclass per payload),
``checks`` (the payload's field checks, one per event type), ``wire`` (``Event``, ``validate_event``,
``make_event``, ``encode_event``, ``decode_event``, ``fit_sample``). The trainer and the platform
import from those modules.
"""

# `trainer.events.<name>` is a documented import path (docs/live.md, docs/api.md, README.md) and the one
# a user's own sink (trainer.sink_registry) is written against, so the package keeps naming the public
# schema here; code in this repository imports from the module that owns a name.
from trainer.events.schema import (
    DATA_CLASSES,
    EVENT_TYPES,
    FINISH_REASONS,
    LOG_LEVELS,
    MAX_EVENT_BYTES,
    MAX_EVENT_TIME,
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
    SAMPLE_OPTIONAL_KEYS,
    STATUS_STATES,
    TERMINAL_STATES,
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
    finite_or_none,
    is_prompt_hash,
    plain,
)
from trainer.events.wire import Event, decode_event, encode_event, fit_sample, make_event, validate_event

__all__ = [
    "CheckpointData", "DATA_CLASSES", "EVENT_TYPES", "Event", "EventData", "EventError", "FINISH_REASONS",
    "HeartbeatData", "LOG_LEVELS", "LogData", "MAX_EVENT_BYTES", "MAX_EVENT_TIME", "MAX_LOG_CHARS",
    "MAX_MESSAGES", "MAX_MESSAGE_CHARS", "MAX_METRICS", "MAX_METRIC_NAME", "MAX_STRING", "MAX_TOKEN_VIEW",
    "MEMORY_PHASES", "MESSAGE_ROLES", "MemoryData", "MetricsData", "PROMPT_HASH_CHARS", "PROMPT_SPLITS",
    "SAMPLE_OPTIONAL_KEYS", "STATUS_STATES", "SampleData", "StatusData", "TERMINAL_STATES", "TokenView",
    "decode_event", "encode_event", "finite_or_none", "fit_sample", "is_prompt_hash", "make_event", "plain",
    "validate_event",
]
