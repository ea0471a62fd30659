"""Named presets: each ``trainer/recipes/<name>.py`` has ``DESCRIPTION`` and ``recipe() -> Config``.

    python -m trainer recipes                 list the recipes with their descriptions
    python -m trainer recipes --show NAME     print a recipe's config as JSON
    python -m trainer recipes --describe      print every config key with its type, default and help

``REGISTRY`` maps a name to a ``Recipe``; ``get_recipe(name)`` returns that recipe's Config (a fresh
one on every call). Recipes leave the data and model paths empty where they depend on the machine:
supply them as overrides (``data.train_files=... actor_rollout_ref.model.path=...``); ``validate``
demands them at run time. Standard library only (the web side lists recipes without torch).
"""

from __future__ import annotations

import importlib
import json
import sys
from dataclasses import dataclass
from typing import Callable

from trainer.config import Config, describe_config

_MODULES = ("cpu_smoke", "dapo", "demo_tool_arith", "gsm8k_multiturn_grpo")


@dataclass(frozen=True)
class Recipe:
    name: str
    description: str
    build: Callable[[], Config]


def _load() -> dict[str, Recipe]:
    out: dict[str, Recipe] = {}
    for name in _MODULES:
        module = importlib.import_module(f"trainer.recipes.{name}")
        out[name] = Recipe(name=name, description=module.DESCRIPTION, build=module.recipe)
    return out


REGISTRY: dict[str, Recipe] = _load()


def get_recipe(name: str) -> Config:
    """The Config of recipe ``name``; KeyError listing the known names otherwise."""
    if name not in REGISTRY:
        raise KeyError(f"unknown recipe {name!r}; known recipes: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[name].build()


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        width = max(len(n) for n in REGISTRY)
        for recipe in REGISTRY.values():
            print(f"{recipe.name:<{width}}  {recipe.description}")
        return 0
    if argv[0] == "--show" and len(argv) == 2:
        try:
            cfg = get_recipe(argv[1])
        except KeyError as exc:
            print(exc.args[0], file=sys.stderr)
            return 2
        print(json.dumps(cfg.to_dict(), indent=2))
        return 0
    if argv == ["--describe"]:
        for key, tp, default, help_ in describe_config():
            print(f"{key} ({tp}) = {json.dumps(default)}\n    {help_}")
        return 0
    print("usage: python -m trainer recipes [--show NAME | --describe]", file=sys.stderr)
    return 2
