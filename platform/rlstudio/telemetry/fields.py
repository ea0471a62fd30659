"""`CompressedJSONField`: a JSON value stored as zlib-compressed UTF-8 JSON in a `bytea` column.

Why not `JSONField` (jsonb): a sample's token view is six lists of one number or string per token,
read back only whole (the token view page, the sample API) and never queried inside. PostgreSQL
parses every number of a jsonb value into a `numeric`: for 500 samples with 256-token views that was
0.8 s of a 1.5 s INSERT (bench/live.py, the "samples" workload), while the same bytes as `bytea` take
~10 ms. Compressing here (zlib level 1, ~50 us per view) also keeps the rows small.

Values written before this field (plain JSON bytes, converted from jsonb by migration 0003) are read
too: a zlib stream starts with 0x78, JSON text never does.
"""
from __future__ import annotations

import json
import zlib
from typing import Any

from django.db import models

from . import codec

_ZLIB_HEADER = 0x78


def json_pack(value: Any) -> bytes:
    """The stored form of a JSON value: zlib(level 1) of its compact UTF-8 JSON."""
    return zlib.compress(codec.dumpb(value), 1)


def json_unpack(raw: bytes | memoryview) -> Any:
    """The JSON value of a stored form (compressed, or plain JSON bytes from before)."""
    raw = bytes(raw)
    if raw and raw[0] == _ZLIB_HEADER:
        raw = zlib.decompress(raw)
    return codec.loads(raw)


class CompressedJSONField(models.BinaryField):
    """A JSON value (dict, list, ...) kept compressed in bytea; None is SQL NULL. Not queryable inside."""

    description = "JSON stored compressed (bytea)"

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("editable", False)
        super().__init__(*args, **kwargs)

    def from_db_value(self, value, expression, connection):
        return None if value is None else json_unpack(value)

    def to_python(self, value):
        if value is None or isinstance(value, (dict, list)):
            return value
        if isinstance(value, (bytes, bytearray, memoryview)):
            return json_unpack(value)
        return value

    def get_db_prep_value(self, value, connection, prepared=False):
        if value is None:
            return None
        return connection.Database.Binary(json_pack(value))

    def value_to_string(self, obj):
        return json.dumps(self.value_from_object(obj))
