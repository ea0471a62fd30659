"""URLs of the staff quota page and its actions (mounted at /quotas/)."""
from django.urls import path

from . import views

app_name = "quotas"

urlpatterns = [
    path("admin/", views.quota_admin, name="admin"),
    path("admin/quota/", views.quota_admin_set, name="admin_set"),
    path("admin/queue/<int:run_id>/move/", views.queue_move, name="queue_move"),
    path("admin/queue/<int:run_id>/cancel/", views.queue_cancel_view, name="queue_cancel"),
]
