"""API views of telemetry under /api/v1/runs/{id}/ (docs/api.md): the trainer's ingest and the reads.

  POST events/           the trainer's ingest: `Authorization: Bearer <run token>`, JSON body
                         `{"events": [...]}` (optionally `Content-Encoding: gzip`); routed to
                         `run_events_ingest`, which runs RunEventsIngestView off the request's thread
  GET  metrics/          ?after_step=&limit= (a page of rows in step order; since_step= is after_step's old name)
  GET  metrics/overview/ ?after_step=&until_step=&max_points= (a step range in at most max_points rows:
                         telemetry/overview.py)
  GET  samples/          ?step=&uid=&prompt_split=&prompt_hash=&min_reward=&max_reward=&finish_reason=&has_tool_call=
                         &order=&limit=&offset=
  GET  samples/{sid}/    the whole transcript and token view
  GET  groups/?step=&uid=   one GRPO group with mean / std / flat
  GET  memory/           ?since= (ISO 8601 or unix seconds)
  GET  logs/             ?tail=
  GET/PUT retention/     the run's sample retention (PUT: owner or staff, not a user it is shared with)
and GET /api/v1/runs/compare/?ids=&metrics=&max_points= (runs side by side: telemetry/compare.py).
"""
from __future__ import annotations

import json
import zlib
from datetime import datetime, timezone as dt_timezone

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from django.conf import settings
from django.core.handlers.asgi import ASGIRequest
from django.utils.dateparse import parse_datetime
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.utils.urls import remove_query_param, replace_query_param
from rest_framework.views import APIView

from rlstudio.api.errors import ApiError
from rlstudio.api.params import bool_param, int_param, list_params
from rlstudio.api.pagination import CountResultsPagination
from rlstudio.retention import RetentionInvalid
from rlstudio.runs.models import Run
from rlstudio.runs.selectors import can_manage
from rlstudio.runs.services import run_token_check
from trainer.events.schema import FINISH_REASONS, PROMPT_HASH_CHARS, PROMPT_SPLITS, is_prompt_hash

from . import codec
from . import overview as ov
from . import selectors as sel
from .models import RetentionMode, RunRetention
from .services import events_ingest, retention_set


def _float_param(params, name: str) -> float | None:
    raw = params.get(name)
    if raw in (None, ""):
        return None
    try:
        value = float(raw)
    except ValueError:
        raise ApiError(f"{name} must be a number, got {raw!r}", field=name) from None
    if value != value or value in (float("inf"), float("-inf")):
        raise ApiError(f"{name} must be finite", field=name)
    return value


def prompt_key_from(params) -> tuple[str | None, str | None]:
    """`prompt_split` and `prompt_hash` of a query string (a prompt's stable key; each None when
    absent); ApiError naming the one that is not a split or not a hash."""
    split = params.get("prompt_split") or None
    if split is not None and split not in PROMPT_SPLITS:
        raise ApiError(f"prompt_split must be one of {', '.join(PROMPT_SPLITS)}", field="prompt_split")
    digest = params.get("prompt_hash") or None
    if digest is not None and not is_prompt_hash(digest):
        raise ApiError(f"prompt_hash must be {PROMPT_HASH_CHARS} lowercase hex digits", field="prompt_hash")
    return split, digest


def sample_filter_from(params) -> sel.SampleFilter:
    """Parse the samples table's query string (shared by the API and the pages); ApiError when bad."""
    finish = params.get("finish_reason") or None
    if finish is not None and finish not in FINISH_REASONS:
        raise ApiError(f"finish_reason must be one of {', '.join(FINISH_REASONS)}", field="finish_reason")
    order = params.get("order") or "seq"
    if order not in sel.SAMPLE_ORDERS:
        raise ApiError(f"order must be one of {', '.join(sel.SAMPLE_ORDERS)}", field="order")
    split, digest = prompt_key_from(params)
    return sel.SampleFilter(
        step=int_param(params, "step", minimum=0), uid=params.get("uid") or None,
        prompt_split=split, prompt_hash=digest,
        min_reward=_float_param(params, "min_reward"), max_reward=_float_param(params, "max_reward"),
        finish_reason=finish, has_tool_call=bool_param(params, "has_tool_call"), order=order,
    )


class RunEventsIngestView(APIView):
    """POST: the trainer reports events; only the run's own ingest token is accepted."""

    authentication_classes: list = []  # the run token is checked below (no user, no CSRF)
    permission_classes = [AllowAny]
    parser_classes: list = []  # the body is read (and gunzipped) under our own size limits

    @extend_schema(request=OpenApiTypes.OBJECT, responses={200: OpenApiTypes.OBJECT}, auth=[])
    def post(self, request, run_id: int):
        header = request.META.get("HTTP_AUTHORIZATION", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise ApiError("Send the run's ingest token as 'Authorization: Bearer <token>'.",
                           code="not_authenticated", status_code=401)
        run = Run.objects.filter(pk=run_id).only(
            "id", "status", "owner_id", "ingest_token_hash", "ray_submission_id", "config").first()
        # A run that does not exist answers as a wrong token: the caller is no one yet, and must not
        # learn which run ids exist (how many runs the platform holds).
        if run is None or not run_token_check(run=run, token=token.strip()):
            raise ApiError("Invalid ingest token for this run.", code="invalid_token", status_code=401)
        with codec.gc_paused():
            return self._ingest(request, run)

    def _ingest(self, request, run: Run) -> Response:
        body = self._read_body(request)
        try:
            payload = codec.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ApiError(f"body is not JSON: {exc}", code="parse_error") from None
        if not isinstance(payload, dict) or not isinstance(payload.get("events"), list):
            raise ApiError('body must be {"events": [...]}', field="events")
        if len(payload["events"]) > settings.RLSTUDIO_INGEST_MAX_EVENTS:
            raise ApiError(f"at most {settings.RLSTUDIO_INGEST_MAX_EVENTS} events per request "
                           f"(got {len(payload['events'])})", code="too_many_events", field="events",
                           status_code=413)
        # A UTF-8 JSON text can only hold a NUL as the escape \u0000 (json.loads refuses a raw one);
        # json.loads also reads UTF-16/32 bodies, where that byte search would not hold.
        utf8 = json.detect_encoding(body[:4]) == "utf-8"
        result = events_ingest(run=run, raw_events=payload["events"], body_bytes=len(body) if utf8 else None,
                               body_may_hold_nul=not utf8 or b"\\u0000" in body)
        return Response(result.as_json())

    @staticmethod
    def _read_body(request) -> bytes:
        limit = settings.RLSTUDIO_INGEST_MAX_REQUEST_BYTES
        too_big = ApiError(f"request body over {limit} bytes", code="too_large", status_code=413)
        try:
            declared = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            declared = 0
        if declared > limit:
            raise too_big
        raw = request._request.read(limit + 1)  # not .body: Django caps that at 2.5 MB
        if len(raw) > limit:
            raise too_big
        if request.META.get("HTTP_CONTENT_ENCODING", "").lower() == "gzip":
            inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
            try:
                raw = inflater.decompress(raw, limit + 1)  # bounded: a gzip bomb stops at the limit
            except zlib.error as exc:
                raise ApiError(f"body is not valid gzip: {exc}", code="parse_error") from None
            if len(raw) > limit or inflater.unconsumed_tail:
                raise too_big
        return raw


_ingest_view = RunEventsIngestView.as_view()


def _ingest_rendered(request, run_id: int):
    """The ingest view's response, rendered in the thread that made it (no extra hop to render it)."""
    response = _ingest_view(request, run_id=run_id)
    response.render()
    return response


# Under ASGI, Django runs a sync view on a thread of its own made for the request: its database
# connection is opened for that request and goes with the thread. The server's thread pool lives as
# long as the process, so there the connection is kept (CONN_MAX_AGE) and the next POST skips the
# connect (a PostgreSQL backend fork: under load the largest fixed cost of a small POST). Channels'
# database_sync_to_async closes stale or broken connections before and after each call.
_ingest_on_pool = database_sync_to_async(_ingest_rendered, thread_sensitive=False)
# The caller's thread is Django's usual place for a sync view; Django's request signals manage its
# connection (and a test's connection holds the test's transaction: closing it would end the test).
_ingest_on_caller = sync_to_async(_ingest_rendered, thread_sensitive=True)


async def run_events_ingest(request, run_id: int):
    """POST events/: RunEventsIngestView (one transaction, stored once per (run, seq), broadcast after
    commit), with its database work on the server's thread pool.

    Only an ASGI request goes to the pool. A WSGI request (Django's test Client) stays on the caller's
    thread, whose connection may hold a transaction the rest of the caller's work must see (a test's)."""
    if isinstance(request, ASGIRequest):
        return await _ingest_on_pool(request, run_id)
    return await _ingest_on_caller(request, run_id)


# The URL's view for drf-spectacular and Django's CSRF check: it is RunEventsIngestView's, and
# exempt like every APIView (the run token authenticates; there is no session).
run_events_ingest.cls = RunEventsIngestView  # type: ignore[attr-defined]
run_events_ingest.initkwargs = {}  # type: ignore[attr-defined]
run_events_ingest.csrf_exempt = True  # type: ignore[attr-defined]


class _RunReadView(APIView):
    """Base of the read views: `self.run` is a run the caller may see (else 404)."""

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        self.run = sel.run_visible(user=request.user, run_id=kwargs["run_id"])


STEP_MAX = sel.STEP_MAX
_METRICS_PAGE = inline_serializer("MetricsPage", {
    "steps": inline_serializer("MetricRow", {
        "step": serializers.IntegerField(),
        "time": serializers.DateTimeField(help_text="When the trainer reported the step (ISO 8601)."),
        "t": serializers.FloatField(help_text="The same time in unix seconds."),
        "metrics": serializers.DictField(child=serializers.FloatField(allow_null=True),
                                         help_text="verl's metric names to values, merged over the step's events."),
    }, many=True),
    "next_after_step": serializers.IntegerField(
        allow_null=True, help_text="Pass as after_step for the next page; null on the last page."),
    "next": serializers.URLField(allow_null=True, help_text="The next page's URL; null on the last page."),
})


# The metrics page is keyed by step (after_step + limit), not by offset.
METRICS_LIST_PARAMETERS = (
    OpenApiParameter("after_step", int, required=False, description=(
        "Only steps greater than this (-1 or absent: from the first). Use the previous page's "
        "next_after_step.")),
    OpenApiParameter("limit", {"type": "integer", "minimum": 1, "maximum": sel.METRICS_PAGE_MAX,
                               "default": sel.METRICS_PAGE_DEFAULT}, required=False, description=(
        f"Rows per page, 1 to {sel.METRICS_PAGE_MAX} (default {sel.METRICS_PAGE_DEFAULT}); another value is a "
        "400 naming limit.")),
    OpenApiParameter("since_step", int, required=False, deprecated=True,
                     description="The older name of after_step (not both)."),
)


class RunMetricsView(_RunReadView):
    """A page of the run's metric rows in step order (`after_step` + `limit`, keyed by step)."""

    renderer_classes = [codec.JsonRenderer]  # up to 5,000 rows of ~80 numbers

    @list_params(*METRICS_LIST_PARAMETERS, paged=False, responses={200: _METRICS_PAGE})
    def get(self, request, run_id: int):
        params = request.query_params
        after = int_param(params, "after_step", minimum=-1, maximum=STEP_MAX)
        since = int_param(params, "since_step", minimum=-1, maximum=STEP_MAX)
        if after is not None and since is not None:
            raise ApiError("give after_step or its older name since_step, not both", field="since_step")
        after = after if after is not None else since
        limit = int_param(params, "limit", default=sel.METRICS_PAGE_DEFAULT, minimum=1,
                          maximum=sel.METRICS_PAGE_MAX)
        steps, next_after = sel.metrics_page(run=self.run, after_step=after, limit=limit)
        next_url = None
        if next_after is not None:
            next_url = remove_query_param(request.build_absolute_uri(), "since_step")
            next_url = replace_query_param(replace_query_param(next_url, "after_step", next_after), "limit", limit)
        return Response({"steps": steps, "next_after_step": next_after, "next": next_url})


_OVERVIEW = inline_serializer("MetricsOverview", {
    "steps": inline_serializer("MetricOverviewRow", {
        "step": serializers.IntegerField(help_text="The row's step; a bucket's last step."),
        "time": serializers.DateTimeField(help_text="When the trainer reported that step (ISO 8601)."),
        "t": serializers.FloatField(help_text="The same time in unix seconds."),
        "from_step": serializers.IntegerField(required=False, help_text=(
            "A bucket's first step (only when downsampled).")),
        "rows": serializers.IntegerField(required=False, help_text="The stored rows a bucket stands for."),
        "metrics": serializers.DictField(child=serializers.FloatField(allow_null=True), help_text=(
            "A row's values; a bucket's mean of each metric, the minimum of a .../min statistic and the "
            "maximum of a .../max one.")),
    }, many=True),
    "points": serializers.IntegerField(help_text="Stored rows in the step range."),
    "downsampled": serializers.BooleanField(help_text="Whether the rows are buckets (points > max_points)."),
})
OVERVIEW_PARAMETERS = (
    OpenApiParameter("after_step", int, required=False,
                     description="Only steps greater than this (-1 or absent: from the first)."),
    OpenApiParameter("until_step", int, required=False,
                     description="Only steps up to this one, included (absent: to the last)."),
    OpenApiParameter("max_points", {"type": "integer", "minimum": ov.POINTS_MIN, "maximum": ov.POINTS_MAX,
                                    "default": ov.POINTS_DEFAULT}, required=False, description=(
        f"Rows at most, {ov.POINTS_MIN} to {ov.POINTS_MAX} (default {ov.POINTS_DEFAULT}); a longer range "
        "is answered in that many buckets of consecutive steps.")),
)


class RunMetricsOverviewView(_RunReadView):
    """The run's metric rows of a step range, at most `max_points` of them (telemetry/overview.py): what
    a chart draws, for a run of any length."""

    renderer_classes = [codec.JsonRenderer]

    @list_params(*OVERVIEW_PARAMETERS, paged=False, responses={200: _OVERVIEW})
    def get(self, request, run_id: int):
        params = request.query_params
        steps = step_range(params) or {"after": None, "until": None}
        points = int_param(params, "max_points", default=ov.POINTS_DEFAULT, minimum=ov.POINTS_MIN,
                           maximum=ov.POINTS_MAX)
        got = ov.overview(run=self.run, after_step=steps["after"], until_step=steps["until"], max_points=points)
        return Response(got.as_json())


# The samples list's filters (sample_filter_from reads them; the pager adds limit and offset).
SAMPLE_LIST_PARAMS = ("step", "uid", "prompt_split", "prompt_hash", "min_reward", "max_reward", "finish_reason",
                      "has_tool_call", "order")


class RunSamplesView(_RunReadView):
    @list_params(*(OpenApiParameter(n, str, required=False) for n in SAMPLE_LIST_PARAMS), paged=True,
                 responses={200: OpenApiTypes.OBJECT})
    def get(self, request, run_id: int):
        flt = sample_filter_from(request.query_params)
        paginator = CountResultsPagination()
        page = paginator.paginate_queryset(sel.SamplePages(sel.samples_for(run=self.run, flt=flt), flt.order),
                                           request, view=self)
        return paginator.get_paginated_response(sel.sample_rows(samples=list(page)))


class RunSampleDetailView(_RunReadView):
    @extend_schema(operation_id="runs_sample_detail", responses={200: OpenApiTypes.OBJECT})
    def get(self, request, run_id: int, sample_id: int):
        return Response(sel.sample_detail_dict(sel.sample_get(run=self.run, sample_id=sample_id)))


class RunGroupView(_RunReadView):
    @extend_schema(parameters=[OpenApiParameter("step", int), OpenApiParameter("uid", str)],
                   responses={200: OpenApiTypes.OBJECT})
    def get(self, request, run_id: int):
        step = int_param(request.query_params, "step", minimum=0)
        uid = request.query_params.get("uid")
        if step is None:
            raise ApiError("step is required", field="step")
        if not uid:
            return Response({"step": step, "groups": sel.groups_of_step(run=self.run, step=step)})
        return Response(sel.group_for(run=self.run, step=step, uid=uid))


def _since_param(params) -> datetime | None:
    raw = params.get("since")
    if raw in (None, ""):
        return None
    try:
        return datetime.fromtimestamp(float(raw), tz=dt_timezone.utc)
    except (ValueError, OverflowError, OSError):
        pass
    try:  # parse_datetime: None for a malformed text, ValueError for a well-formed impossible one (Feb 30)
        parsed = parse_datetime(raw.replace(" ", "+")) if "T" in raw or "-" in raw else None
    except ValueError:
        parsed = None
    if parsed is None or parsed.tzinfo is None:
        raise ApiError("since must be unix seconds or an ISO 8601 time with a zone", field="since")
    return parsed


class RunMemoryView(_RunReadView):
    renderer_classes = [codec.JsonRenderer]  # up to 50,000 points
    @extend_schema(parameters=[OpenApiParameter("since", str, required=False), OpenApiParameter(
                       "limit", int, required=False, description=(
                           f"The latest N points (default {sel.MEMORY_POINTS_DEFAULT:,}, 1 to "
                           f"{sel.MEMORY_POINTS_MAX:,}; else a 400); `truncated` says earlier ones were left out."))],
                   responses={200: OpenApiTypes.OBJECT})
    def get(self, request, run_id: int):
        limit = int_param(request.query_params, "limit", default=sel.MEMORY_POINTS_DEFAULT, minimum=1,
                          maximum=sel.MEMORY_POINTS_MAX)
        points, truncated = sel.memory_window(run=self.run, since=_since_param(request.query_params), limit=limit)
        return Response({"points": points, "truncated": truncated})


LOGS_TAIL_MAX = 10_000  # the most log events one read answers


class RunLogsView(_RunReadView):
    @extend_schema(parameters=[OpenApiParameter("tail", int, required=False, description=(
                       f"The last N log events (default 500, 1 to {LOGS_TAIL_MAX}; else a 400)."))],
                   responses={200: OpenApiTypes.OBJECT})
    def get(self, request, run_id: int):
        tail = int_param(request.query_params, "tail", default=500, minimum=1, maximum=LOGS_TAIL_MAX)
        return Response({"lines": sel.logs_tail(run=self.run, user=request.user, tail=tail)})


class RunRetentionView(_RunReadView):
    """GET / PUT `{"mode": "all" | "per_step" | "every_kth_step", "k": N}`."""

    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    def get(self, request, run_id: int):
        r = RunRetention.objects.filter(run=self.run).first()
        return Response({"mode": r.mode if r else RetentionMode.ALL, "k": r.k if r else 1})

    @extend_schema(request=OpenApiTypes.OBJECT, responses={200: OpenApiTypes.OBJECT})
    def put(self, request, run_id: int):
        if not can_manage(user=request.user, run=self.run):  # a run shared with the caller: read-only
            raise ApiError(f"run {self.run.name!r} is shared with you read-only: only its owner "
                           f"({self.run.owner.get_username()}) or staff can change its retention",
                           code="permission_denied", status_code=403)
        data = request.data
        if not isinstance(data, dict):  # a list, a number...: not "the defaults"
            raise ApiError(f'the body must be an object {{"mode": ..., "k": N}}, got {type(data).__name__}')
        mode, k = data.get("mode", RetentionMode.ALL), data.get("k", 1)
        try:
            r = retention_set(run=self.run, mode=mode, k=k, by=request.user)
        except RetentionInvalid as exc:
            raise ApiError(str(exc), field=exc.field) from None
        return Response({"mode": r.mode, "k": r.k})


def compare_params(params) -> tuple[list[int], list[str] | None, int]:
    """(run ids, metrics or None for the default ones, max points) of a compare request; ApiError
    naming the parameter that is wrong."""
    from . import compare

    try:
        ids = compare.parse_ids(params.getlist("ids"))
    except ValueError as exc:
        raise ApiError(str(exc), field="ids") from None
    try:
        metrics = compare.parse_metrics(params.getlist("metrics"))
    except ValueError as exc:
        raise ApiError(str(exc), field="metrics") from None
    max_points = int_param(params, "max_points", default=compare.MAX_POINTS_DEFAULT, minimum=compare.MAX_POINTS_MIN,
                           maximum=compare.MAX_POINTS_MAX)
    return ids, metrics, max_points


def step_range(params) -> dict[str, int] | None:
    """{"after", "until"} of ?after_step=&until_step= (after < step <= until), None when neither is
    given; ApiError naming the one that is wrong."""
    after = int_param(params, "after_step", minimum=-1, maximum=STEP_MAX)
    until = int_param(params, "until_step", minimum=0, maximum=STEP_MAX)
    if after is None and until is None:
        return None
    if until is None and after == STEP_MAX:
        raise ApiError(f"after_step must be below {STEP_MAX}: no step is greater", field="after_step")
    after, until = -1 if after is None else after, STEP_MAX if until is None else until
    if until <= after:
        raise ApiError(f"until_step must be greater than after_step ({after}), got {until}", field="until_step")
    return {"after": after, "until": until}


class RunCompareView(APIView):
    """GET /api/v1/runs/compare/?ids=1,2,3: runs side by side (telemetry/compare.py)."""

    @extend_schema(
        operation_id="runs_compare",
        parameters=[
            OpenApiParameter("ids", str, required=True, description=(
                "The runs to compare, comma-separated ids (or ids= repeated), at most 20.")),
            OpenApiParameter("metrics", str, required=False, description=(
                "Metric names whose series to return, metrics= repeated (a value that is one of the "
                "runs' metric names is that name, commas and all) or comma-separated; at most 20 "
                "(default: the held-out reward most runs report and critic/score/mean).")),
            OpenApiParameter("max_points", int, required=False, description=(
                "Points per series at most, 10 to 5000 (default 1000); longer series are downsampled.")),
            OpenApiParameter("after_step", int, required=False, description=(
                "Series of the steps greater than this only (a zoomed chart's range; -1 or absent: from the first).")),
            OpenApiParameter("until_step", int, required=False, description=(
                "Series of the steps up to this one only, included (absent: to the last).")),
        ],
        responses={200: OpenApiTypes.OBJECT},
    )
    def get(self, request):
        from django.http import Http404

        from . import compare

        ids, metrics, max_points = compare_params(request.query_params)
        steps = step_range(request.query_params)
        try:
            body = compare.compare_runs(user=request.user, run_ids=ids, metrics=metrics, max_points=max_points,
                                        steps=steps)
        except Http404 as exc:
            raise ApiError(str(exc), code="not_found", field="ids", status_code=404) from None
        except compare.TooManyMetrics as exc:
            raise ApiError(str(exc), field="metrics") from None
        return Response(body)
