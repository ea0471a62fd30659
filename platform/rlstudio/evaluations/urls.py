"""Page routes of evaluations (under /runs/): the run page's card as a fragment."""
from django.urls import path

from . import views

app_name = "evaluations"

urlpatterns = [
    path("<int:run_id>/evaluations/card/", views.evaluation_card_view, name="card"),  # fragment, refreshed live
]
