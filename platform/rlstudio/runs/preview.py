"""Every error of a new run's config at once, and the effective config previewed before launch.

`launch.build_config` (what a run is made with) stops at the first error: the trainer's `validate`
and the config gate raise on the first. Here the same inputs are checked piece by piece so that a
user sees everything that is wrong in one answer:

- a whole config (YAML / the API's `config`): each key on its own, for its type (the trainer's
  schema) and against the gate;
- each override on its own, against the config it applies to (type, then the gate);
- then, with only the pieces that passed, the platform's keys and the trainer's cross-field checks
  (`trainer.config.config_errors`: each part of the spec's first failure, all parts at once).

`check_all` returns the errors and the effective config as far as it could be built; `preview` adds
what the new-run form shows: the config as YAML lines, each key that differs from where it started
(the preset as written, the saved config, or the schema's defaults) marked as the user's, adapted to
the resources (`adapt.py`), or the platform's; the adaptations ("adapted for CPU: ..."); the
trainer's warnings (`warnings`: never a refusal); and the memory estimate per device
(`memory_estimate.py`) with one checkpoint's disk (`checkpoint_estimate.py`). Nothing is stored.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from trainer.config import Config, ConfigError, apply_overrides, config_errors, config_warnings, describe_sections

from . import launch
from .adapt import Adaptation, adapt_preset, resources_label
from .gate.bounds import GateRefused
from .gate.changes import check, check_bounds, user_view
from .gate.flat import flatten, unflatten
from .gate.keys import PLATFORM_KEYS

# The resource keys the platform writes from the run's GPUs (listed with the adaptations).
RESOURCE_KEYS = ("trainer.device", "trainer.nnodes", "trainer.n_gpus_per_node", "trainer.launcher")
_SECTIONS = frozenset(key for key, _help in describe_sections())


@dataclass(frozen=True)
class FieldError:
    """One error: `field` is a config key (dotted) or an input field (dataset, preset, overrides, ...);
    `source` says where the culprit was typed (overrides, config) when that is known."""

    field: str
    message: str
    source: str = ""

    def as_dict(self) -> dict[str, str]:
        return {"field": self.field, "message": self.message}


@dataclass
class Checked:
    """What `check_all` found: the errors, and the config as far as it could be built."""

    errors: list[FieldError]
    config: dict[str, Any] | None = None  # the effective config (None: not even a starting point)
    reference: dict[str, Any] | None = None  # where it started: the preset as written, the saved config, defaults
    reference_label: str = ""
    adaptations: tuple[Adaptation, ...] = ()
    resources: str = "CPU"
    override_keys: set[str] = field(default_factory=set)


def _error(exc: Exception, source: str = "") -> FieldError:
    key = getattr(exc, "key", None) or source or "config"
    return FieldError(str(key), str(getattr(exc, "message", exc)), source)


class _Gate:
    """The gate's check with the registries read once per call of check_all."""

    def __init__(self):
        from trainer.tools import registered_tools

        self.rewards, self.tools = launch.reward_names(), registered_tools()
        self.trackers = launch.tracker_refusals()

    def __call__(self, before: Config, after: Config) -> None:
        check(before=before.to_dict(), after=after.to_dict(), reward_names=self.rewards, tool_names=self.tools,
                   trackers=self.trackers)


def _whole_config(config: Mapping[str, Any], check_gate: _Gate, errors: list[FieldError]) -> Config:
    """A config the user typed, key by key: the keys that pass (type and gate) make the start."""
    good: dict[str, Any] = {}
    defaults = Config()
    for key, value in flatten(config).items():
        try:
            one = Config.from_dict(unflatten({key: value}))
            check_gate(defaults, one)
        except (ConfigError, GateRefused) as exc:
            errors.append(_error(exc, "config"))
        else:
            good[key] = value
    return Config.from_dict(unflatten(good))


def _overrides(start: Config, overrides: Any, check_gate: _Gate, errors: list[FieldError]) -> tuple[Config, set[str]]:
    """Each override on its own against `start`; the config with those that pass, and the keys typed."""
    if isinstance(overrides, str) or not isinstance(overrides, (Mapping, list, tuple)):
        errors.append(FieldError("overrides", "must be an object of dotted keys or a list of key=value", "overrides"))
        return start, set()
    items: list[Any] = list(overrides.items()) if isinstance(overrides, Mapping) else list(overrides)
    keys, good = set(), []
    for i, item in enumerate(items):
        one = dict([item]) if isinstance(overrides, Mapping) else [item]
        if isinstance(item, str):
            keys.add(item.split("=", 1)[0].strip().lstrip("+"))
        elif isinstance(item, tuple):
            keys.add(str(item[0]))
        try:
            check_gate(start, apply_overrides(start, one))
        except (ConfigError, GateRefused) as exc:
            err = _error(exc, "overrides")
            if err.field == "overrides[0]":  # the item's own index in the whole list
                err = FieldError(f"overrides[{i}]", err.message, "overrides")
            errors.append(err)
        else:
            good.append(item)
    if not good:
        return start, keys
    together = dict(good) if isinstance(overrides, Mapping) else good
    try:
        cfg = apply_overrides(start, together)
        check_gate(start, cfg)
    except (ConfigError, GateRefused) as exc:  # each passed alone; together they do not
        errors.append(_error(exc, "overrides"))
        return start, keys
    return cfg, keys


def check_all(*, preset: str | None = None, config: Mapping[str, Any] | None = None,
              base: Mapping[str, Any] | None = None, overrides: Sequence[str] | Mapping[str, Any] | None = None,
              dataset=None, val_dataset=None, model=None, gpus: int = 0, adapt: bool | None = None,
              reward_model=None) -> Checked:
    """Every error `launch.build_config` would raise one at a time, as far as they can be found at once
    (same inputs, same meaning of `adapt`)."""
    errors: list[FieldError] = []
    checked = Checked(errors=errors, resources=resources_label(gpus))
    check_gate = _Gate()
    try:
        if base is not None:
            if not isinstance(base, Mapping):
                raise launch.ConfigInvalid("config", "must be an object")
            start = Config.from_dict(user_view(base))
            check_bounds(start.to_dict())
            checked.reference, checked.reference_label = start.to_dict(), "the saved config"
        elif config:
            if not isinstance(config, Mapping):
                raise launch.ConfigInvalid("config", "must be an object")
            launch.check_shape("config", config)
            start = _whole_config(config, check_gate, errors)
            checked.reference, checked.reference_label = Config().to_dict(), "the schema's defaults"
        else:
            name = preset or launch.DEFAULT_PRESET
            start = launch.preset_config(name)
            checked.reference, checked.reference_label = start.to_dict(), f"the preset {name}"
            if adapt or (adapt is None and dataset is not None):
                adapted = adapt_preset(start, gpus=gpus)
                start, checked.adaptations = adapted.config, adapted.changes
    except (ConfigError, GateRefused, launch.ConfigInvalid) as exc:
        errors.append(_error(exc, "config"))
        return checked
    cfg = start
    if overrides:
        try:
            launch.check_shape("overrides", overrides)
        except launch.ConfigInvalid as exc:
            errors.append(_error(exc, "overrides"))
            return checked
        cfg, checked.override_keys = _overrides(start, overrides, check_gate, errors)
    try:
        cfg = apply_overrides(cfg, launch.platform_values(dataset=dataset, val_dataset=val_dataset, model=model,
                                                          gpus=gpus, reward_name=cfg.reward.name,
                                                          reward_model=reward_model))
        launch.check_reward_model(cfg, reward_model, require=dataset is not None)
    except (ConfigError, launch.ConfigInvalid) as exc:
        errors.append(_error(exc))
        checked.config = cfg.to_dict()
        return checked
    checked.config = cfg.to_dict()
    refused = {e.field for e in errors}
    for exc in config_errors(cfg, require_paths=dataset is not None):
        if exc.key not in refused:  # not a consequence of a piece already refused
            errors.append(_error(exc))
    if not errors:  # the operator's bounds on one step, one validation and checkpoints kept, over keys that each passed
        try:
            launch.check_sizes(checked.config, val_dataset, model, dataset=dataset)
        except GateRefused as exc:
            errors.append(_error(exc))
    return checked


def merge(first: FieldError | None, more: Iterable[FieldError]) -> list[FieldError]:
    """`first` (the error the service raised: the API's `error`) then the others, each once."""
    out: list[FieldError] = [first] if first is not None else []
    seen = {(e.field, e.message) for e in out}
    for err in more:
        if (err.field, err.message) not in seen:
            seen.add((err.field, err.message))
            out.append(err)
    return out


# ------------------------------------------------------------------------------------ the preview
def _yaml_value(value: Any) -> str:
    """A value as one line of YAML: flow style, or JSON (which YAML reads too) when that would wrap."""
    import json

    import yaml

    text = yaml.safe_dump(value, default_flow_style=True, width=1_000_000)
    if text.endswith("\n...\n"):  # a plain scalar's document end
        text = text[:-4]
    text = text.rstrip("\n")
    return text if "\n" not in text else json.dumps(value)


def yaml_lines(config: Mapping[str, Any], marks: Mapping[str, str] | None = None,
               before: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The config as YAML, one entry per line: {text, key, mark, before}. `marks` (key -> why it differs
    from the reference) and `before` (key -> the reference's value) come from `preview`. Joined with
    newlines the texts are a YAML document that loads back to `config`."""
    marks, before = marks or {}, before or {}
    out: list[dict[str, Any]] = []

    def walk(node: Mapping[str, Any], prefix: str, depth: int) -> None:
        pad = "  " * depth
        for name, value in node.items():
            key = f"{prefix}{name}"
            if isinstance(value, Mapping) and key in _SECTIONS:
                out.append({"text": f"{pad}{name}:", "key": key, "mark": ""})
                walk(value, key + ".", depth + 1)
                continue
            line: dict[str, Any] = {"text": f"{pad}{name}: {_yaml_value(value)}", "key": key,
                                    "mark": marks.get(key, "")}
            if key in marks:
                line["before"] = before.get(key)
            out.append(line)

    walk(config, "", 0)
    return out


def _marks(checked: Checked) -> tuple[dict[str, str], dict[str, Any]]:
    """Each key whose effective value differs from the reference, and why: adapted, platform, yours."""
    now, ref = flatten(checked.config or {}), flatten(checked.reference or {})
    adapted = {c.key: c.after for c in checked.adaptations}
    marks, before = {}, {}
    for key, value in now.items():
        if key in ref and ref[key] == value:
            continue
        if key in adapted and adapted[key] == value:
            marks[key] = "adapted"
        elif key in PLATFORM_KEYS:
            marks[key] = "platform"
        else:
            marks[key] = "yours"
        before[key] = ref.get(key)
    return marks, before


def adapted_summary(checked: Checked) -> list[dict[str, Any]]:
    """What was fitted to the resources: the preset's adapted keys, then the platform's resource keys
    that differ from where the config started (device, nodes, GPUs per node, launcher)."""
    out = [c.as_dict() for c in checked.adaptations]
    now, ref = flatten(checked.config or {}), flatten(checked.reference or {})
    for key in RESOURCE_KEYS:
        if key in now and key in ref and now[key] != ref[key]:
            out.append({"key": key, "before": ref[key], "after": now[key],
                        "reason": f"set by the platform for {checked.resources}"})
    return out


def memory(*, model, config: Mapping[str, Any] | None, gpus: int, val_dataset=None) -> dict[str, Any] | None:
    """The memory estimate as a dict (None without a model; {"error": ...} when it cannot be made), with
    one validation batch of `val_dataset` (its catalog row count) when the run has one.

    With LoRA (actor_rollout_ref.model.lora_rank > 0) it also has `full_fine_tuning`: the same config's
    estimate with LoRA off ({lora_rank, peak_gib, peak_phase, saving_gib}: the saving at the peak).
    `checkpoint` is one checkpoint's disk (`checkpoint_estimate.py`: gib, actor_gib, critic_gib,
    export_gib, lora) with the operator's per-run budget (`budget_gib`, None: none) and `fits`."""
    if model is None or not config:
        return None
    from .memory_estimate import GIB, ModelConfigUnreadable, estimate_for
    from .shapes import ShapeUnknown

    try:
        val_rows = getattr(val_dataset, "num_rows", None)
        est = estimate_for(model=model, cfg=config, gpus=gpus, val_rows=val_rows)
    except (ModelConfigUnreadable, ShapeUnknown) as exc:
        return {"error": f"no estimate: {exc}"}
    out = est.as_dict()
    disk = launch.checkpoint_size(model, config)
    if disk is not None:
        budget = launch.disk_budget_gb()
        out["checkpoint"] = {**disk.as_dict(), "budget_gib": budget,
                             "fits": budget is None or disk.bytes <= budget * GIB}
    arr = config.get("actor_rollout_ref")
    model_cfg = arr.get("model") if isinstance(arr, Mapping) else None
    rank = model_cfg.get("lora_rank") if isinstance(model_cfg, Mapping) else None
    if isinstance(rank, int) and rank > 0:
        full_cfg = {**config, "actor_rollout_ref": {**arr, "model": {**model_cfg, "lora_rank": 0}}}
        full = estimate_for(model=model, cfg=full_cfg, gpus=gpus, val_rows=val_rows)
        out["full_fine_tuning"] = {"lora_rank": rank, "peak_gib": round(full.peak_bytes / GIB, 3),
                                   "peak_phase": full.peak_phase,
                                   "saving_gib": round((full.peak_bytes - est.peak_bytes) / GIB, 3)}
    return out


def warnings(config: Mapping[str, Any] | None) -> list[dict[str, str]]:
    """The trainer's config warnings (`trainer.config.config_warnings`: what runs but probably is not
    meant, e.g. GRPO with rollout.n=1 has no baseline) as [{field, message}]. They never refuse a run;
    the form shows them beside the preview and after launch, the API's create answer lists them."""
    if not config:
        return []
    try:
        cfg = Config.from_dict(config)
    except ConfigError:
        return []  # not a config yet: its errors are reported instead
    return [w.as_dict() for w in config_warnings(cfg)]


def preview(**inputs: Any) -> dict[str, Any]:
    """What the new-run form shows beside the fields: errors, adaptations, the YAML, the memory table.

    `inputs` are `check_all`'s (the model and GPUs also make the memory estimate)."""
    checked = check_all(**inputs)
    marks, before = _marks(checked) if checked.config else ({}, {})
    lines = yaml_lines(checked.config, marks, before) if checked.config else []
    return {
        "errors": [{**e.as_dict(), "source": e.source} for e in checked.errors],
        "warnings": warnings(checked.config),
        "resources": checked.resources,
        "adapted": adapted_summary(checked) if checked.config else [],
        "reference": checked.reference_label,
        "lines": lines,
        "yaml": "\n".join(line["text"] for line in lines) + ("\n" if lines else ""),
        "changed": len(marks),
        "memory": memory(model=inputs.get("model"), config=checked.config, gpus=int(inputs.get("gpus") or 0),
                         val_dataset=inputs.get("val_dataset")),
    }
