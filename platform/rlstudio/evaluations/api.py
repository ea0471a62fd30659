"""API views of evaluations: /api/v1/runs/{id}/evaluations/ (GET list, POST create),
/runs/{id}/evaluations/{eid}/ (GET, ?change=better|worse|same filters the matrix; DELETE once finished), .../{eid}/stop/
(POST) and .../{eid}/samples/?prompt=&column= (GET: one cell's transcripts). Reading follows the run
(owner, shared readers, staff); creating, stopping and deleting need the run's owner or staff (403 otherwise).

The same four under /api/v1/models/{id}/evaluations/ for a catalog model: whoever may see the model
(own, shared, staff) evaluates it and reads, stops and deletes their own evaluations of it (staff: all); another
user's private model, or another user's evaluation, is a 404."""
from django.http import Http404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status as http
from rest_framework.response import Response
from rest_framework.views import APIView

from rlstudio.api.errors import ApiError
from rlstudio.api.params import list_params
from rlstudio.catalog.selectors import dataset_get_for
from rlstudio.text import ascii_uint

from .matrix import CHANGES, matrix_rows
from .selectors import (
    evaluation_get_for,
    evaluation_list_for,
    evaluation_samples_for,
    model_evaluation_get_for,
    model_evaluation_list_for,
)
from .serializers import (
    EvaluationCreateSerializer,
    EvaluationDetailSerializer,
    EvaluationSampleSerializer,
    EvaluationSerializer,
    ModelEvaluationCreateSerializer,
)
from .services import (
    EvaluationInvalid,
    EvaluationNotPermitted,
    EvaluationRefused,
    evaluation_new,
    evaluation_delete,
    evaluation_new_for_model,
    evaluation_stop,
)

CHANGE_PARAM = OpenApiParameter("change", str, enum=list(CHANGES), required=False,
                                description="only the prompts that got better / worse / stayed")
CELL_PARAMS = [OpenApiParameter("prompt", int, required=True,
                                description="the prompt's position in the matrix (its `position`)"),
               OpenApiParameter("column", str, required=True, description="the column: 'base' or a step")]


def _forbidden(exc) -> ApiError:
    return ApiError(exc.message, code="permission_denied", field=exc.field, status_code=http.HTTP_403_FORBIDDEN)


def _dataset_of(request, data: dict):
    """The body's `dataset`: a dataset the user may see (400 naming `dataset` otherwise)."""
    dataset_id = data.get("dataset")
    if isinstance(dataset_id, bool) or not isinstance(dataset_id, int):
        raise ApiError(f"dataset must be a dataset id, got {dataset_id!r}", field="dataset")
    try:
        return dataset_get_for(user=request.user, dataset_id=dataset_id)
    except Http404:
        raise ApiError(f"no dataset with id {dataset_id}", field="dataset") from None


def _create(request, make) -> Response:
    """202 with the evaluation `make(data, dataset)` created from the body; the API's errors otherwise."""
    from rlstudio.runs.services import RunNotPermitted

    data = request.data if isinstance(request.data, dict) else {}
    dataset = _dataset_of(request, data)
    try:
        ev = make(data, dataset)
    except RunNotPermitted as exc:
        raise _forbidden(exc) from None
    except EvaluationInvalid as exc:
        raise ApiError(str(exc), field=exc.field) from None
    except EvaluationRefused as exc:
        raise ApiError(str(exc), code="conflict", status_code=http.HTTP_409_CONFLICT) from None
    return Response(EvaluationSerializer(ev, context={"request": request}).data, status=http.HTTP_202_ACCEPTED)


def _detail(request, ev) -> Response:
    change = request.query_params.get("change") or None
    if change is not None and change not in CHANGES:
        raise ApiError(f"change must be one of {', '.join(CHANGES)}, got {change[:40]!r}", field="change")
    prompts = matrix_rows(ev.results, ev.columns, change)
    return Response(EvaluationDetailSerializer(ev, context={"prompts": prompts, "request": request}).data)


def _stop(request, ev) -> Response:
    from rlstudio.runs.services import RunNotPermitted

    try:
        ev = evaluation_stop(user=request.user, ev=ev)
    except (RunNotPermitted, EvaluationNotPermitted) as exc:
        raise _forbidden(exc) from None
    except EvaluationRefused as exc:
        raise ApiError(str(exc), code="conflict", status_code=http.HTTP_409_CONFLICT) from None
    return Response(EvaluationSerializer(ev, context={"request": request}).data, status=http.HTTP_202_ACCEPTED)


def _delete(request, ev) -> Response:
    from rlstudio.runs.services import RunNotPermitted

    try:
        evaluation_delete(user=request.user, ev=ev)
    except (RunNotPermitted, EvaluationNotPermitted) as exc:
        raise _forbidden(exc) from None
    except EvaluationRefused as exc:
        raise ApiError(str(exc), code="conflict", status_code=http.HTTP_409_CONFLICT) from None
    return Response(status=http.HTTP_204_NO_CONTENT)


def _samples(request, ev) -> Response:
    raw = request.query_params.get("prompt", "")
    prompt = ascii_uint(raw, max_digits=6)
    if prompt is None:
        raise ApiError(f"prompt must be a prompt's position (an integer >= 0), got {raw[:20]!r}", field="prompt")
    column = request.query_params.get("column", "")
    if column not in ev.columns:
        raise ApiError(f"column must be one of {', '.join(ev.columns)}, got {column[:20]!r}", field="column")
    rows = evaluation_samples_for(ev=ev, prompt=prompt, column=column)
    return Response(EvaluationSampleSerializer(rows, many=True).data)


class RunEvaluationsView(APIView):
    @list_params(paged=False, responses=EvaluationSerializer(many=True), operation_id="runs_evaluations_list")
    def get(self, request, run_id: int):
        """The evaluations of a run's checkpoints, newest first."""
        _run, qs = evaluation_list_for(user=request.user, run_id=run_id)
        return Response(EvaluationSerializer(qs[:100], many=True, context={"request": request}).data)

    @extend_schema(request=EvaluationCreateSerializer, responses={202: EvaluationSerializer},
                   operation_id="runs_evaluations_create")
    def post(self, request, run_id: int):
        """Evaluate some of a run's checkpoints (and the base model) on a dataset: a job within your quota."""
        from rlstudio.runs.services import RunNotPermitted, check_can_manage

        run, _qs = evaluation_list_for(user=request.user, run_id=run_id)
        try:  # a reader of a shared run is refused before anything in the body is looked at
            check_can_manage(user=request.user, run=run, action="evaluate")
        except RunNotPermitted as exc:
            raise _forbidden(exc) from None
        return _create(request, lambda data, dataset: evaluation_new(user=request.user, run=run, dataset=dataset,
                                                                     data=data))


class RunEvaluationDetailView(APIView):
    @extend_schema(parameters=[CHANGE_PARAM], responses=EvaluationDetailSerializer,
                   operation_id="runs_evaluations_retrieve")
    def get(self, request, run_id: int, evaluation_id: int):
        """One evaluation of a run: its figures and the prompts × checkpoints matrix (change: filter it)."""
        return _detail(request, evaluation_get_for(user=request.user, run_id=run_id, evaluation_id=evaluation_id))

    @extend_schema(responses={204: None}, operation_id="runs_evaluations_destroy")
    def delete(self, request, run_id: int, evaluation_id: int):
        """Delete a finished evaluation of a run with its transcripts."""
        return _delete(request, evaluation_get_for(user=request.user, run_id=run_id, evaluation_id=evaluation_id))


class RunEvaluationStopView(APIView):
    @extend_schema(request=None, responses={202: EvaluationSerializer}, operation_id="runs_evaluations_stop")
    def post(self, request, run_id: int, evaluation_id: int):
        """Stop an evaluation of a run: a queued one at once, a running one's job."""
        return _stop(request, evaluation_get_for(user=request.user, run_id=run_id, evaluation_id=evaluation_id))


class RunEvaluationSamplesView(APIView):
    @list_params(*CELL_PARAMS, paged=False, responses=EvaluationSampleSerializer(many=True),
                 operation_id="runs_evaluations_samples")
    def get(self, request, run_id: int, evaluation_id: int):
        """The k transcripts of one cell of a run's evaluation (prompt, column)."""
        return _samples(request, evaluation_get_for(user=request.user, run_id=run_id, evaluation_id=evaluation_id))


class ModelEvaluationsView(APIView):
    @list_params(paged=False, responses=EvaluationSerializer(many=True), operation_id="models_evaluations_list")
    def get(self, request, model_id: int):
        """Your evaluations of a registered model, newest first (staff: everyone's)."""
        _model, qs = model_evaluation_list_for(user=request.user, model_id=model_id)
        return Response(EvaluationSerializer(qs[:100], many=True, context={"request": request}).data)

    @extend_schema(request=ModelEvaluationCreateSerializer, responses={202: EvaluationSerializer},
                   operation_id="models_evaluations_create")
    def post(self, request, model_id: int):
        """Evaluate a registered model on a dataset with a reward: a job within your quota."""
        model, _qs = model_evaluation_list_for(user=request.user, model_id=model_id)
        return _create(request, lambda data, dataset: evaluation_new_for_model(user=request.user, model=model,
                                                                               dataset=dataset, data=data))


class ModelEvaluationDetailView(APIView):
    @extend_schema(parameters=[CHANGE_PARAM], responses=EvaluationDetailSerializer,
                   operation_id="models_evaluations_retrieve")
    def get(self, request, model_id: int, evaluation_id: int):
        """One evaluation of a model: its figures and its prompts (change: filter them)."""
        return _detail(request, model_evaluation_get_for(user=request.user, model_id=model_id,
                                                         evaluation_id=evaluation_id))

    @extend_schema(responses={204: None}, operation_id="models_evaluations_destroy")
    def delete(self, request, model_id: int, evaluation_id: int):
        """Delete a finished evaluation of a model with its transcripts."""
        return _delete(request, model_evaluation_get_for(user=request.user, model_id=model_id,
                                                         evaluation_id=evaluation_id))


class ModelEvaluationStopView(APIView):
    @extend_schema(request=None, responses={202: EvaluationSerializer}, operation_id="models_evaluations_stop")
    def post(self, request, model_id: int, evaluation_id: int):
        """Stop an evaluation of a model: a queued one at once, a running one's job."""
        return _stop(request, model_evaluation_get_for(user=request.user, model_id=model_id,
                                                       evaluation_id=evaluation_id))


class ModelEvaluationSamplesView(APIView):
    @list_params(*CELL_PARAMS, paged=False, responses=EvaluationSampleSerializer(many=True),
                 operation_id="models_evaluations_samples")
    def get(self, request, model_id: int, evaluation_id: int):
        """The k transcripts of one prompt of a model's evaluation."""
        return _samples(request, model_evaluation_get_for(user=request.user, model_id=model_id,
                                                          evaluation_id=evaluation_id))
