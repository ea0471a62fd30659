"""API routes of evaluations, included by rlstudio.api.urls before the runs router."""
from django.urls import path

from . import api

urlpatterns = [
    path("runs/<int:run_id>/evaluations/", api.RunEvaluationsView.as_view(), name="run-evaluations"),
    path("runs/<int:run_id>/evaluations/<int:evaluation_id>/", api.RunEvaluationDetailView.as_view(),
         name="run-evaluation"),
    path("runs/<int:run_id>/evaluations/<int:evaluation_id>/stop/", api.RunEvaluationStopView.as_view(),
         name="run-evaluation-stop"),
    path("runs/<int:run_id>/evaluations/<int:evaluation_id>/samples/", api.RunEvaluationSamplesView.as_view(),
         name="run-evaluation-samples"),
]
