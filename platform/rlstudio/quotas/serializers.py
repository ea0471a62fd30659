"""API representation of a user's quota and usage."""
from rest_framework import serializers


class QueuedRunSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    position = serializers.IntegerField(help_text="Place in the whole queue of runs and evaluations, 1 = next.")
    reason = serializers.CharField()


class QueuedEvaluationSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    position = serializers.IntegerField(help_text="Place in the whole queue of runs and evaluations, 1 = next.")
    reason = serializers.CharField()
    run = serializers.IntegerField(allow_null=True, help_text="The run evaluated (null: a catalog model's).")
    model = serializers.IntegerField(allow_null=True, help_text="The catalog model evaluated (null: a run's).")


class TeamUsageSerializer(serializers.Serializer):
    name = serializers.CharField(help_text="The team's name.")
    members = serializers.IntegerField(help_text="Its members now, whose jobs count toward its limits.")
    max_gpus = serializers.IntegerField(help_text="GPUs the team's members may hold at once, together.")
    gpus_held = serializers.IntegerField(help_text="GPUs its members' active runs and running evaluations hold.")
    gpu_hours_per_month = serializers.FloatField(help_text="GPU-hours its members may use a month, together.")
    gpu_hours_this_month = serializers.FloatField(
        help_text="GPU-hours its current members used since the 1st (UTC), deleted jobs' included.")


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
    dataset_storage_gb = serializers.FloatField(
        help_text="Dataset storage allowed, in GB (10^9 bytes); an upload past it is refused (413, code "
                  "storage_quota); 0 = no new uploads.")
    dataset_storage_used_bytes = serializers.IntegerField(
        help_text="Bytes the caller's datasets keep: the uploaded files of their datasets that are not invalid, "
                  "each distinct content once, plus each one's converted rows.")
    queued = QueuedRunSerializer(many=True)
    queued_evaluations = QueuedEvaluationSerializer(
        many=True, help_text="The caller's queued evaluation (at most one), in the same queue as the runs.")
    teams = TeamUsageSerializer(
        many=True, help_text="The caller's teams that have a team quota, by name: limits their members share.")
