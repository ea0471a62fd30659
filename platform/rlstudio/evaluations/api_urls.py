"""API routes of evaluations (a run's and a catalog model's), included by rlstudio.api.urls before the
runs and models routers."""
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
    path("models/<int:model_id>/evaluations/", api.ModelEvaluationsView.as_view(), name="model-evaluations"),
    path("models/<int:model_id>/evaluations/<int:evaluation_id>/", api.ModelEvaluationDetailView.as_view(),
         name="model-evaluation"),
    path("models/<int:model_id>/evaluations/<int:evaluation_id>/stop/", api.ModelEvaluationStopView.as_view(),
         name="model-evaluation-stop"),
    path("models/<int:model_id>/evaluations/<int:evaluation_id>/samples/",
         api.ModelEvaluationSamplesView.as_view(), name="model-evaluation-samples"),
]
