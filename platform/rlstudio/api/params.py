"""Query-string parameters read alike by every API view: a bad value is a 400 naming the parameter,
never a silent default."""
from __future__ import annotations

from .errors import ApiError

TRUE_WORDS, FALSE_WORDS = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def bool_param(params, name: str) -> bool | None:
    """A yes/no query parameter: True for 1 / true / yes / on, False for 0 / false / no / off (any
    case), None when absent or empty; anything else is an ApiError naming it."""
    raw = params.get(name)
    if raw is None or not raw.strip():
        return None
    word = raw.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ApiError(f"{name} must be one of {', '.join(TRUE_WORDS + FALSE_WORDS)}, got {raw!r}"[:300], field=name)
