"""URLs of the sweeps pages: the list, the form, a sweep's table (and its live part), its "stop all" and its deletion."""
from django.urls import path

from . import views

app_name = "sweeps"

urlpatterns = [
    path("", views.sweep_list, name="list"),
    path("new/", views.sweep_new, name="new"),
    path("<int:sweep_id>/", views.sweep_detail, name="detail"),
    path("<int:sweep_id>/live/", views.sweep_live, name="live"),
    path("<int:sweep_id>/stop/", views.sweep_stop_view, name="stop"),
    path("<int:sweep_id>/delete/", views.sweep_delete_view, name="delete"),
]
