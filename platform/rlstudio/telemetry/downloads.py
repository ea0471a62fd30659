"""A run's telemetry as files: its metrics as CSV (`GET /api/v1/runs/{id}/metrics.csv`) and the trainer's
messages as text (`GET /api/v1/runs/{id}/messages.txt`), both streamed (docs/api.md).

One row a step in step order, the columns `step`, `time` (ISO 8601, UTC) and then every metric name the run
reported, sorted; a step that did not report a metric leaves its cell empty. The response streams: the
column names come from one query over the run's rows, the rows from range queries of CHUNK_ROWS steps,
so a long run never sits in memory whole. The file is named after the run's id, never its name (the name is
user text). Metric names are the trainer's, but a cell that a spreadsheet would read as a formula
(`=`, `+`, `-`, `@`, a tab or carriage return first) is written with a leading `'` all the same; numbers
are written as numbers.
"""
from __future__ import annotations

import csv
import math
from collections.abc import AsyncIterator, Callable, Iterator

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.views import APIView

from rlstudio.runs.selectors import can_manage

from .compare import metric_names as names_of
from .models import MetricRow, RunEvent
from .redact import event_for_viewer
from .selectors import run_visible

CHUNK_ROWS = 500
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


class _Line:
    """A file-like target for csv.writer that hands back what was written."""

    def write(self, text: str) -> str:
        return text


def safe_cell(value: object) -> object:
    """A cell as written: floats and ints as they are (NaN and infinities as their names), None empty,
    text with a leading `'` when a spreadsheet would take it for a formula."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    text = str(value)
    return "'" + text if text.startswith(_FORMULA_START) else text


def metric_names(run_id: int) -> list[str]:
    """Every metric name in the run's rows, sorted (compare.metric_names: kept in the cache while the
    run's rows do not change)."""
    return names_of([run_id])


def header_line(names: list[str]) -> str:
    """The file's first line: step, time, the metric names."""
    return csv.writer(_Line()).writerow(["step", "time", *(safe_cell(n) for n in names)])


def chunk_lines(run_id: int, names: list[str], after_step: int) -> tuple[str, int | None]:
    """The lines of the next CHUNK_ROWS steps after `after_step` (one indexed range query), and the
    step to continue after (None: no rows left)."""
    rows = list(MetricRow.objects.filter(run_id=run_id, step__gt=after_step).order_by("step")
                .only("step", "time", "metrics")[:CHUNK_ROWS])
    if not rows:
        return "", None
    writer = csv.writer(_Line())
    lines = []
    for row in rows:
        metrics = row.metrics if isinstance(row.metrics, dict) else {}
        lines.append(writer.writerow([row.step, row.time.isoformat(), *(safe_cell(metrics.get(n)) for n in names)]))
    return "".join(lines), rows[-1].step


def lines(head: str, chunk: Callable[[int], tuple[str, int | None]]) -> Iterator[str]:
    """A streamed file: `head`, then `chunk(after)` -> (its text, the key to continue after; None at the
    end) from -1 on (a WSGI server, the test client)."""
    yield head
    after: int | None = -1
    while True:
        text, after = chunk(after)
        if after is None:
            return
        yield text


async def lines_async(head: str, chunk: Callable[[int], tuple[str, int | None]]) -> AsyncIterator[str]:
    """The same file for an ASGI server: each chunk's query runs on Django's thread for synchronous
    code and lets it go between chunks, so a long download never holds it."""
    yield head
    after: int | None = -1
    step = sync_to_async(chunk)
    while True:
        text, after = await step(after)
        if after is None:
            return
        yield text


def streamed(request, head: str, chunk: Callable[[int], tuple[str, int | None]], *, content_type: str,
             filename: str) -> StreamingHttpResponse:
    """The attachment `filename` streamed a chunk at a time (`lines` / `lines_async` by the server)."""
    asgi = isinstance(getattr(request, "_request", request), ASGIRequest)
    response = StreamingHttpResponse(lines_async(head, chunk) if asgi else lines(head, chunk), content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    response["X-Content-Type-Options"] = "nosniff"
    response["Cache-Control"] = "private, no-store"
    return response


class RunMetricsCsvView(APIView):
    """The run's metrics as CSV, for whoever may read the run (else 404)."""

    @extend_schema(responses={(200, "text/csv"): OpenApiResponse(
        OpenApiTypes.STR, description="step, time, then the run's metric names sorted; a row a step.")})
    def get(self, request, run_id: int):
        run = run_visible(user=request.user, run_id=run_id)
        names = metric_names(run.pk)
        return streamed(request, header_line(names), lambda after: chunk_lines(run.pk, names, after),
                        content_type="text/csv; charset=utf-8", filename=f"run-{run.pk}-metrics.csv")


MESSAGE_CHUNK = 2000


def message_lines(run_id: int, manager: bool, after_seq: int) -> tuple[str, int | None]:
    """The next MESSAGE_CHUNK log events after `after_seq` as text lines ("<ISO time> [level] message"),
    as the reader may see them (`redact.event_for_viewer`: a reader's without server paths), and the
    seq to continue after (None: no events left). The run's partial index of log events serves it."""
    rows = list(RunEvent.objects.filter(run_id=run_id, type="log", seq__gt=after_seq).order_by("seq")
                .values_list("seq", "time", "data")[:MESSAGE_CHUNK])
    if not rows:
        return "", None
    out = []
    for _seq, time, data in rows:
        shown = event_for_viewer({"type": "log", "data": data}, manager=manager)["data"]
        out.append(f"{time.isoformat()} [{shown.get('level', 'info')}] {shown.get('message', '')}\n")
    return "".join(out), rows[-1][0]


class RunMessagesTextView(APIView):
    """The trainer's messages of the run (its log events) as one text file, for whoever may read it."""

    @extend_schema(responses={(200, "text/plain"): OpenApiResponse(
        OpenApiTypes.STR, description="One line a log event in seq order: ISO time, [level], message.")})
    def get(self, request, run_id: int):
        run = run_visible(user=request.user, run_id=run_id)
        manager = can_manage(user=request.user, run=run)
        return streamed(request, "", lambda after: message_lines(run.pk, manager, after),
                        content_type="text/plain; charset=utf-8", filename=f"run-{run.pk}-messages.txt")
