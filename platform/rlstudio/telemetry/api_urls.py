"""API routes of telemetry, included by rlstudio.api.urls before the runs router (docs/api.md paths)."""
from django.urls import path

from . import api, downloads, tensorboard

urlpatterns = [
    path("runs/compare/", api.RunCompareView.as_view(), name="runs-compare"),
    path("runs/<int:run_id>/events/", api.run_events_ingest, name="run-events"),
    path("runs/<int:run_id>/metrics/", api.RunMetricsView.as_view(), name="run-metrics"),
    path("runs/<int:run_id>/metrics/overview/", api.RunMetricsOverviewView.as_view(), name="run-metrics-overview"),
    path("runs/<int:run_id>/metrics.csv", downloads.RunMetricsCsvView.as_view(), name="run-metrics-csv"),
    path("runs/<int:run_id>/messages.txt", downloads.RunMessagesTextView.as_view(), name="run-messages-txt"),
    path("runs/<int:run_id>/tensorboard.tar.gz", tensorboard.RunTensorBoardView.as_view(), name="run-tensorboard"),
    path("runs/<int:run_id>/samples/", api.RunSamplesView.as_view(), name="run-samples"),
    path("runs/<int:run_id>/samples/<int:sample_id>/", api.RunSampleDetailView.as_view(), name="run-sample"),
    path("runs/<int:run_id>/groups/", api.RunGroupView.as_view(), name="run-groups"),
    path("runs/<int:run_id>/memory/", api.RunMemoryView.as_view(), name="run-memory"),
    path("runs/<int:run_id>/logs/", api.RunLogsView.as_view(), name="run-logs"),
    path("runs/<int:run_id>/retention/", api.RunRetentionView.as_view(), name="run-retention"),
]
