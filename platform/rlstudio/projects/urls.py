"""URLs of the projects pages: the list (GET; POST creates), a project's page, its edit, share and
delete POSTs."""
from django.urls import path

from . import views

app_name = "projects"

urlpatterns = [
    path("", views.project_list, name="list"),
    path("<int:project_id>/", views.project_detail, name="detail"),
    path("<int:project_id>/edit/", views.project_edit_view, name="edit"),
    path("<int:project_id>/share/", views.project_share_view, name="share"),
    path("<int:project_id>/delete/", views.project_delete_view, name="delete"),
]
