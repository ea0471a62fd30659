"""The API's JSON parser: DRF's, with two kinds of body that DRF's own lets through as a 500 refused as
a 400 `parse_error`:

- a body nested too deeply for Python's JSON reader (its recursion limit, about a thousand levels:
  `[[[[...`), like any other body that is not JSON;
- a body holding a lone UTF-16 surrogate (`"\\ud800"`: JSON may spell half of a pair, and Python
  reads it into a str that no UTF-8 encoder takes, so PostgreSQL's json columns refused it and an
  error echoing it could not be rendered), with `field` naming where it is (`rlstudio.text.surrogate_path`).
"""
from __future__ import annotations

from rest_framework import parsers
from rest_framework.exceptions import ParseError

from rlstudio.text import surrogate_path


class JSONParser(parsers.JSONParser):
    """rest_framework.parsers.JSONParser whose RecursionError (too deep a body) is a ParseError too, and
    whose bodies holding a lone surrogate are an ApiError (`parse_error`) naming the field."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:  # DRF's parse maps ValueError only
            raise ParseError("JSON parse error - the body is nested too deeply") from None
        where = surrogate_path(data, "")
        if where is not None:
            from .errors import ApiError  # not at import: DRF's settings load this module while errors' loads


            field = where.lstrip(".") or None
            raise ApiError(f"{field or 'the body'}: holds a lone surrogate (a UTF-16 \\ud800-\\udfff escape "
                           "without its pair), which is not text: send the character itself",
                           code="parse_error", field=field)
        return data
