"""A run's metrics as one CSV file: `GET /api/v1/runs/{id}/metrics.csv` (docs/api.md).

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
from collections.abc import AsyncIterator, Iterator

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.views import APIView

from .compare import metric_names as names_of
from .models import MetricRow
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


def csv_lines(run_id: int, names: list[str]) -> Iterator[str]:
    """The whole file, a chunk of steps at a time (a WSGI server, the test client)."""
    yield header_line(names)
    after: int | None = -1
    while True:
        text, after = chunk_lines(run_id, names, after)
        if after is None:
            return
        yield text


async def csv_lines_async(run_id: int, names: list[str]) -> AsyncIterator[str]:
    """The same file for an ASGI server: each chunk's query runs on Django's thread for synchronous
    code and lets it go between chunks, so a long download never holds it."""
    yield header_line(names)
    after: int | None = -1
    chunk = sync_to_async(chunk_lines)
    while True:
        text, after = await chunk(run_id, names, after)
        if after is None:
            return
        yield text


class RunMetricsCsvView(APIView):
    """The run's metrics as CSV, for whoever may read the run (else 404)."""

    @extend_schema(responses={(200, "text/csv"): OpenApiResponse(
        OpenApiTypes.STR, description="step, time, then the run's metric names sorted; a row a step.")})
    def get(self, request, run_id: int):
        run = run_visible(user=request.user, run_id=run_id)
        names = metric_names(run.pk)
        asgi = isinstance(getattr(request, "_request", request), ASGIRequest)
        lines = csv_lines_async(run.pk, names) if asgi else csv_lines(run.pk, names)
        response = StreamingHttpResponse(lines, content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="run-{run.pk}-metrics.csv"'
        response["X-Content-Type-Options"] = "nosniff"
        response["Cache-Control"] = "private, no-store"
        return response
