"""URLs of the catalog pages."""
from django.urls import path

from . import views

app_name = "catalog"

urlpatterns = [
    path("datasets/", views.dataset_list, name="dataset_list"),
    path("datasets/<int:dataset_id>/", views.dataset_detail, name="dataset_detail"),
    path("models/", views.model_list, name="model_list"),
]
