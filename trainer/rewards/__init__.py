"""Reward functions: a registry, verl's default dispatch by data_source, and custom functions.

Every reward function has verl's signature
    compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> float | dict
(a dict carries "score" plus extra fields that are logged). `get_reward_fn(cfg)` returns the one a run
uses: `custom_reward_function.path` (a Python file named by the OPERATOR's config, never by uploaded
data) and `.name` when a path is set, else the registry entry `reward.name` ("default" = dispatch by
data_source), with `reward.reward_kwargs` bound as keyword arguments and `reward.format_score` passed
to the built-in scorers. On the platform a user never names a file: `custom_reward_function.path` is
written by the platform from the operator's registry of checked reward functions (`check.py` is the
check it runs, `python -m trainer.rewards.check`).
"""
from __future__ import annotations

import functools
import importlib.util
import inspect
import keyword
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

# By module path, not `from trainer.rewards import arith`: the function `arith` below replaces the
# package's attribute of that name, so a second import of this file (a registered reward module that
# is this package) would otherwise get the function instead of the submodule.
from trainer.rewards.arith import compute_score as _arith_score
from trainer.rewards.gsm8k import compute_score as _gsm8k_score
from trainer.rewards.math_answer import compute_score as _math_score
from trainer.rewards.text_answer import exact_match_score as _exact_match_score
from trainer.rewards.text_answer import multiple_choice_score as _multiple_choice_score

RewardFn = Callable[..., "float | dict[str, Any]"]
_REGISTRY: dict[str, RewardFn] = {}

GSM8K_SOURCES = ("openai/gsm8k", "gsm8k")
ARITH_SOURCES = ("arith", "demo_tool_arith")
# verl's names for MATH-style data (its default_compute_score routes them to its math scorers), and
# "math": datasets whose answers are \boxed{...} (or DAPO's "Answer:" line).
MATH_SOURCES = ("lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500",
                "math", "math_dapo", "math_dapo_reasoning", "numina_aops_forum", "numina_synthetic_math",
                "numina_amc_aime", "numina_synthetic_amc", "numina_cn_k12", "numina_olympiads")
MATH_SOURCE_PREFIXES = ("aime",)  # aime2024, aime2025, ... (as verl)
EXACT_MATCH_SOURCES = ("exact_match", "qa")
MULTIPLE_CHOICE_SOURCES = ("multiple_choice", "mcq", "cais/mmlu", "TIGER-Lab/MMLU-Pro",
                           "allenai/ai2_arc", "Idavidrein/gpqa", "allenai/openbookqa")


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
    return _gsm8k_score(solution_str, ground_truth, method="strict", format_score=format_score)


@register_reward("gsm8k_flexible")
def gsm8k_flexible(data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None,
                   format_score: float = 0.0, **_: Any) -> float:
    return _gsm8k_score(solution_str, ground_truth, method="flexible", format_score=format_score)


@register_reward("arith")
def arith(data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None,
          format_score: float = 0.0, **_: Any) -> float:
    return _arith_score(solution_str, ground_truth, format_score=format_score)


@register_reward("math_boxed")
def math_boxed(data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None,
               format_score: float = 0.0, **_: Any) -> float:
    """The last \\boxed{} answer against the ground truth, normalised (trainer.rewards.math_answer)."""
    return _math_score(solution_str, ground_truth, format_score=format_score)


@register_reward("exact_match")
def exact_match(data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None,
                format_score: float = 0.0, **_: Any) -> float:
    """The final answer equals the ground truth, normalised (trainer.rewards.text_answer)."""
    return _exact_match_score(solution_str, ground_truth, format_score=format_score)


@register_reward("multiple_choice")
def multiple_choice(data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None,
                    format_score: float = 0.0, **_: Any) -> float:
    """The option letter A-J chosen equals the ground truth's (trainer.rewards.text_answer)."""
    return _multiple_choice_score(solution_str, ground_truth, format_score=format_score)


def default_reward_name(data_source: str) -> str | None:
    """The built-in reward `default` uses for `data_source` (verl's routing), None when it has none."""
    if data_source in GSM8K_SOURCES:
        return "gsm8k"
    if data_source in ARITH_SOURCES:
        return "arith"
    if data_source in MATH_SOURCES or (isinstance(data_source, str)
                                       and data_source.startswith(MATH_SOURCE_PREFIXES)):
        return "math_boxed"
    if data_source in EXACT_MATCH_SOURCES:
        return "exact_match"
    if data_source in MULTIPLE_CHOICE_SOURCES:
        return "multiple_choice"
    return None


def default_sources() -> dict[str, list[str]]:
    """The data_source values `default` routes, by the reward each goes to ("aime*": any name so starting)."""
    return {"gsm8k": list(GSM8K_SOURCES), "arith": list(ARITH_SOURCES),
            "math_boxed": list(MATH_SOURCES) + [p + "*" for p in MATH_SOURCE_PREFIXES],
            "exact_match": list(EXACT_MATCH_SOURCES), "multiple_choice": list(MULTIPLE_CHOICE_SOURCES)}


@register_reward("default")
def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None,
                  **kwargs: Any) -> "float | dict[str, Any]":
    """verl's default_compute_score: pick the scorer by data_source (`default_reward_name`)."""
    name = default_reward_name(data_source)
    if name is None:
        routed = sorted(s for sources in default_sources().values() for s in sources)
        raise NotImplementedError(
            f"no default reward for data_source {data_source!r}: set reward.name to one of "
            f"{[n for n in registered_rewards() if n != 'default']}, or give the rows a data_source "
            f"the default routes ({', '.join(routed)})")
    return _REGISTRY[name](data_source, solution_str, ground_truth, extra_info, **kwargs)


_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def module_file(module: str) -> str:
    """The Python source file of the importable module `module` (a dotted path such as
    "trainer.rewards.gsm8k"), to be loaded as a custom reward file. Imports its parent packages
    (that is how Python finds a submodule), never the module itself."""
    if not isinstance(module, str) or not _DOTTED.fullmatch(module) or any(
            keyword.iskeyword(part) for part in module.split(".")):
        raise ValueError(f"{module!r} is not a dotted module path (like package.module)")
    spec = importlib.util.find_spec(module)
    if spec is None:
        raise ModuleNotFoundError(f"no module named {module!r}")
    if not spec.has_location or not spec.origin or not spec.origin.endswith(".py"):
        raise ImportError(f"module {module!r} is not a Python source file (origin {spec.origin!r})")
    return str(Path(spec.origin).resolve())


def load_custom_module(path: str | Path) -> ModuleType:
    """Import the Python file `path` (operator-configured) as a module of its own name.

    Runs the file's top-level code: SyntaxError, ImportError and whatever that code raises pass
    through. Absolute imports work; relative ones do not (the file is loaded outside its package)."""
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
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


def custom_function(module: ModuleType, name: str = "compute_score") -> RewardFn:
    """The callable `name` of a module loaded by `load_custom_module`; clear errors when missing."""
    fn = getattr(module, name, None)
    if fn is None:
        raise AttributeError(f"custom_reward_function.name: {module.__file__!r} defines no {name!r}")
    if not callable(fn):
        raise TypeError(f"custom_reward_function.name: {name!r} in {module.__file__!r} is not callable")
    return fn


def load_custom_function(path: str | Path, name: str = "compute_score") -> RewardFn:
    """Import `name` from the Python file `path` (operator-configured). Clear errors when missing."""
    return custom_function(load_custom_module(path), name)


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
