"""API representations of sweeps."""
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from rlstudio.runs.serializers import RETENTION_HELP, RunCreateSerializer

from .models import Sweep, SweepMode


class SweepCreateSerializer(RunCreateSerializer):
    """POST /api/v1/sweeps/: a run launch's body (the base config every run starts from) plus `axes`,
    `mode` and, for random search, `runs` and `seed`, and every run's `retention`; a launch field the
    sweep service does not take is
    left out (None), never accepted and ignored. `axes`, `runs` and `seed` are checked by the service,
    which names the field (`axes[1].min`, `runs`, `seed`)."""

    project = None

    name = serializers.CharField(max_length=100, help_text="Each run is named <name>/<key=value,...>.")
    axes = serializers.JSONField(help_text='[{"key": "actor_rollout_ref.actor.optim.lr", "values": [1e-6, 3e-6]}, ...]: '
                                           "1 to 4 axes; grid: one run per combination. Random search also takes "
                                           'ranges: {"key": ..., "min": 1e-7, "max": 1e-5, "scale": "log", '
                                           '"type": "float"}')
    mode = serializers.ChoiceField(choices=SweepMode.choices, default=SweepMode.GRID,
                                   help_text="grid: every combination; random: `runs` points drawn from the axes")
    runs = serializers.JSONField(required=False, default=None, allow_null=True,
                                 help_text="Random search: how many runs to draw (1 to RLSTUDIO_MAX_SWEEP_RUNS)")
    retention = serializers.JSONField(required=False, allow_null=True, help_text="Each run's: " + RETENTION_HELP)
    seed = serializers.JSONField(required=False, default=None, allow_null=True,
                                 help_text="Random search: the seed to draw with (0 to 2147483647); none: the "
                                           "server picks one and stores it")


class SweepSerializer(serializers.ModelSerializer):
    owner = serializers.CharField(source="owner.username", read_only=True)
    run_count = serializers.IntegerField(read_only=True)

    class Meta:
        model = Sweep
        fields = ["id", "name", "owner", "mode", "seed", "dataset", "val_dataset", "model", "gpus", "axes",
                  "run_count", "created"]
        read_only_fields = fields


class SweepRunRowSerializer(serializers.Serializer):
    index = serializers.IntegerField()
    params = serializers.JSONField(help_text="The run's axis values, {key: value}.")
    run = serializers.IntegerField(source="run.pk")
    name = serializers.CharField(source="run.name")
    status = serializers.CharField(source="run.status")
    step = serializers.IntegerField(source="run.step")
    total_steps = serializers.IntegerField(source="run.total_steps", allow_null=True)
    latest_reward = serializers.FloatField(source="reward", allow_null=True,
                                           help_text="The latest critic/score/mean, null before any.")
    latest_metrics = serializers.SerializerMethodField()
    held_out = serializers.JSONField(help_text="{val-core metric: {best, best_step, last, last_step}}")
    best = serializers.BooleanField(help_text="The best run on the sweep's `metric`.")

    @extend_schema_field(OpenApiTypes.OBJECT)
    def get_latest_metrics(self, row) -> dict | None:
        return getattr(row.run, "latest_metrics", None)


class SweepDetailSerializer(SweepSerializer):
    """A sweep with its base config and one row per run (answers GET /api/v1/sweeps/{id}/ and the launch)."""

    base_config = serializers.JSONField(read_only=True)
    metric = serializers.SerializerMethodField(help_text="What the best run is chosen by: reward or a held-out metric.")
    runs = serializers.SerializerMethodField()

    class Meta(SweepSerializer.Meta):
        fields = SweepSerializer.Meta.fields + ["base_config", "metric", "runs"]
        read_only_fields = fields

    @extend_schema_field(OpenApiTypes.STR)
    def get_metric(self, sweep) -> str:
        return self.context["table"].metric

    @extend_schema_field(SweepRunRowSerializer(many=True))
    def get_runs(self, sweep) -> list:
        return SweepRunRowSerializer(self.context["table"].rows, many=True).data


class SweepStoppedSerializer(serializers.Serializer):
    stopped = serializers.ListField(child=serializers.IntegerField(), help_text="Runs stopped or cancelled.")
    refused = serializers.DictField(child=serializers.CharField(),
                                    help_text="{run id: why it could not be stopped now}")
