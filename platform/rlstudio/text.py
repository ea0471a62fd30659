"""Model text on its way into PostgreSQL: its text and JSON columns refuse the NUL character (U+0000),
which a model can generate like any other, so every NUL becomes U+FFFD (the replacement character)."""
from __future__ import annotations

from typing import Any


def without_nul(value: Any) -> Any:
    """`value` with every NUL character in its strings (keys included, through lists and dicts) replaced
    by U+FFFD; anything else as it is."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, list):
        return [without_nul(v) for v in value]
    if isinstance(value, dict):
        return {without_nul(k): without_nul(v) for k, v in value.items()}
    return value
