"""API representations of catalog records, and the upload / registration / update inputs."""
from rest_framework import serializers

from .models import Dataset, ModelAsset, Visibility
from .presets import PRESETS


class DatasetSerializer(serializers.ModelSerializer):
    owner = serializers.CharField(source="owner.username", read_only=True)

    class Meta:
        model = Dataset
        fields = [
            "id", "name", "owner", "status", "error", "error_line", "error_field", "format", "preset", "split",
            "num_rows", "columns", "sha256", "size_bytes", "stats", "stats_model", "source_name", "visibility",
            "created",
        ]
        read_only_fields = fields


class DatasetUploadSerializer(serializers.Serializer):
    file = serializers.FileField(allow_empty_file=True)
    name = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    preset = serializers.ChoiceField(choices=PRESETS, required=False, default="auto")
    split = serializers.ChoiceField(choices=Dataset.Split.values, required=False, default="train")
    stats_model = serializers.IntegerField(required=False, allow_null=True, default=None)


class ModelAssetSerializer(serializers.ModelSerializer):
    owner = serializers.CharField(source="owner.username", read_only=True)

    class Meta:
        model = ModelAsset
        fields = ["id", "name", "owner", "path", "tokenizer_ok", "num_parameters", "source", "source_run",
                  "visibility", "trust_remote_code", "kind", "architecture", "dtype", "shards", "chat_family",
                  "tool_parser", "stop_tokens", "check_report", "note", "created"]
        read_only_fields = fields


class ModelRegisterSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    path = serializers.CharField(max_length=1024)


class CatalogUpdateSerializer(serializers.Serializer):
    """PATCH of a dataset or model: rename (owner or staff), share / unshare (staff)."""

    name = serializers.CharField(max_length=200, required=False)
    visibility = serializers.ChoiceField(choices=Visibility.values, required=False)


class RewardCheckSerializer(serializers.Serializer):
    reward = serializers.CharField(max_length=100, default="default")
    tools = serializers.ListField(child=serializers.CharField(max_length=100), required=False, default=list)
    rows = serializers.IntegerField(min_value=1, max_value=20, default=3)
    model = serializers.IntegerField(required=False, allow_null=True, default=None,
                                     help_text="a model id: tool calls are written in its chat format")
