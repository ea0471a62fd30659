"""JSON of the ingest path (request bodies, rows for PostgreSQL, websocket frames) through orjson.

Owns one choice: orjson where it reads or writes the same JSON as the standard library, and the
standard library where it does not, so the ingest contract stays what `json` made it. orjson is
several times faster; JSON coding was most of the ingest's CPU (bench/live.py: the body, the
per-event size check, the RunEvent rows, the transcripts and token views, the batch frame).

Where they differ, and what is done:
  * reading NaN / Infinity, a lone surrogate (`"\\ud800"`), a UTF-8 byte order mark or a UTF-16/32
    text: orjson refuses them and `loads` falls back to `json.loads`, which reads them (validation
    then refuses a non-finite number with its usual reason) or raises its usual error for a text that
    is not JSON at all; a lone surrogate, which no UTF-8 encoder (PostgreSQL, a response, a frame)
    takes, is then read as U+FFFD, as a NUL in model text is stored (`rlstudio.text`);
  * integers beyond 64 bits: orjson reads them as floats (so such a seq or token id is refused as
    "must be an int"; with `json` it reached PostgreSQL's bigint and failed the whole request);
  * writing: a value orjson cannot write (an int beyond 64 bits, a non-str key, a lone surrogate)
    goes through `json.dumps` instead. orjson writes NaN / Infinity as null where `json` wrote
    invalid JSON; what is written here was validated first, so holds only finite numbers.
Output is compact and UTF-8 (non-ASCII characters as themselves); floats are written shortest-exact,
though not always as `repr` writes them (`0.00001` for `1e-05`): the same numbers.
"""
from __future__ import annotations

import gc
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import orjson
from django.utils.html import format_html
from django.utils.safestring import mark_safe
from rest_framework.renderers import JSONRenderer

from rlstudio.text import without_surrogates


def loads(data: bytes | str) -> Any:
    """The JSON value of `data` (bytes in UTF-8, or str); ValueError when it is not JSON, or is nested
    too deeply to read (orjson stops at 1024 levels; json.loads then raises RecursionError)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        try:
            return without_surrogates(json.loads(data))
        except RecursionError:
            raise ValueError("JSON nested too deeply") from None


def dumpb(value: Any) -> bytes:
    """Compact UTF-8 JSON of `value`, as bytes."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def dumps(value: Any) -> str:
    """Compact JSON text of `value` (non-ASCII characters as themselves)."""
    try:
        return orjson.dumps(value).decode("utf-8")
    except TypeError:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


_gc_lock = threading.Lock()
_gc_pausers = 0
_gc_was_enabled = False


@contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while the block runs (in any thread); back as it was after the
    last of the blocks that overlap.

    An ingest request builds hundreds of thousands of containers (a 500-sample body with 256-token
    views is ~800k lists, strings and numbers), none of them in a reference cycle: reference counting
    frees them all. Each 700 allocations start a young-generation collection anyway, and the older
    generations' collections walk everything the request holds, again and again: a third of the time
    `orjson.loads` takes on such a body (49 vs 27 ms) and ~15% of the whole ingest's CPU. The pause is
    bounded by the request (its body is size-limited), and what becomes garbage meanwhile is collected
    by the first collection after it.
    """
    global _gc_pausers, _gc_was_enabled
    with _gc_lock:
        if _gc_pausers == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pausers += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pausers -= 1
            if _gc_pausers == 0 and _gc_was_enabled:
                gc.enable()


class JsonRenderer(JSONRenderer):
    """DRF's JSON renderer writing through orjson (`dumpb`): the telemetry reads that answer thousands of
    numbers (a page of 1,000 metric rows x 80 keys is 2.4 MB) spent most of their time in `json.dumps`.
    The same compact UTF-8 JSON as DRF's settings make it; what orjson cannot write goes through `json`."""

    def render(self, data, accepted_media_type=None, renderer_context=None) -> bytes:
        if data is None:
            return b""
        return dumpb(data)


def script_json(value: Any, element_id: str) -> str:
    """`value` in a `<script type="application/json">` element, as Django's `json_script` writes it
    (`<`, `>` and `&` escaped, so no text inside can close the element), through orjson."""
    text = dumps(value).translate({ord(">"): "\\u003E", ord("<"): "\\u003C", ord("&"): "\\u0026"})
    return format_html('<script id="{}" type="application/json">{}</script>', element_id, mark_safe(text))

