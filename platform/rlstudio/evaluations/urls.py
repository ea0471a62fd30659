"""Page routes of evaluations: the run page's and a catalog model's Evaluations card as a fragment."""
from django.urls import path

from . import views

app_name = "evaluations"

urlpatterns = [  # fragments, refreshed live
    path("runs/<int:run_id>/evaluations/card/", views.evaluation_card_view, name="card"),
    path("models/<int:model_id>/evaluations/card/", views.model_evaluation_card_view, name="model_card"),
]
