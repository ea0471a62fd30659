"""The API's JSON parser: DRF's, with a body nested too deeply for Python's JSON reader (its recursion
limit, about a thousand levels: `[[[[...`) refused as a 400 `parse_error` like any other body that is
not JSON, where DRF's own lets the RecursionError through as a 500."""
from __future__ import annotations

from rest_framework import parsers
from rest_framework.exceptions import ParseError


class JSONParser(parsers.JSONParser):
    """rest_framework.parsers.JSONParser whose RecursionError (too deep a body) is a ParseError too."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:  # DRF's parse maps ValueError only
            raise ParseError("JSON parse error - the body is nested too deeply") from None
