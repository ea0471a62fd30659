"""The event schema: valid events of every type round-trip; invalid ones fail with a precise reason."""

import copy
import json
import math

import pytest

import trainer.events
from trainer.events import schema as ev
from trainer.events.schema import EventError
from trainer.events.wire import decode_event, encode_event, fit_sample, make_event, validate_event

T0 = 1_764_440_000.5


def _sample(**over):
    data = {
        "step": 2,
        "uid": "p-1",
        "index": 3,
        "reward": 1.0,
        "advantage": -0.25,
        "response_length": 5,
        "num_turns": 2,
        "finish_reason": "stop",
        "messages": [
            {"role": "system", "content": "be careful"},
            {"role": "user", "content": "What is 2 + 3?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "type": "function",
                        "function": {"name": "calculator", "arguments": {"expression": "2+3"}},
                    }
                ],
            },
            {"role": "tool", "content": "5"},
            {"role": "assistant", "content": "#### 5"},
        ],
        "reward_extra": {"acc": 1.0},
        "data_source": "arith",
        "ground_truth": "5",
        "tool_calls": 1,
        "token_view": {
            "ids": [7, 8, 9],
            "pieces": ["##", " 5", "<|im_end|>"],
            "loss_mask": [1, 1, 0],
            "logprobs": [-0.1, -0.2, None],
            "ref_logprobs": [-0.1, -0.3, None],
            "advantages": [-0.25, -0.25, 0.0],
        },
    }
    data.update(over)
    return {"seq": 5, "type": "sample", "time": T0, "data": data}


VALID = [
    {
        "seq": 1,
        "type": "status",
        "time": T0,
        "data": {"state": "starting", "message": "loading", "step": 0, "total_steps": 10},
    },
    {"seq": 2, "type": "heartbeat", "time": T0, "data": {"step": 0}},
    {
        "seq": 3,
        "type": "metrics",
        "time": T0,
        "data": {
            "step": 1,
            "metrics": {
                "critic/score/mean": 0.5,
                "actor/grad_norm": None,
                "perf/total_num_tokens": 300,
            },
        },
    },
    {
        "seq": 4,
        "type": "memory",
        "time": T0,
        "data": {
            "step": 1,
            "phase": "rollout",
            "device": "cuda:0",
            "rss": 10,
            "allocated": 5,
            "reserved": 6,
            "peak": 7,
        },
    },
    _sample(),
    {
        "seq": 6,
        "type": "log",
        "time": T0,
        "data": {"level": "warning", "message": "3 prompts filtered"},
    },
    {
        "seq": 7,
        "type": "checkpoint",
        "time": T0,
        "data": {"step": 2, "path": "outputs/run/global_step_2"},
    },
]


@pytest.mark.parametrize("obj", VALID, ids=lambda o: o["type"])
def test_valid_events_round_trip(obj):
    event = validate_event(obj)
    assert event.type == obj["type"] and event.seq == obj["seq"]
    line = encode_event(event)
    assert "\n" not in line and decode_event(line) == event
    wire = json.loads(line)
    assert set(wire) == {"seq", "type", "time", "data"}
    assert validate_event(wire).to_dict() == event.to_dict()


def test_every_type_is_covered():
    assert {o["type"] for o in VALID} == set(ev.EVENT_TYPES)


def test_sample_typed_fields_and_optional_parts():
    e = validate_event(_sample())
    assert isinstance(e.data, ev.SampleData) and isinstance(e.data.token_view, ev.TokenView)
    assert e.data.token_view.loss_mask == [1, 1, 0]
    minimal = _sample()
    for key in ("reward_extra", "data_source", "ground_truth", "tool_calls", "token_view"):
        minimal["data"].pop(key)
    m = validate_event(minimal)
    assert m.data.token_view is None and m.to_dict()["data"].keys() == {
        "step",
        "uid",
        "index",
        "reward",
        "advantage",
        "response_length",
        "num_turns",
        "finish_reason",
        "messages",
    }
    view = copy.deepcopy(_sample())
    view["data"]["token_view"]["ref_logprobs"] = None  # no reference model
    assert validate_event(view).data.token_view.ref_logprobs is None
    assert validate_event(view).data.token_view.rollout_logprobs is None  # not recorded (older events)
    view["data"]["token_view"]["rollout_logprobs"] = [-0.12, -0.2, None]  # the engine's, None where not sampled
    assert validate_event(view).data.token_view.rollout_logprobs == [-0.12, -0.2, None]


def _with(obj, path, value):
    obj = copy.deepcopy(obj)
    node = obj
    *head, last = path
    for p in head:
        node = node[p]
    if value is KeyError:
        del node[last]
    else:
        node[last] = value
    return obj


@pytest.mark.parametrize(
    "obj, reason",
    [
        (_with(VALID[1], ["data", "step"], -1), "event 2: field data.step must be an int >= 0"),
        (_with(VALID[1], ["data", "step"], True), "event 2: field data.step must be an int >= 0"),
        (_with(VALID[1], ["data", "step"], KeyError), "event 2: field data.step is missing"),
        (_with(VALID[1], ["seq"], 0), "event 0: field seq must be an int >= 1"),
        (_with(VALID[1], ["seq"], "1"), "event: field seq must be an int >= 1"),
        (
            _with(VALID[1], ["type"], "progress"),
            "event 2: field type must be one of status, heartbeat",
        ),
        (_with(VALID[1], ["time"], -5), "event 2: field time must be unix seconds > 0"),
        (_with(VALID[1], ["time"], 1e20), "event 2: field time must be unix seconds > 0, before the year 10000"),
        (_with(VALID[1], ["extra"], 1), "event 2: field extra is not allowed"),
        (
            _with(VALID[1], ["data", "bogus"], 1),
            "event 2: field data.bogus is not a field of a heartbeat event",
        ),
        (
            _with(VALID[0], ["data", "state"], "paused"),
            "event 1: field data.state must be one of starting",
        ),
        (
            _with(VALID[2], ["data", "metrics", "x"], float("nan")),
            "event 3: field data.metrics['x'] must be a finite",
        ),
        (
            _with(VALID[2], ["data", "metrics", "x"], "1"),
            "event 3: field data.metrics['x'] must be a finite",
        ),
        (
            _with(VALID[2], ["data", "metrics"], [1]),
            "event 3: field data.metrics must be an object",
        ),
        (
            _with(VALID[3], ["data", "phase"], "gen"),
            "event 4: field data.phase must be one of rollout",
        ),
        (
            _with(VALID[3], ["data", "device"], "gpu"),
            "event 4: field data.device must be 'cpu' or 'cuda:<index>'",
        ),
        (
            _with(VALID[4], ["data", "finish_reason"], "eos"),
            "event 5: field data.finish_reason must be one of stop",
        ),
        (_with(VALID[4], ["data", "uid"], ""), "event 5: field data.uid must not be empty"),
        (
            _with(VALID[4], ["data", "messages", 1, "role"], "bot"),
            "event 5: field data.messages[1].role must be one of",
        ),
        (
            _with(VALID[4], ["data", "messages", 4, "content"], None),
            "event 5: field data.messages[4].content must be",
        ),
        (
            _with(VALID[4], ["data", "token_view", "loss_mask"], [1, 1]),
            "event 5: field data.token_view.loss_mask must have one entry per token (3), got 2",
        ),
        (
            _with(VALID[4], ["data", "token_view", "loss_mask"], [1, 2, 0]),
            "event 5: field data.token_view.loss_mask[1] must be 0 or 1",
        ),
        (
            _with(VALID[4], ["data", "token_view", "logprobs"], [0.0, float("inf"), 0.0]),
            "event 5: field data.token_view.logprobs[1] must be a finite number or null",
        ),
        (
            _with(VALID[4], ["data", "token_view", "rollout_logprobs"], [-0.1, None]),
            "event 5: field data.token_view.rollout_logprobs must have one entry per token (3), got 2",
        ),
        (
            _with(VALID[4], ["data", "token_view", "rollout_logprobs"], [-0.1, "x", None]),
            "event 5: field data.token_view.rollout_logprobs[1] must be a finite number or null",
        ),
        (
            _with(VALID[4], ["data", "reward"], float("nan")),
            "event 5: field data.reward must be a finite number",
        ),
        (
            _with(VALID[5], ["data", "level"], "fatal"),
            "event 6: field data.level must be one of debug",
        ),
        (_with(VALID[6], ["data", "path"], ""), "event 7: field data.path must not be empty"),
        ("not an event", "event: must be an object"),
    ],
)
def test_invalid_events_give_precise_reasons(obj, reason):
    with pytest.raises(EventError) as info:
        validate_event(obj)
    assert info.value.reason.startswith(reason), info.value.reason


def test_size_limits():
    too_many = _sample(messages=[{"role": "user", "content": "x"}] * (ev.MAX_MESSAGES + 1))
    with pytest.raises(
        EventError, match=f"data.messages must have at most {ev.MAX_MESSAGES} items"
    ):
        validate_event(too_many)
    long_log = {
        "seq": 9,
        "type": "log",
        "time": T0,
        "data": {"level": "info", "message": "x" * (ev.MAX_LOG_CHARS + 1)},
    }
    with pytest.raises(EventError, match="data.message must be at most"):
        validate_event(long_log)
    # under every per-field limit but over the 1 MiB line limit
    msgs = [{"role": "user", "content": "y" * (ev.MAX_MESSAGE_CHARS - 10)} for _ in range(12)]
    big = _sample(messages=msgs)
    validate_event(big)
    with pytest.raises(EventError, match="exceeds MAX_EVENT_BYTES"):
        encode_event(big)
    with pytest.raises(EventError, match="exceeds MAX_EVENT_BYTES"):
        decode_event(json.dumps(big))


def test_fit_sample_shrinks_to_fit():
    raw = ev.SampleData(
        step=1,
        uid="u",
        index=0,
        reward=0.0,
        advantage=0.0,
        response_length=1,
        num_turns=1,
        finish_reason="length",
        messages=[{"role": "user", "content": "z" * (ev.MAX_MESSAGE_CHARS + 50)}]
        * (ev.MAX_MESSAGES + 20),
        token_view=ev.TokenView(
            ids=[1] * 10,
            pieces=["a"] * 10,
            loss_mask=[1] * 10,
            logprobs=[0.0] * 10,
            ref_logprobs=None,
            advantages=[0.0] * 10,
        ),
    )
    fitted = fit_sample(raw)
    assert all(len(m["content"]) <= ev.MAX_MESSAGE_CHARS for m in fitted.messages)
    assert fitted.messages[0]["content"].endswith("[truncated]")
    event = make_event(4, fitted, time=T0)
    assert len(encode_event(event).encode()) <= ev.MAX_EVENT_BYTES
    assert len(fitted.messages) == ev.MAX_MESSAGES
    assert fitted.token_view is None  # 200 x 100k chars: the view had to go too
    small = fit_sample(
        ev.SampleData(**{**raw.__dict__, "messages": [{"role": "user", "content": "hi"}]})
    )
    assert small.token_view is not None


def test_make_event_and_strict_json():
    e = make_event(
        3, ev.MetricsData(step=1, metrics={"a": ev.finite_or_none(float("inf")), "b": 2.0})
    )
    assert e.type == "metrics" and e.time > 0 and e.data.metrics == {"a": None, "b": 2.0}
    with pytest.raises(EventError, match="not strict JSON"):
        decode_event('{"seq": 1, "type": "heartbeat", "time": NaN, "data": {"step": 0}}')
    with pytest.raises(EventError, match="not an event payload"):
        make_event(1, {"step": 1})  # type: ignore[arg-type]
    assert math.isnan(float("nan")) and ev.finite_or_none(1) == 1.0


def test_public_path_names_the_schema():
    """`trainer.events.<name>` is the documented path (and a user's sink's): it names every public class
    and function of the package's modules, the very same objects."""
    from trainer.events import checks, wire

    modules = (ev, checks, wire)
    for name in trainer.events.__all__:
        owner = next(m for m in modules if hasattr(m, name))
        assert getattr(trainer.events, name) is getattr(owner, name), name
    # checks.py's Checker and PARSERS are the package's own machinery, not the schema.
    defined = {name for m in (ev, wire) for name, obj in vars(m).items()
               if not name.startswith("_") and getattr(obj, "__module__", None) == m.__name__}
    assert defined <= set(trainer.events.__all__), defined - set(trainer.events.__all__)
