"""API views of sweeps (docs/api.md "Sweeps"): /api/v1/sweeps/ (GET the caller's, staff: all; POST
launches one), /api/v1/sweeps/{id}/ (GET: its runs with their axis values, state and latest metrics),
/api/v1/sweeps/{id}/stop/ (POST: stop every run that has not ended), DELETE /api/v1/sweeps/{id}/
(the sweep, not its runs). Owner and staff only: anyone else's sweep is a 404. Views translate; the services decide."""
from django.http import Http404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status as http
from rest_framework import viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from rlstudio.api.errors import ApiError
from rlstudio.api.params import ListParamsMixin
from rlstudio.catalog.selectors import dataset_get_for, model_asset_get_for
from rlstudio.runs.errors import RunInputInvalid, RunRefused
from rlstudio.runs.selectors import run_config_get_for

from .selectors import sweep_get_for, sweep_list_for, sweep_table
from .serializers import SweepCreateSerializer, SweepDetailSerializer, SweepSerializer, SweepStoppedSerializer
from .services import SweepInputs, sweep_delete, sweep_launch, sweep_stop


def _lookup(getter, *, user, field: str, value, kind: str):
    """A referenced object the caller may see; another user's (or a missing) one: 400 on the field."""
    if value is None:
        return None
    try:
        return getter(user=user, **{f"{kind}_id": value})
    except Http404:
        raise ApiError(f"no {kind} with id {value}", code="invalid", field=field) from None


class SweepViewSet(ListParamsMixin, viewsets.ReadOnlyModelViewSet):
    """The caller's sweeps (staff: everyone's), newest first; POST launches one."""

    lookup_value_regex = r"\d+"
    http_method_names = ["get", "post", "delete", "head", "options"]
    serializer_class = SweepSerializer

    def get_queryset(self):
        return sweep_list_for(user=self.request.user)

    def _detail(self, sweep, code=http.HTTP_200_OK, metric=None):
        sweep = sweep_list_for(user=self.request.user).get(pk=sweep.pk)
        table = sweep_table(user=self.request.user, sweep=sweep, metric=metric)
        return Response(SweepDetailSerializer(sweep, context={"table": table}).data, status=code)

    @extend_schema(parameters=[OpenApiParameter("metric", str, required=False, description=(
        "What the best run is chosen by: reward (the latest critic/score/mean) or a held-out metric "
        "(its best value); default: the held-out metric most runs report, else reward."))],
        responses={200: SweepDetailSerializer})
    def retrieve(self, request, pk=None):
        return self._detail(sweep_get_for(user=request.user, sweep_id=pk), metric=request.query_params.get("metric"))

    @extend_schema(request=SweepCreateSerializer, responses={201: SweepDetailSerializer})
    def create(self, request):
        """Launch a sweep (a grid, or random search), all its runs or none: 400 naming the field (an axis,
        a value, a range's end, `runs`, `seed`, a config key) and 409 past the owner's queued-runs cap, with no sweep and no run left behind."""
        s = SweepCreateSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        d, user = s.validated_data, request.user
        saved = None
        if d.get("config_id") is not None:
            try:
                saved = run_config_get_for(user=user, config_id=d["config_id"]).config
            except Http404:
                raise ApiError(f"no config with id {d['config_id']}", field="config_id") from None
        inputs = SweepInputs(
            dataset=_lookup(dataset_get_for, user=user, field="dataset", value=d["dataset"], kind="dataset"),
            val_dataset=_lookup(dataset_get_for, user=user, field="val_dataset", value=d.get("val_dataset"),
                                kind="dataset"),
            model=_lookup(model_asset_get_for, user=user, field="model", value=d["model"], kind="model"),
            reward_model=_lookup(model_asset_get_for, user=user, field="reward_model_id",
                                 value=d.get("reward_model_id"), kind="model"),
            gpus=d["gpus"], preset=d.get("preset") or None, config=d.get("config"), saved=saved,
            overrides=d.get("overrides"), tool_set=d.get("tool_set") or "", retention=d.get("retention"))
        try:
            sweep = sweep_launch(owner=user, name=d["name"], axes=d["axes"], inputs=inputs, mode=d["mode"],
                                 runs=d.get("runs"), seed=d.get("seed"))
        except RunInputInvalid as exc:
            raise ApiError(str(exc), code="invalid", field=exc.field) from None
        except RunRefused as exc:
            raise ApiError(str(exc), code="conflict", status_code=http.HTTP_409_CONFLICT) from None
        return self._detail(sweep, code=http.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: SweepStoppedSerializer})
    @action(detail=True, methods=["post"])
    def stop(self, request, pk=None):
        """Stop every run of the sweep that has not ended (a queued one is cancelled, a running one
        checkpoints and stops); `refused` says why a run could not be stopped now."""
        done = sweep_stop(sweep=sweep_get_for(user=request.user, sweep_id=pk), by=request.user)
        return Response({"stopped": done.stopped, "refused": {str(k): v for k, v in done.refused.items()}})

    @extend_schema(request=None, responses={204: None})
    def destroy(self, request, pk=None):
        """Delete the sweep (its axes, base config and links to its runs; the runs stay, and its dataset
        and model are no longer held by it); 409 while a run of it has not ended."""
        try:
            sweep_delete(sweep=sweep_get_for(user=request.user, sweep_id=pk), by=request.user)
        except RunRefused as exc:
            raise ApiError(str(exc), code="conflict", status_code=http.HTTP_409_CONFLICT) from None
        return Response(status=http.HTTP_204_NO_CONTENT)
