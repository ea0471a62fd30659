"""API representations of catalog records."""
from rest_framework import serializers

from .models import Dataset, ModelAsset


class DatasetSerializer(serializers.ModelSerializer):
    owner = serializers.CharField(source="owner.username", read_only=True)

    class Meta:
        model = Dataset
        fields = [
            "id", "name", "owner", "status", "error", "format", "preset", "split", "num_rows",
            "columns", "sha256", "size_bytes", "stats", "created",
        ]
        read_only_fields = fields


class ModelAssetSerializer(serializers.ModelSerializer):
    owner = serializers.CharField(source="owner.username", read_only=True)

    class Meta:
        model = ModelAsset
        fields = ["id", "name", "owner", "path", "tokenizer_ok", "num_parameters", "source", "source_run", "created"]
        read_only_fields = fields
