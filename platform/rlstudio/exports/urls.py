"""Page routes of exports (under /runs/)."""
from django.urls import path

from . import views

app_name = "exports"

urlpatterns = [
    path("<int:run_id>/exports/", views.export_start_view, name="start"),
]
