"""API views of the catalog: /api/v1/datasets/ and /api/v1/models/ (read for now)."""
from rest_framework import viewsets

from .selectors import dataset_list_for, model_asset_list_for
from .serializers import DatasetSerializer, ModelAssetSerializer


class DatasetViewSet(viewsets.ReadOnlyModelViewSet):
    """The caller's datasets (staff: everyone's); another user's answers 404."""

    serializer_class = DatasetSerializer
    lookup_value_regex = r"\d+"

    def get_queryset(self):
        return dataset_list_for(user=self.request.user)


class ModelAssetViewSet(viewsets.ReadOnlyModelViewSet):
    """The caller's model assets (staff: everyone's)."""

    serializer_class = ModelAssetSerializer
    lookup_value_regex = r"\d+"

    def get_queryset(self):
        return model_asset_list_for(user=self.request.user)
