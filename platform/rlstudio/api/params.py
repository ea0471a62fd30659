"""Query-string parameters read alike by every API view: a bad value is a 400 naming the parameter,
never a silent default."""
from __future__ import annotations

from rlstudio.text import NO_WORDS, YES_WORDS, yes_no

from .errors import ApiError


def bool_param(params, name: str) -> bool | None:
    """A yes/no query parameter: True for 1 / true / yes / on, False for 0 / false / no / off (any
    case), None when absent or empty; anything else is an ApiError naming it."""
    raw = params.get(name)
    if raw is None or not raw.strip():
        return None
    answer = yes_no(raw)
    if answer is None:
        raise ApiError(f"{name} must be one of {', '.join(YES_WORDS + NO_WORDS)}, got {raw!r}"[:300], field=name)
    return answer
