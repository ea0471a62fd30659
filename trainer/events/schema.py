"""The events' payloads: the wire limits, the allowed values, one dataclass per event type.

Standard library only. The field checks that build these from a wire-form dict are in
trainer.events.checks; the envelope (``Event``: seq, type, time, data) and its JSON line form in
trainer.events.wire.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, is_dataclass
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


def finite_or_none(value: float) -> float | None:
    """A metric value as sent: floats, with NaN / inf as None."""
    value = float(value)
    return value if math.isfinite(value) else None
