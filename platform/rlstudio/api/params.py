"""Query-string parameters read alike by every API view: a bad value is a 400 naming the parameter,
never a silent default (int_param, bool_param; a list's limit and offset: pager_params here, and
CountResultsPagination, read them alike); and a list's parameters, declared once for its schema and
for the check that refuses any other (ListParamsMixin for a viewset's `list`, list_params for any
other list's GET)."""
from __future__ import annotations

import functools
import re
from collections.abc import Sequence

from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view

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


_INTEGER = re.compile(r"[+-]?[0-9]{1,30}")  # ASCII digits only: no "1_000", " 5", "٥" or "1e3"


def int_param(params, name: str, *, default: int | None = None, minimum: int | None = None,
              maximum: int | None = None) -> int | None:
    """An integer query parameter: `default` when absent or empty; an ApiError (400, code `invalid`,
    field `name`) for anything else that is not an integer from `minimum` to `maximum` (either bound
    optional), saying the range and what it got ("limit must be an integer from 1 to 500, got 'x'")."""
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    value = int(raw) if _INTEGER.fullmatch(raw) else None
    if value is None or (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        if minimum is not None and maximum is not None:
            bounds = f" from {minimum} to {maximum}"
        elif minimum is not None:
            bounds = f" >= {minimum}"
        elif maximum is not None:
            bounds = f" <= {maximum}"
        else:
            bounds = ""
        raise ApiError(f"{name} must be an integer{bounds}, got {raw[:40]!r}", field=name)
    return value


# Taken by every list: the pager's two where it is paged, and DRF's response format override.
LIST_PARAMS = ("limit", "offset")
ALWAYS_KNOWN = ("format",)
# The pager's bounds, for every list paged by limit and offset (CountResultsPagination, and the lists
# paged by hand with `pager_params`); a run's metrics page has its own (telemetry.selectors).
DEFAULT_LIMIT = 50
MAX_LIMIT = 500
LIMIT_DESCRIPTION = (f"At most this many, 1 to {MAX_LIMIT} (default {DEFAULT_LIMIT}); another value is a 400 "
                     "naming limit.")
OFFSET_DESCRIPTION = "Skip this many first, 0 or more (default 0); another value is a 400 naming offset."
LIMIT_SCHEMA = {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT}
OFFSET_SCHEMA = {"type": "integer", "minimum": 0, "default": 0}
# The pager's two in the schema of a list paged by hand (an APIView's, an @action's: the pagination class
# declares them for a viewset's own `list`).
PAGER_PARAMETERS = (
    OpenApiParameter("limit", LIMIT_SCHEMA, required=False, description=LIMIT_DESCRIPTION),
    OpenApiParameter("offset", OFFSET_SCHEMA, required=False, description=OFFSET_DESCRIPTION),
)


def pager_params(params) -> tuple[int, int]:
    """(offset, limit) of a list paged by hand, read as CountResultsPagination reads them: `offset` an
    integer >= 0 (default 0), `limit` one from 1 to MAX_LIMIT (default DEFAULT_LIMIT); anything else is
    a 400 naming it."""
    offset = int_param(params, "offset", default=0, minimum=0)
    limit = int_param(params, "limit", default=DEFAULT_LIMIT, minimum=1, maximum=MAX_LIMIT)
    return offset, limit


def _names(known) -> list[str]:
    return [getattr(p, "name", p) for p in known]


def refuse_unknown_params(params, known, *, paged: bool = True) -> None:
    """An ApiError (400, code `unknown_parameter`) naming the first query parameter of `params` that is
    not in `known` (a list's filters: names or the OpenApiParameters its schema declares; the pager's
    `limit` and `offset` are added when `paged`; `format` is always taken), with the ones it takes: a
    misspelt filter (`?state=running` for `?status=`) would otherwise be ignored and the whole list
    answered."""
    names = sorted({*_names(known), *(LIST_PARAMS if paged else ())})
    takes = f"this list takes: {', '.join(names)}" if names else "this list takes none"
    for name in params.keys():
        if name not in names and name not in ALWAYS_KNOWN:
            shown = name.replace("\x00", "")[:100]
            raise ApiError(f"unknown query parameter {shown!r}; {takes}", code="unknown_parameter", field=shown)


def list_params(*parameters: OpenApiParameter, paged: bool, **schema):
    """Decorator of the GET method of a list other than a viewset's `list` (an APIView's `get`; a viewset's
    @action, put above `@action`): the query parameters it takes, declared once for its OpenAPI schema
    (with PAGER_PARAMETERS when `paged`) and for the check that refuses any other
    (`refuse_unknown_params`) before the method runs. `schema` goes to extend_schema (responses, ...)."""
    declared = [*parameters, *(PAGER_PARAMETERS if paged else ())]

    def decorate(method):
        @functools.wraps(method)
        def checked(self, request, *args, **kwargs):
            refuse_unknown_params(request.query_params, parameters, paged=paged)
            return method(self, request, *args, **kwargs)

        return extend_schema(parameters=declared, **schema)(checked)

    return decorate


class ListParamsMixin:
    """A viewset (before its ListModelMixin) whose `list` takes exactly `list_parameters` (OpenApiParameters),
    `format`, and `limit` and `offset` when it is paged (a pagination class: it declares those two in the
    schema): anything else is refused (`refuse_unknown_params`). A subclass that sets `list_parameters`
    gets them as its list's schema parameters too, so the schema and the check read one list."""

    list_parameters: Sequence[OpenApiParameter] = ()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("list_parameters"):
            extend_schema_view(list=extend_schema(parameters=list(cls.list_parameters)))(cls)

    def list(self, request, *args, **kwargs):
        refuse_unknown_params(request.query_params, self.list_parameters, paged=self.paginator is not None)
        return super().list(request, *args, **kwargs)
