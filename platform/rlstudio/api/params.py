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


# Taken by every list the rule below applies to: the pager's two, and DRF's response format override.
LIST_PARAMS = ("limit", "offset")
ALWAYS_KNOWN = ("format",)


def refuse_unknown_params(params, known) -> None:
    """An ApiError (400, code `unknown_parameter`) naming the first query parameter of `params` that is
    not in `known` (a filtered list's filters; the pager's `limit` and `offset` are added), with the
    ones it takes: a misspelt filter (`?state=running` for `?status=`) would otherwise be ignored and
    the whole list answered."""
    names = sorted({*known, *LIST_PARAMS})
    for name in params.keys():
        if name not in names and name not in ALWAYS_KNOWN:
            shown = name.replace("\x00", "")[:100]
            raise ApiError(f"unknown query parameter {shown!r}; this list takes: {', '.join(names)}",
                           code="unknown_parameter", field=shown)
