"""Routes under /api/v1/: the resources, the OpenAPI schema and its docs page."""
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView
from rest_framework.routers import DefaultRouter

from rlstudio.catalog.api import DatasetViewSet, ModelAssetViewSet
from rlstudio.projects.api import ProjectViewSet
from rlstudio.quotas.api import QuotaView
from rlstudio.registry.api import RewardFunctionViewSet, ToolSetViewSet
from rlstudio.runs.api import PresetListView, RunConfigViewSet, RunViewSet
from rlstudio.sweeps.api import SweepViewSet

from .docs import api_docs

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("runs", RunViewSet, basename="run")
router.register("datasets", DatasetViewSet, basename="dataset")
router.register("models", ModelAssetViewSet, basename="model")
router.register("configs", RunConfigViewSet, basename="config")
router.register("reward-functions", RewardFunctionViewSet, basename="reward-function")
router.register("tool-sets", ToolSetViewSet, basename="tool-set")
router.register("projects", ProjectViewSet, basename="project")
router.register("sweeps", SweepViewSet, basename="sweep")

app_name = "api"

urlpatterns = [
    # Telemetry (LIVE): before the router so runs/{id}/events|metrics|samples|... resolve here.
    path("", include("rlstudio.telemetry.api_urls")),
    path("", include("rlstudio.alerts.api_urls")),  # alerts/..., runs/{id}/alerts/
    path("", include("rlstudio.evaluations.api_urls")),  # runs/{id}/evaluations/..., models/{id}/evaluations/...
    path("", include("rlstudio.exports.api_urls")),  # runs/{id}/exports/...
    path("", include("rlstudio.playground.api_urls")),  # playground/sessions/...
    path("", include(router.urls)),
    path("quota/", QuotaView.as_view(), name="quota"),
    path("presets/", PresetListView.as_view(), name="presets"),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", api_docs, name="docs"),
]
