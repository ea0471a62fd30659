"""API views of evaluations: /api/v1/runs/{id}/evaluations/ (GET list, POST create) and
/runs/{id}/evaluations/{eid}/ (GET, ?change=better|worse|same filters the matrix). Reading follows
the run (owner, shared readers, staff); creating needs the run's owner or staff (403 otherwise)."""
from django.http import Http404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status as http
from rest_framework.response import Response
from rest_framework.views import APIView

from rlstudio.api.errors import ApiError
from rlstudio.catalog.selectors import dataset_get_for

from .matrix import CHANGES, matrix_rows
from .selectors import evaluation_get_for, evaluation_list_for
from .serializers import EvaluationCreateSerializer, EvaluationDetailSerializer, EvaluationSerializer
from .services import EvaluationInvalid, EvaluationRefused, evaluation_new


class RunEvaluationsView(APIView):
    @extend_schema(responses=EvaluationSerializer(many=True), operation_id="runs_evaluations_list")
    def get(self, request, run_id: int):
        _run, qs = evaluation_list_for(user=request.user, run_id=run_id)
        return Response(EvaluationSerializer(qs[:100], many=True).data)

    @extend_schema(request=EvaluationCreateSerializer, responses={202: EvaluationSerializer},
                   operation_id="runs_evaluations_create")
    def post(self, request, run_id: int):
        from rlstudio.runs.services import RunNotPermitted, check_can_manage

        run, _qs = evaluation_list_for(user=request.user, run_id=run_id)
        try:  # a reader of a shared run is refused before anything in the body is looked at
            check_can_manage(user=request.user, run=run, action="evaluate")
        except RunNotPermitted as exc:
            raise ApiError(exc.message, code="permission_denied", field=exc.field,
                           status_code=http.HTTP_403_FORBIDDEN) from None
        data = request.data if isinstance(request.data, dict) else {}
        dataset_id = data.get("dataset")
        if isinstance(dataset_id, bool) or not isinstance(dataset_id, int):
            raise ApiError(f"dataset must be a dataset id, got {dataset_id!r}", field="dataset")
        try:
            dataset = dataset_get_for(user=request.user, dataset_id=dataset_id)
        except Http404:
            raise ApiError(f"no dataset with id {dataset_id}", field="dataset") from None
        try:
            ev = evaluation_new(user=request.user, run=run, dataset=dataset, data=data)
        except RunNotPermitted as exc:
            raise ApiError(exc.message, code="permission_denied", field=exc.field,
                           status_code=http.HTTP_403_FORBIDDEN) from None
        except EvaluationInvalid as exc:
            raise ApiError(str(exc), field=exc.field) from None
        except EvaluationRefused as exc:
            raise ApiError(str(exc), code="conflict", status_code=http.HTTP_409_CONFLICT) from None
        return Response(EvaluationSerializer(ev).data, status=http.HTTP_202_ACCEPTED)


class RunEvaluationDetailView(APIView):
    @extend_schema(parameters=[OpenApiParameter("change", str, enum=list(CHANGES), required=False,
                                                description="only the prompts that got better / worse / stayed")],
                   responses=EvaluationDetailSerializer, operation_id="runs_evaluations_retrieve")
    def get(self, request, run_id: int, evaluation_id: int):
        ev = evaluation_get_for(user=request.user, run_id=run_id, evaluation_id=evaluation_id)
        change = request.query_params.get("change") or None
        if change is not None and change not in CHANGES:
            raise ApiError(f"change must be one of {', '.join(CHANGES)}, got {change[:40]!r}", field="change")
        prompts = matrix_rows(ev.results, list(ev.checkpoints), change)
        return Response(EvaluationDetailSerializer(ev, context={"prompts": prompts}).data)
