"""API representations of runs and saved configs."""
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from .models import Run, RunConfig
from .selectors import latest_reward


class RunConfigSerializer(serializers.ModelSerializer):
    owner = serializers.CharField(source="owner.username", read_only=True)

    class Meta:
        model = RunConfig
        fields = ["id", "name", "owner", "description", "config", "created"]
        read_only_fields = fields


class RunSerializer(serializers.ModelSerializer):
    owner = serializers.CharField(source="owner.username", read_only=True)
    checkpoint = serializers.CharField(source="checkpoint_path", read_only=True)
    latest_metrics = serializers.SerializerMethodField()
    latest_reward = serializers.SerializerMethodField()

    class Meta:
        model = Run
        fields = [
            "id", "name", "owner", "status", "queue_reason", "step", "total_steps", "latest_reward",
            "latest_metrics", "gpus", "dataset", "val_dataset", "model", "created", "started",
            "finished", "last_heartbeat", "error", "checkpoint", "parent", "parent_kind",
        ]
        read_only_fields = fields

    @extend_schema_field(OpenApiTypes.OBJECT)
    def get_latest_metrics(self, run: Run) -> dict | None:
        return getattr(run, "latest_metrics", None)

    @extend_schema_field(OpenApiTypes.DOUBLE)
    def get_latest_reward(self, run: Run) -> float | None:
        return latest_reward(run)


class RunDetailSerializer(RunSerializer):
    """A run with its frozen config snapshot."""

    class Meta(RunSerializer.Meta):
        fields = RunSerializer.Meta.fields + ["config"]
        read_only_fields = fields
