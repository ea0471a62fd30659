"""API views of the catalog: /api/v1/datasets/ (upload, read, rows, reward check, rename / share by
PATCH, delete) and /api/v1/models/ (register, read, rename / share by PATCH, delete).

Every read goes through the selectors (own, shared, or all for staff; another user's private object
is a 404); the catalog's domain errors (catalog/errors.py) become HTTP here: NotPermitted 403,
CatalogConflict / CatalogInUse 409, CatalogTooLarge 413, CatalogRefused 400 naming the field."""
from dataclasses import asdict

from django.http import Http404
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.response import Response

from rlstudio.api.errors import ApiError
from rlstudio.api.params import ListParamsMixin, list_params, pager_params
from rlstudio.api.parsers import JSONParser

from .rewardcheck import CheckError, reward_check
from .selectors import dataset_list_for, dataset_rows, model_asset_get_for, model_asset_list_for, row_view
from .serializers import (CatalogUpdateSerializer, DatasetSerializer, DatasetUploadSerializer,
                          ModelAssetSerializer, ModelRegisterSerializer, RewardCheckSerializer)
from .errors import CatalogConflict, CatalogRefused, CatalogTooLarge, NotPermitted
from .services.datasets import dataset_delete, dataset_upload
from .services.model_assets import model_delete, model_register
from .sharing import catalog_update


def api_error(exc: Exception) -> Exception:
    """The catalog's domain error as the API's error (other exceptions unchanged)."""
    if isinstance(exc, NotPermitted):
        return ApiError(exc.message, code="permission_denied", field=exc.field, status_code=403)
    if isinstance(exc, CatalogConflict):
        return ApiError(exc.message, code=exc.code, field=exc.field, status_code=409)
    if isinstance(exc, CatalogTooLarge):
        return ApiError(exc.message, code=exc.code, field=exc.field, status_code=413)
    if isinstance(exc, CatalogRefused):
        return ApiError(exc.message, code=exc.code, field=exc.field)
    return exc


class CatalogViewSet(viewsets.GenericViewSet):
    """What both catalog endpoints share: domain errors mapped, PATCH (no PUT) through `catalog_update`."""

    http_method_names = ["get", "post", "patch", "delete", "head", "options"]
    lookup_value_regex = r"\d+"

    def handle_exception(self, exc):
        return super().handle_exception(api_error(exc))

    def partial_update(self, request, *args, **kwargs):
        """Rename (owner or staff) and/or share / unshare (`visibility`, staff only). Any other field is a
        400 naming it (as a run's PATCH), not silently ignored."""
        item = self.get_object()
        extra = sorted(set(request.data) - {"name", "visibility"}) if hasattr(request.data, "keys") else []
        if extra:
            raise ApiError(f"{extra[0]!r}: only name and visibility can be changed here", field=extra[0])
        data = CatalogUpdateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        catalog_update(item=item, by=request.user, **data.validated_data)
        return Response(self.serializer_class(item).data)


def check_request_size(request) -> None:
    """Refuse an over-limit upload from its Content-Length, before the body is read."""
    from django.conf import settings

    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    limit = settings.RLSTUDIO_MAX_UPLOAD_BYTES
    if length > limit + (1 << 20):  # a megabyte of slack for the multipart envelope
        raise ApiError(f"the upload is {length} bytes, over the limit of {limit} bytes (RLSTUDIO_MAX_UPLOAD_BYTES)",
                       code="too_large", field="file", status_code=413)


class DatasetViewSet(ListParamsMixin, mixins.CreateModelMixin, mixins.DestroyModelMixin, mixins.ListModelMixin,
                     mixins.RetrieveModelMixin, CatalogViewSet):
    """The caller's datasets and the shared ones (staff: everyone's); another user's private one answers
    404, a shared one is read-only to non-owners (403 on PATCH / DELETE)."""

    serializer_class = DatasetSerializer
    parser_classes = [MultiPartParser, FormParser, JSONParser]

    def get_queryset(self):
        return dataset_list_for(user=self.request.user)

    def get_serializer_class(self):
        if self.action == "create":
            return DatasetUploadSerializer
        if self.action == "reward_check":
            return RewardCheckSerializer
        if self.action == "partial_update":
            return CatalogUpdateSerializer
        return DatasetSerializer

    def create(self, request, *args, **kwargs):
        check_request_size(request)
        data = DatasetUploadSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        model = None
        if v["stats_model"]:
            try:
                model = model_asset_get_for(user=request.user, model_id=v["stats_model"])
            except Http404:  # an id named in the request: a 400 on its field (docs/api.md)
                raise ApiError(f"no model with id {v['stats_model']}", field="stats_model") from None
        dataset, created = dataset_upload(owner=request.user, upload=v["file"], name=v["name"], preset=v["preset"],
                                          split=v["split"], stats_model=model)
        body = DatasetSerializer(dataset).data
        body["duplicate"] = not created
        return Response(body, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)

    def perform_destroy(self, instance):
        dataset_delete(dataset=instance, by=self.request.user)

    @list_params(paged=True)
    @action(detail=True, methods=["get"])
    def rows(self, request, pk=None):
        """The converted rows (prompt messages, ground truth, tools), paginated."""
        dataset = self.get_object()
        offset, limit = pager_params(request.query_params)
        rows = dataset_rows(dataset=dataset, offset=offset, limit=limit)
        return Response({"count": dataset.num_rows or 0,
                         "results": [dict(row_view(r), index=offset + i) for i, r in enumerate(rows)]})

    @action(detail=True, methods=["post"], url_path="reward-check")
    def reward_check(self, request, pk=None):
        """Score made-up answers on the first rows with a reward function and tools."""
        dataset = self.get_object()
        data = RewardCheckSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        if dataset.status != dataset.Status.READY:
            raise ApiError("the dataset is not ready", code="not_ready", status_code=409)
        parser = "hermes"
        if v["model"] is not None:
            try:
                parser = model_asset_get_for(user=request.user, model_id=v["model"]).tool_parser or parser
            except Http404:
                raise ApiError(f"no model with id {v['model']}", field="model") from None
        rows = dataset_rows(dataset=dataset, offset=0, limit=v["rows"])
        try:
            results = reward_check(rows, reward_name=v["reward"], tool_names=v["tools"], parser=parser)
        except CheckError as exc:
            raise ApiError(str(exc), code=exc.code, field=exc.field) from None
        return Response({"results": [asdict(r) for r in results]})


class ModelAssetViewSet(ListParamsMixin, mixins.CreateModelMixin, mixins.DestroyModelMixin, mixins.ListModelMixin,
                       mixins.RetrieveModelMixin, CatalogViewSet):
    """The caller's model assets and the shared ones (staff: everyone's); POST registers a checkpoint
    folder (201; 200 with the shared model when the folder is already shared); PATCH / DELETE owner or
    staff only."""

    serializer_class = ModelAssetSerializer

    def get_queryset(self):
        return model_asset_list_for(user=self.request.user)

    def get_serializer_class(self):
        if self.action == "create":
            return ModelRegisterSerializer
        if self.action == "partial_update":
            return CatalogUpdateSerializer
        return ModelAssetSerializer

    def create(self, request, *args, **kwargs):
        data = ModelRegisterSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        model = model_register(owner=request.user, name=data.validated_data["name"], path=data.validated_data["path"])
        reused = model.owner_id != request.user.pk
        return Response(dict(ModelAssetSerializer(model).data, reused=reused),
                        status=status.HTTP_200_OK if reused else status.HTTP_201_CREATED)

    def perform_destroy(self, instance):
        model_delete(model=instance, by=self.request.user)
