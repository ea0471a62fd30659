"""URLs of the runs pages: list, launch form, a run's page and its control POSTs, the quota page."""
from django.urls import path

from . import views

app_name = "runs"

urlpatterns = [
    path("", views.run_list, name="list"),
    path("new/", views.run_new, name="new"),
    path("new/preview/", views.run_new_preview, name="new_preview"),  # JSON for the form's preview
    path("quota/", views.quota_page, name="quota"),
    path("<int:run_id>/controls/", views.run_controls_view, name="controls"),  # fragment, refreshed live
    path("<int:run_id>/stop/", views.run_stop_view, name="stop"),
    path("<int:run_id>/resume/", views.run_resume_view, name="resume"),
    path("<int:run_id>/clone/", views.run_clone_view, name="clone"),
]
