"""API views of runs and saved configs (docs/api.md "Runs", "Configs and presets").

/api/v1/runs/ (list with filters, create = launch), /runs/{id}/ (GET; PATCH: tags, note, project; DELETE: a
finished run, its records and its folder), /runs/bulk-delete/ (POST: many finished runs, all or none),
/runs/{id}/stop|resume|clone|fork/ (POST), /runs/{id}/sharing/ (GET, PUT),
/runs/{id}/job-log/?tail=&download= (Ray's driver log, owner and staff only; /logs/ is LIVE's event
log) ; /api/v1/configs/ (list, create, retrieve); /api/v1/presets/.
Views only translate HTTP to the services; refusals become the API's error shape (RunNotPermitted:
403 for a user a run is shared with, read-only).
"""
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status as http
from rest_framework import viewsets
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.views import APIView

from rlstudio.api.errors import ApiError
from rlstudio.api.params import ListParamsMixin, bool_param, int_param, list_params
from rlstudio.catalog.selectors import dataset_get_for, model_asset_get_for

from . import ray_jobs
from .models import RunStatus
from .selectors import (
    RUN_SCOPES,
    RunFilter,
    run_config_get_for,
    run_config_list_for,
    run_get_for,
    run_list_for,
    run_logs,
    run_shared_teams,
    run_shared_users,
)
from .serializers import (
    PresetSerializer,
    RunBulkDeletedSerializer,
    RunBulkDeleteSerializer,
    RunCheckpointsSerializer,
    RunCloneSerializer,
    RunConfigCreateSerializer,
    RunConfigSerializer,
    RunCreatedSerializer,
    RunLaunchSerializer,
    RunDetailSerializer,
    RunForkSerializer,
    RunLogsSerializer,
    RunSerializer,
    RunSharingChangeSerializer,
    RunSharingSerializer,
    RunStopSerializer,
    RunUpdateSerializer,
)
from .services import (
    RunInputInvalid,
    RunNotPermitted,
    RunRefused,
    RunsNotDeleted,
    check_can_manage,
    run_annotate,
    run_clone,
    run_config_save,
    run_delete,
    run_fork,
    check_project_of,
    run_new,
    run_resume,
    run_set_project,
    run_share,
    run_stop,
    runs_delete,
)


def _refused(exc: RunRefused) -> ApiError:
    return ApiError(str(exc), code="conflict", status_code=http.HTTP_409_CONFLICT)


def _invalid(exc: RunInputInvalid) -> ApiError:
    return ApiError(str(exc), code="invalid", field=exc.field)


def _invalid_all(exc: RunInputInvalid, **inputs) -> ApiError:
    """A refused new run: `error` is what the service raised, `errors` everything wrong with the same
    inputs at once (`preview.check_all`: each override and config key on its own, then the first
    cross-field error)."""
    from .preview import FieldError, check_all, merge

    errors = merge(FieldError(exc.field, str(exc)), check_all(**inputs).errors)
    return ApiError(str(exc), code="invalid", field=exc.field, errors=[e.as_dict() for e in errors])


def _lookup(getter, *, user, field: str, value, kind: str | None = None):
    """A referenced object the caller may see; another user's (or a missing) one is a 400 on the field
    (`kind`: the getter's id keyword when it differs from the field, e.g. val_dataset -> dataset)."""
    from django.http import Http404

    kind = kind or field
    try:
        return getter(user=user, **{f"{kind}_id": value})
    except Http404:
        raise ApiError(f"no {kind} with id {value}", code="invalid", field=field) from None


def _id_param(params, name: str) -> int | None:
    raw = params.get(name)
    if raw in (None, ""):
        return None
    try:
        return int(raw)
    except ValueError:
        raise ApiError(f"{name} must be an integer id, got {raw!r}", field=name) from None


def run_filter_from(params) -> RunFilter:
    """The runs list's filters from query parameters (400 naming the one that is wrong; one it does not
    take is refused before, by RunViewSet's ListParamsMixin)."""
    status = params.get("status") or None
    if status and status not in RunStatus.values:
        raise ApiError(f"unknown status {status!r}; one of: {', '.join(RunStatus.values)}", field="status")
    scope = params.get("scope") or ""
    if scope not in RUN_SCOPES:
        raise ApiError(f"unknown scope {scope!r}; one of: mine, shared (or empty: all)", field="scope")
    return RunFilter(status=status, tag=_text_param(params, "tag"), model=_id_param(params, "model"),
                     dataset=_id_param(params, "dataset"), q=_text_param(params, "q"), scope=scope,
                     project=_id_param(params, "project"))


def _text_param(params, name: str) -> str | None:
    """A text filter: stripped, at most 200 characters, without NUL (PostgreSQL refuses it in a query)."""
    return (params.get(name) or "").replace("\x00", "").strip()[:200] or None


def _not_permitted(exc: RunNotPermitted) -> ApiError:
    return ApiError(exc.message, code="permission_denied", field=exc.field, status_code=http.HTTP_403_FORBIDDEN)


JOB_LOG_TAIL_MAX = 5000  # the most driver-log lines one job-log read answers

RUN_LIST_PARAMETERS = [
    OpenApiParameter("status", str, enum=[s.value for s in RunStatus], required=False),
    OpenApiParameter("tag", str, required=False, description="Runs carrying this tag."),
    OpenApiParameter("model", int, required=False, description="Runs of this model (id)."),
    OpenApiParameter("dataset", int, required=False,
                     description="Runs on this dataset (id; training or validation)."),
    OpenApiParameter("q", str, required=False, description="Text in the run's name or note."),
    OpenApiParameter("scope", str, enum=["mine", "shared"], required=False,
                     description="Only the caller's own runs, or only those shared with them."),
    OpenApiParameter("project", int, required=False, description="Runs in this project (id)."),
]


class RunViewSet(ListParamsMixin, viewsets.ReadOnlyModelViewSet):
    """The runs the caller sees (their own, those shared with them; staff: everyone's), newest first,
    filtered by the query; POST launches one, PATCH edits a run's tags and note."""

    list_parameters = RUN_LIST_PARAMETERS

    lookup_value_regex = r"\d+"
    http_method_names = ["get", "post", "put", "patch", "delete", "head", "options"]

    def handle_exception(self, exc):
        if isinstance(exc, RunNotPermitted):
            exc = _not_permitted(exc)
        return super().handle_exception(exc)

    def get_serializer_class(self):
        return RunDetailSerializer if self.action in ("retrieve", "partial_update") else RunSerializer

    def get_queryset(self):
        flt = run_filter_from(self.request.query_params) if self.action == "list" else RunFilter()
        return run_list_for(user=self.request.user, flt=flt).prefetch_related("shared_with", "shared_with_teams")

    def _run(self, pk):
        return run_get_for(user=self.request.user, run_id=pk)

    def _answer(self, run, code=http.HTTP_201_CREATED, serializer=RunDetailSerializer):
        fresh = run_get_for(user=self.request.user, run_id=run.pk)
        return Response(serializer(fresh, context=self.get_serializer_context()).data, status=code)

    @extend_schema(request=RunUpdateSerializer, responses={200: RunDetailSerializer})
    def partial_update(self, request, pk=None):
        """The run's tags, note and/or project (owner or staff; audited): `project` is the id of a
        project of the run's owner, or null (out of its project). Any other field is a 400; a bad
        field changes nothing."""
        run = self._run(pk)
        check_can_manage(user=request.user, run=run, action="edit the tags, note and project of")
        extra = sorted(set(request.data) - {"tags", "note", "project"}) if hasattr(request.data, "keys") else []
        if extra:
            raise ApiError(f"{extra[0]!r}: only tags, note and project can be changed here (sharing: PUT "
                           f"/api/v1/runs/{run.pk}/sharing/)", field=extra[0])
        s = RunUpdateSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        data = dict(s.validated_data)
        moving, project = "project" in data, data.pop("project", None)
        try:
            if moving:
                check_project_of(owner=run.owner, project_id=project)
            if "tags" in data or "note" in data:
                run_annotate(run=run, by=request.user, **data)
            if moving:
                run_set_project(run=run, by=request.user, project_id=project)
        except RunInputInvalid as exc:
            raise _invalid(exc) from None
        return self._answer(run, http.HTTP_200_OK)

    @extend_schema(request=None, responses={204: None})
    def destroy(self, request, pk=None):
        """Delete a finished run: its records (events, metrics, samples, alerts, evaluations, exports,
        playground sessions on it) and its own folder (owner or staff; audited as run.delete). 409
        while the run, a run resumed from it, or a job on it is active, or while a catalog model exported
        from it exists. Its GPU-hours stay in its owner's monthly budget."""
        run = self._run(pk)
        try:
            run_delete(run=run, by=request.user)
        except RunRefused as exc:
            raise _refused(exc) from None
        return Response(status=http.HTTP_204_NO_CONTENT)

    @extend_schema(request=RunBulkDeleteSerializer, responses={200: RunBulkDeletedSerializer})
    @action(detail=False, methods=["post"], url_path="bulk-delete")
    def bulk_delete(self, request):
        """Delete many finished runs, all or none (`runs_delete`): 200 with the ids deleted; else nothing
        is deleted and every run in the way is named in `refused` (and `errors`): 400 when one is not
        the caller's to delete (unknown, not visible, or shared with them read-only), 409 when all are
        but one is live or still needed. Bad `ids` (not a list of distinct integers, empty, too many):
        400 on `ids`."""
        ids = request.data.get("ids") if isinstance(request.data, dict) else None
        try:
            deleted = runs_delete(run_ids=ids, by=request.user)
        except RunInputInvalid as exc:
            raise _invalid(exc) from None
        except RunsNotDeleted as exc:
            return _not_deleted(exc)
        return Response({"deleted": [run_id for run_id, _name in deleted]})

    @extend_schema(methods=["GET"], request=None, responses={200: RunSharingSerializer})
    @extend_schema(methods=["PUT"], request=RunSharingSerializer, responses={200: RunSharingSerializer})
    @extend_schema(methods=["PATCH"], request=RunSharingChangeSerializer, responses={200: RunSharingSerializer})
    @action(detail=True, methods=["get", "put", "patch"])
    def sharing(self, request, pk=None):
        """Who reads the run besides its owner and staff: its visibility, users and teams (owner or staff
        only; PUT replaces the lists it names, PATCH adds and takes away names at once; audited; a team the
        caller is not in, or none of that name, is a 400 on `teams` / `add_teams`)."""
        run = self._run(pk)
        check_can_manage(user=request.user, run=run, action="see or change the sharing of")
        if request.method == "PUT":
            s = RunSharingSerializer(data=request.data)
            s.is_valid(raise_exception=True)
            try:
                run_share(run=run, by=request.user, visibility=s.validated_data.get("visibility"),
                          users=s.validated_data.get("users"), teams=s.validated_data.get("teams"))
            except RunInputInvalid as exc:
                raise _invalid(exc) from None
            run.refresh_from_db()
        elif request.method == "PATCH":
            s = RunSharingChangeSerializer(data=request.data)
            s.is_valid(raise_exception=True)
            d = s.validated_data
            try:
                run_share(run=run, by=request.user, visibility=d.get("visibility"), add=d.get("add_users") or (),
                          remove=d.get("remove_users") or (), add_teams=d.get("add_teams") or (),
                          remove_teams=d.get("remove_teams") or ())
            except RunInputInvalid as exc:  # only what is added is checked: name the field it came in
                raise ApiError(str(exc), code="invalid", field=RunSharingChangeSerializer.field_of(exc.field)) from None
            run.refresh_from_db()
        return Response({"visibility": run.visibility, "users": run_shared_users(run=run),
                         "teams": run_shared_teams(run=run)})

    @extend_schema(request=RunLaunchSerializer, responses={201: RunCreatedSerializer})
    def create(self, request):
        s = RunLaunchSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        d, user = s.validated_data, request.user
        dataset = _lookup(dataset_get_for, user=user, field="dataset", value=d["dataset"])
        val = d.get("val_dataset")
        val_dataset = (_lookup(dataset_get_for, user=user, field="val_dataset", value=val, kind="dataset")
                       if val is not None else None)
        model = _lookup(model_asset_get_for, user=user, field="model", value=d["model"])
        rm_id = d.get("reward_model_id")
        reward_model = (_lookup(model_asset_get_for, user=user, field="reward_model_id", value=rm_id, kind="model")
                        if rm_id is not None else None)
        config, saved = d.get("config"), None
        if d.get("config_id") is not None:
            from django.http import Http404

            try:
                saved = run_config_get_for(user=user, config_id=d["config_id"]).config
            except Http404:
                raise ApiError(f"no config with id {d['config_id']}", field="config_id") from None
        if config is not None and not isinstance(config, dict):
            raise ApiError("config must be an object", field="config")
        inputs = dict(dataset=dataset, val_dataset=val_dataset, model=model, gpus=d["gpus"],
                      preset=d.get("preset") or None, config=config, overrides=d.get("overrides"),
                      reward_model=reward_model)
        try:
            run = run_new(owner=user, name=d["name"], saved=saved, tool_set=d.get("tool_set") or "",
                          project=d.get("project"), retention=d.get("retention"), tags=d.get("tags"), **inputs)
        except RunInputInvalid as exc:
            raise _invalid_all(exc, base=saved, **inputs) from None
        except RunRefused as exc:
            raise _refused(exc) from None
        return self._answer(run, serializer=RunCreatedSerializer)

    @extend_schema(request=RunStopSerializer, responses={202: RunDetailSerializer})
    @action(detail=True, methods=["post"])
    def stop(self, request, pk=None):
        run = self._run(pk)
        s = RunStopSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        try:
            run = run_stop(run=run, by=request.user, **s.validated_data)
        except RunRefused as exc:
            raise _refused(exc) from None
        return self._answer(run, http.HTTP_202_ACCEPTED)

    @extend_schema(request=None, responses={201: RunDetailSerializer})
    @action(detail=True, methods=["post"])
    def resume(self, request, pk=None):
        run = self._run(pk)
        try:
            new = run_resume(run=run, by=request.user)
        except RunRefused as exc:
            raise _refused(exc) from None
        except RunInputInvalid as exc:
            raise _invalid(exc) from None
        return self._answer(new)

    @extend_schema(request=RunCloneSerializer, responses={201: RunDetailSerializer})
    @action(detail=True, methods=["post"])
    def clone(self, request, pk=None):
        run = self._run(pk)
        s = RunCloneSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        try:
            new = run_clone(run=run, by=request.user, name=s.validated_data.get("name") or None,
                            overrides=s.validated_data.get("overrides"), retention=s.validated_data.get("retention"))
        except RunInputInvalid as exc:
            raise _invalid_all(exc, base=run.config, overrides=s.validated_data.get("overrides"),
                               dataset=run.dataset, val_dataset=run.val_dataset, model=run.model,
                               gpus=run.gpus, reward_model=run.reward_model) from None
        except RunRefused as exc:
            raise _refused(exc) from None
        return self._answer(new)

    @extend_schema(request=RunForkSerializer, responses={201: RunDetailSerializer})
    @action(detail=True, methods=["post"])
    def fork(self, request, pk=None):
        """A new run from one kept checkpoint of this finished run with fork-changeable keys changed
        (`run_fork`; docs/runs.md "Fork from a checkpoint"): 201, or 400 naming the field (`step`, the
        dotted key, `overrides`) with nothing created, 409 for a live run or one without a checkpoint."""
        run = self._run(pk)
        s = RunForkSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        d = s.validated_data
        try:
            new = run_fork(run=run, by=request.user, step=d.get("step"), name=d.get("name") or None,
                           overrides=d.get("overrides"), retention=d.get("retention"))
        except RunInputInvalid as exc:
            raise _invalid(exc) from None
        except RunRefused as exc:
            raise _refused(exc) from None
        return self._answer(new)

    @extend_schema(responses=RunCheckpointsSerializer)
    @action(detail=True, methods=["get"])
    def checkpoints(self, request, pk=None):
        """The global steps of the run's kept checkpoints (`checkpoint_steps`: the committed
        global_step_N folders of its own folder), for whoever reads the run: numbers, never paths."""
        from .checkpoints import checkpoint_steps

        run = self._run(pk)
        steps = list(checkpoint_steps(run))
        return Response({"run": run.pk, "steps": steps, "latest": max(steps) if steps else None})

    @extend_schema(
        parameters=[
            OpenApiParameter("tail", int, required=False,
                             description=f"Last N lines (default 200, 1 to {JOB_LOG_TAIL_MAX}; else a 400)."),
            OpenApiParameter("download", bool, required=False,
                             description="The log as a text file, cut after RLSTUDIO_JOB_LOG_DOWNLOAD_MAX_BYTES."),
        ],
        responses=RunLogsSerializer,
    )
    @action(detail=True, methods=["get"], url_path="job-log")
    def job_log(self, request, pk=None):
        """The Ray job's driver log (stdout/stderr of the trainer), for the run's owner and staff only: it
        prints server paths (dataset files, model paths, the run's folder), so a reader gets the 403 of
        every other owner-only action. /logs/ is the trainer's log events, which readers get."""
        run = self._run(pk)
        check_can_manage(user=request.user, run=run, action="read the job log of")
        if bool_param(request.query_params, "download"):
            return _download(run)
        tail = int_param(request.query_params, "tail", default=200, minimum=1, maximum=JOB_LOG_TAIL_MAX)
        return Response(run_logs(run=run, tail=tail))


def _not_deleted(exc: RunsNotDeleted) -> Response:
    """A refused bulk delete: the error shape, with every run in the way in `errors` (on `ids`) and in
    `refused` ({"id", "code", "message"}); 400 when a run is not the caller's to delete, else 409."""
    from rlstudio.api.errors import error_body

    input_wrong = any(r.code != "conflict" for r in exc.refusals)
    body = error_body(code="invalid" if input_wrong else "conflict", message=str(exc), field="ids",
                      errors=[{"field": "ids", "message": f"run {r.run_id}: {r.message}"} for r in exc.refusals])
    body["refused"] = [r.as_dict() for r in exc.refusals]
    return Response(body, status=http.HTTP_400_BAD_REQUEST if input_wrong else http.HTTP_409_CONFLICT)


def _download(run):
    """The job's driver log as a text attachment, streamed from Ray and cut after
    RLSTUDIO_JOB_LOG_DOWNLOAD_MAX_BYTES: a cut log ends with a line saying so (the header
    X-RLStudio-Log-Max-Bytes gives the limit). Without a job, or without Ray, a one-line text says why."""
    from django.conf import settings
    from django.http import HttpResponse, StreamingHttpResponse

    limit = int(settings.RLSTUDIO_JOB_LOG_DOWNLOAD_MAX_BYTES)
    disposition = f'attachment; filename="run-{run.pk}.log"'
    message = "the run has no Ray job yet"
    if run.ray_submission_id:
        try:
            chunks, was_cut = ray_jobs.log_chunks(run.ray_submission_id, max_bytes=limit)
        except ray_jobs.RayUnavailable as exc:
            message = str(exc)
        else:
            def body():
                yield from chunks
                if was_cut():
                    yield (f"\n[rlstudio: log cut after {limit} bytes (RLSTUDIO_JOB_LOG_DOWNLOAD_MAX_BYTES); "
                           f"its end is in the job-log tail]\n").encode()

            resp = StreamingHttpResponse(body(), content_type="text/plain; charset=utf-8")
            resp["Content-Disposition"], resp["X-RLStudio-Log-Max-Bytes"] = disposition, str(limit)
            return resp
    resp = HttpResponse(f"[{message}]\n", content_type="text/plain; charset=utf-8")
    resp["Content-Disposition"] = disposition
    return resp


class RunConfigViewSet(ListParamsMixin, viewsets.ReadOnlyModelViewSet):
    """The caller's saved configs (staff: everyone's); POST saves one (checked by the trainer's schema)."""

    serializer_class = RunConfigSerializer
    lookup_value_regex = r"\d+"

    def get_queryset(self):
        return run_config_list_for(user=self.request.user)

    @extend_schema(request=RunConfigCreateSerializer, responses={201: RunConfigSerializer})
    def create(self, request):
        s = RunConfigCreateSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        if not isinstance(s.validated_data["config"], dict):
            raise ApiError("config must be an object", field="config")
        try:
            saved = run_config_save(owner=request.user, **s.validated_data)
        except RunInputInvalid as exc:
            if exc.field == "name":
                raise _invalid(exc) from None
            raise _invalid_all(exc, config=s.validated_data["config"], gpus=s.validated_data["gpus"],
                               adapt=False) from None
        return Response(RunConfigSerializer(saved).data, status=http.HTTP_201_CREATED)


class PresetListView(APIView):
    """GET /api/v1/presets/: the trainer's recipes (name, description, config)."""

    @list_params(paged=False, responses=PresetSerializer(many=True))
    def get(self, request):
        from trainer.recipes import REGISTRY

        data = [{"name": r.name, "description": r.description, "config": r.build().to_dict()}
                for r in REGISTRY.values()]
        return Response(data)


__all__ = ["PresetListView", "RunConfigViewSet", "RunViewSet", "ray_jobs"]
