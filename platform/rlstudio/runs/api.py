"""API views of runs and saved configs: /api/v1/runs/, /api/v1/configs/ (read for now)."""
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import viewsets

from rlstudio.api.errors import ApiError

from .models import RunStatus
from .selectors import run_config_list_for, run_list_for
from .serializers import RunConfigSerializer, RunDetailSerializer, RunSerializer


@extend_schema_view(
    list=extend_schema(
        parameters=[OpenApiParameter("status", str, enum=[s.value for s in RunStatus], required=False)]
    )
)
class RunViewSet(viewsets.ReadOnlyModelViewSet):
    """The caller's runs (staff: everyone's), newest first; `?status=` filters."""

    lookup_value_regex = r"\d+"

    def get_serializer_class(self):
        return RunDetailSerializer if self.action == "retrieve" else RunSerializer

    def get_queryset(self):
        status = self.request.query_params.get("status") if self.action == "list" else None
        if status and status not in RunStatus.values:
            raise ApiError(
                f"unknown status {status!r}; one of: {', '.join(RunStatus.values)}", field="status"
            )
        return run_list_for(user=self.request.user, status=status)


class RunConfigViewSet(viewsets.ReadOnlyModelViewSet):
    """The caller's saved configs (staff: everyone's)."""

    serializer_class = RunConfigSerializer
    lookup_value_regex = r"\d+"

    def get_queryset(self):
        return run_config_list_for(user=self.request.user)
