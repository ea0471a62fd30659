"""Reward functions: a registry, verl's default dispatch by data_source, and custom functions.

Every reward function has verl's signature
    compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> float | dict
(a dict carries "score" plus extra fields that are logged). `get_reward_fn(cfg)` returns the one a run
uses: `custom_reward_function.path` (a Python file named by the OPERATOR's config, never by uploaded
data) and `.name` when a path is set, else the registry entry `reward.name` ("default" = dispatch by
data_source), with `reward.reward_kwargs` bound as keyword arguments and `reward.format_score` passed
to the built-in scorers.
"""
from __future__ import annotations

import functools
import importlib.util
import inspect
import sys
from pathlib import Path
from typing import Any, Callable

from trainer.rewards import arith as _arith
from trainer.rewards import gsm8k as _gsm8k

RewardFn = Callable[..., "float | dict[str, Any]"]
_REGISTRY: dict[str, RewardFn] = {}

GSM8K_SOURCES = ("openai/gsm8k", "gsm8k")
ARITH_SOURCES = ("arith", "demo_tool_arith")


def register_reward(name: str) -> Callable[[RewardFn], RewardFn]:
    def deco(fn: RewardFn) -> RewardFn:
        if name in _REGISTRY and _REGISTRY[name] is not fn:
            raise ValueError(f"reward {name!r} is already registered")
        _REGISTRY[name] = fn
        return fn

    return deco


def registered_rewards() -> list[str]:
    return sorted(_REGISTRY)


@register_reward("gsm8k")
def gsm8k_strict(data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None,
                 format_score: float = 0.0, **_: Any) -> float:
    return _gsm8k.compute_score(solution_str, ground_truth, method="strict", format_score=format_score)


@register_reward("gsm8k_flexible")
def gsm8k_flexible(data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None,
                   format_score: float = 0.0, **_: Any) -> float:
    return _gsm8k.compute_score(solution_str, ground_truth, method="flexible", format_score=format_score)


@register_reward("arith")
def arith(data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None,
          format_score: float = 0.0, **_: Any) -> float:
    return _arith.compute_score(solution_str, ground_truth, format_score=format_score)


@register_reward("default")
def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None,
                  **kwargs: Any) -> "float | dict[str, Any]":
    """verl's default_compute_score: pick the scorer by data_source."""
    if data_source in GSM8K_SOURCES:
        return gsm8k_strict(data_source, solution_str, ground_truth, extra_info, **kwargs)
    if data_source in ARITH_SOURCES:
        return arith(data_source, solution_str, ground_truth, extra_info, **kwargs)
    raise NotImplementedError(
        f"no default reward for data_source {data_source!r}; known: {list(GSM8K_SOURCES + ARITH_SOURCES)}"
        " (set reward.name or custom_reward_function.path)")


def load_custom_function(path: str | Path, name: str = "compute_score") -> RewardFn:
    """Import `name` from the Python file `path` (operator-configured). Clear errors when missing."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise FileNotFoundError(f"custom_reward_function.path: no such file {str(file)!r}")
    module_name = f"rlstudio_custom_reward_{abs(hash(str(file.resolve())))}"
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise ImportError(f"custom_reward_function.path: cannot import {str(file)!r}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception:
        sys.modules.pop(module_name, None)
        raise
    fn = getattr(module, name, None)
    if fn is None:
        raise AttributeError(f"custom_reward_function.name: {str(file)!r} defines no {name!r}")
    if not callable(fn):
        raise TypeError(f"custom_reward_function.name: {name!r} in {str(file)!r} is not callable")
    return fn


def _section(cfg: Any, key: str) -> Any:
    return cfg.get(key) if isinstance(cfg, dict) else getattr(cfg, key, None)


def _get(section: Any, key: str, default: Any = None) -> Any:
    if section is None:
        return default
    value = section.get(key, default) if isinstance(section, dict) else getattr(section, key, default)
    return default if value is None else value


def _accepts(fn: Callable[..., Any], kwarg: str) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.kind is p.VAR_KEYWORD or p.name == kwarg for p in params)


def get_reward_fn(cfg: Any) -> RewardFn:
    """The reward function of a run config (a Config, or a dict of the same shape)."""
    custom = _section(cfg, "custom_reward_function")
    reward = _section(cfg, "reward")
    kwargs = dict(_get(reward, "reward_kwargs", {}) or {})
    path = _get(custom, "path")
    if path:
        fn = load_custom_function(path, _get(custom, "name", "compute_score"))
    else:
        name = _get(reward, "name", "default")
        if name not in _REGISTRY:
            raise KeyError(f"reward.name {name!r} is not registered; known: {registered_rewards()}")
        fn = _REGISTRY[name]
        format_score = _get(reward, "format_score", 0.0)
        if format_score and _accepts(fn, "format_score"):
            kwargs.setdefault("format_score", float(format_score))
    return functools.partial(fn, **kwargs) if kwargs else fn
