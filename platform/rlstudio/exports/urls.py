"""Page routes of exports (under /runs/)."""
from django.urls import path

from . import views

app_name = "exports"

urlpatterns = [
    path("<int:run_id>/exports/", views.export_start_view, name="start"),
    path("<int:run_id>/exports/card/", views.export_card_view, name="card"),  # fragment, refreshed live
    path("<int:run_id>/exports/<int:export_id>/delete/", views.export_delete_view, name="delete"),
]
