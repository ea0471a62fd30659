"""API representation of a user's quota and usage."""
from rest_framework import serializers


class QueuedRunSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    position = serializers.IntegerField(help_text="Place in the whole queue, 1 = next.")
    reason = serializers.CharField()


class QuotaUsageSerializer(serializers.Serializer):
    max_gpus = serializers.IntegerField()
    gpus_held = serializers.IntegerField()
    gpu_hours_per_month = serializers.FloatField()
    gpu_hours_this_month = serializers.FloatField()
    max_concurrent_runs = serializers.IntegerField()
    runs_active = serializers.IntegerField(help_text="Runs submitting, running or stopping.")
    max_queued_runs = serializers.IntegerField(
        help_text="Queued runs allowed at once; a launch past it is refused (`queued` lists them).")
    is_default = serializers.BooleanField(help_text="True when the default quota applies.")
    queued = QueuedRunSerializer(many=True)
