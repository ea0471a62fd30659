"""API routes of exports, included by rlstudio.api.urls before the runs router."""
from django.urls import path

from . import api

urlpatterns = [
    path("runs/<int:run_id>/exports/", api.RunExportsView.as_view(), name="run-exports"),
    path("runs/<int:run_id>/exports/<int:export_id>/", api.RunExportDetailView.as_view(), name="run-export"),
    path("runs/<int:run_id>/exports/<int:export_id>/archive/", api.RunExportArchiveView.as_view(),
         name="run-export-archive"),
]
