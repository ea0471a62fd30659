"""URLs of the runs pages: list, launch form, a run's control POSTs (stop, resume, clone, fork, tags and note,
sharing, project, delete), deleting many (the list's Delete selected: a confirm page, then its POST), the
quota page. The run page itself and /runs/compare/ are telemetry's."""
from django.urls import path

from . import control_views, views

app_name = "runs"

urlpatterns = [
    path("", views.run_list, name="list"),
    path("new/", views.run_new, name="new"),
    path("new/preview/", views.run_new_preview, name="new_preview"),  # JSON for the form's preview
    path("quota/", views.quota_page, name="quota"),
    path("delete/", control_views.run_bulk_delete_view, name="bulk_delete"),  # GET: confirm page; POST: delete
    path("<int:run_id>/controls/", control_views.run_controls_view, name="controls"),  # fragment, refreshed live
    path("<int:run_id>/stop/", control_views.run_stop_view, name="stop"),
    path("<int:run_id>/resume/", control_views.run_resume_view, name="resume"),
    path("<int:run_id>/clone/", control_views.run_clone_view, name="clone"),
    path("<int:run_id>/fork/", control_views.run_fork_view, name="fork"),  # from a kept checkpoint, settings changed
    path("<int:run_id>/annotate/", control_views.run_annotate_view, name="annotate"),  # tags and note
    path("<int:run_id>/share/", control_views.run_share_view, name="share"),
    path("<int:run_id>/project/", control_views.run_project_view, name="project"),  # move into / out of a project
    path("<int:run_id>/delete/", control_views.run_delete_view, name="delete"),
]
