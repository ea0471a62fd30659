"""URLs of the catalog pages."""
from django.urls import path

from . import views

app_name = "catalog"

urlpatterns = [
    path("datasets/", views.dataset_list, name="dataset_list"),
    path("datasets/upload/", views.dataset_upload_page, name="dataset_upload"),
    path("datasets/<int:dataset_id>/", views.dataset_detail, name="dataset_detail"),
    path("datasets/<int:dataset_id>/delete/", views.dataset_delete_view, name="dataset_delete"),
    path("models/", views.model_list, name="model_list"),
    path("models/<int:model_id>/", views.model_detail, name="model_detail"),
    path("models/<int:model_id>/delete/", views.model_delete_view, name="model_delete"),
    path("models/<int:item_id>/visibility/", views.visibility_view, {"kind": "models"}, name="model_visibility"),
    path("datasets/<int:item_id>/visibility/", views.visibility_view, {"kind": "datasets"},
         name="dataset_visibility"),
]
