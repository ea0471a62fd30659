"""URLs of the runs pages."""
from django.urls import path

from . import views

app_name = "runs"

urlpatterns = [
    path("", views.run_list, name="list"),
    path("<int:run_id>/", __import__("rlstudio.telemetry.views", fromlist=["run_detail"]).run_detail, name="detail"),
]
