"""What an operator may type when registering: names, reward files (under a reward root, no symlink
escape, no `..`), module paths, function names, sample rows, tool-config text. Each check returns the
clean value or raises `RegistryRefused` naming the field. No database here."""
from __future__ import annotations

import json
import keyword
import math
import re
from pathlib import Path
from typing import Any

from django.conf import settings

from .models import NAME_PATTERN

MAX_SAMPLE_ROWS = 20
MAX_SAMPLE_ROWS_BYTES = 256 << 10
MAX_TOOL_CONFIG_BYTES = 64 << 10
_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_NAME = re.compile(NAME_PATTERN)

# The rows a reward function is checked on when the operator gives none: a GSM8K-style row (right and
# wrong answer) and an arithmetic-demo row, as the trainer would pass them.
DEFAULT_SAMPLE_ROWS: list[dict[str, Any]] = [
    {"data_source": "openai/gsm8k", "ground_truth": "72",
     "solution_str": "Natalia sold 48 / 2 = 24 clips in May.\nAltogether she sold 48 + 24 = 72 clips.\n#### 72",
     "extra_info": {"split": "train", "index": 0}},
    {"data_source": "openai/gsm8k", "ground_truth": "72",
     "solution_str": "Natalia sold 48 clips in May and 24 in April.\n#### 70",
     "extra_info": {"split": "train", "index": 0}},
    {"data_source": "arith", "ground_truth": "1776",
     "solution_str": '<tool_call>{"name": "calculator", "arguments": {"expression": "37 * 48"}}</tool_call>\n'
                     "#### 1776",
     "extra_info": {"split": "train", "index": 0, "tools": ["calculator"]}},
]


class RegistryRefused(Exception):
    """A registry write or lookup refused; `field` names what is wrong (the API answers 400 with it,
    the runs app re-raises it as its own config error)."""

    def __init__(self, message: str, field: str = "name", *, code: str = "refused"):
        super().__init__(message)
        self.message, self.field, self.code = message, field, code


class RegistryNotPermitted(Exception):
    """Only staff register or delete registry entries (the API answers 403)."""


def clean_name(name: Any) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise RegistryRefused(f"{name!r:.80} is not a valid name: 1-64 letters, digits, '_' or '-', starting "
                              "with a letter or digit", "name", code="invalid")
    return name


def clean_function(function: Any) -> str:
    if not function:
        return "compute_score"
    if not isinstance(function, str) or not function.isidentifier() or keyword.iskeyword(function):
        raise RegistryRefused(f"{function!r:.80} is not a Python function name", "function", code="invalid")
    return function


def clean_module(module: Any) -> str:
    if not isinstance(module, str) or len(module) > 200 or not _DOTTED.fullmatch(module) or any(
            keyword.iskeyword(part) for part in module.split(".")):
        raise RegistryRefused(f"{module!r:.80} is not a dotted module path (like package.rewards)", "module",
                              code="invalid")
    return module


def reward_roots() -> list[Path]:
    """The folders reward files may live in (RLSTUDIO_REWARD_ROOTS), resolved."""
    return [Path(root).expanduser().resolve() for root in settings.RLSTUDIO_REWARD_ROOTS]


def inside_roots(path: Path) -> bool:
    return any(path == root or path.is_relative_to(root) for root in reward_roots())


def clean_reward_file(raw: Any) -> Path:
    """The real path of a reward file: absolute, `.py`, no `..`, an existing regular file whose resolved
    path (every symlink followed) lies inside a reward root."""
    roots = ", ".join(map(str, reward_roots()))
    if not isinstance(raw, str) or not raw or "\x00" in raw or len(raw) > 1024:
        raise RegistryRefused("give the absolute path of a Python file", "path", code="invalid")
    given = Path(raw)
    if not given.is_absolute():
        raise RegistryRefused(f"{raw!r} is not an absolute path", "path", code="invalid")
    if ".." in given.parts:
        raise RegistryRefused(f"{raw!r} contains '..': give the file's own path", "path", code="invalid")
    if given.suffix != ".py":
        raise RegistryRefused(f"{raw!r} is not a Python file (.py)", "path", code="invalid")
    try:
        real = given.resolve(strict=True)
    except (OSError, RuntimeError):  # missing, a symlink loop, a folder we may not read
        raise RegistryRefused(f"no such file: {raw!r}", "path", code="not_found") from None
    if not inside_roots(real):
        how = " (through a symlink)" if real != given else ""
        raise RegistryRefused(f"{raw!r} resolves to {str(real)!r}, outside the reward roots{how}: reward files "
                              f"must lie inside {roots} (RLSTUDIO_REWARD_ROOTS)", "path", code="outside_root")
    if not real.is_file() or real.suffix != ".py":
        raise RegistryRefused(f"{raw!r} is not a regular Python file", "path", code="invalid")
    return real


def _finite_json(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _finite_json(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_finite_json(v) for v in value)
    return value is None or isinstance(value, (str, int, bool))


def clean_sample_rows(rows: Any) -> list[dict[str, Any]]:
    """The operator's sample rows (the defaults when none): each {data_source, solution_str,
    ground_truth, extra_info?, expected?}; `expected` (a number) makes the check compare the score."""
    if rows in (None, "", []):
        return [dict(row) for row in DEFAULT_SAMPLE_ROWS]
    if not isinstance(rows, list) or len(rows) > MAX_SAMPLE_ROWS:
        raise RegistryRefused(f"sample_rows must be a list of at most {MAX_SAMPLE_ROWS} rows", "sample_rows",
                              code="invalid")
    if not _finite_json(rows) or len(json.dumps(rows)) > MAX_SAMPLE_ROWS_BYTES:
        raise RegistryRefused(f"sample_rows must be plain JSON (finite numbers), at most {MAX_SAMPLE_ROWS_BYTES} "
                              "bytes", "sample_rows", code="invalid")
    clean = []
    for i, row in enumerate(rows):
        where = f"sample_rows[{i}]"
        if not isinstance(row, dict):
            raise RegistryRefused(f"{where} must be an object", "sample_rows", code="invalid")
        unknown = sorted(set(row) - {"data_source", "solution_str", "ground_truth", "extra_info", "expected"})
        if unknown:
            raise RegistryRefused(f"{where} has unknown key(s) {', '.join(unknown)}", "sample_rows", code="invalid")
        if not isinstance(row.get("solution_str"), str) or not isinstance(row.get("data_source", ""), str):
            raise RegistryRefused(f"{where} needs solution_str (and data_source) as strings", "sample_rows",
                                  code="invalid")
        if not isinstance(row.get("extra_info", {}), dict):
            raise RegistryRefused(f"{where}.extra_info must be an object", "sample_rows", code="invalid")
        expected = row.get("expected")
        if expected is not None and (isinstance(expected, bool) or not isinstance(expected, (int, float))):
            raise RegistryRefused(f"{where}.expected must be a number", "sample_rows", code="invalid")
        clean.append({"data_source": row.get("data_source", ""), "solution_str": row["solution_str"],
                      "ground_truth": row.get("ground_truth"), "extra_info": row.get("extra_info", {}),
                      **({"expected": float(expected)} if expected is not None else {})})
    return clean


def clean_tool_config(text: Any) -> str:
    """The tool-config YAML text (size and characters only; the trainer's loader checks the rest)."""
    if not isinstance(text, str) or not text.strip():
        raise RegistryRefused("give the tool_config YAML (tools: [{class_name, config, tool_schema}])",
                              "config_yaml", code="invalid")
    if "\x00" in text or len(text.encode("utf-8")) > MAX_TOOL_CONFIG_BYTES:
        raise RegistryRefused(f"the tool_config must be text of at most {MAX_TOOL_CONFIG_BYTES} bytes",
                              "config_yaml", code="invalid")
    return text
