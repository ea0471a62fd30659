"""Records of the sweeps app: a sweep (its base config, its axes, its mode and, for random search, its
seed) and its runs, one per point of the grid or per point drawn. A run reaches its sweep through the reverse one-to-one `run.sweep_run` (the runs app knows
nothing of sweeps)."""
from django.conf import settings
from django.db import models

MAX_SWEEP_NAME_LENGTH = 100


class SweepMode(models.TextChoices):
    """How the axes make the runs: `grid`, every combination of their values; `random`, points drawn at
random from them (lists and ranges, `sample.draw_points`)."""

    GRID = "grid", "grid"
    RANDOM = "random", "random search"


class Sweep(models.Model):
    """Runs launched together: one base config (the user's view, as a run keeps it: no platform keys)
    and `axes`, an ordered list of {"key": dotted config key, "values": [...]} or (random search only)
    {"key", "min", "max", "scale", "type"}; `seed` is what a random sweep drew its points with (null for
    a grid)."""

    Mode = SweepMode

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sweeps")
    name = models.CharField(max_length=MAX_SWEEP_NAME_LENGTH)
    dataset = models.ForeignKey("catalog.Dataset", on_delete=models.PROTECT, related_name="sweeps")
    val_dataset = models.ForeignKey("catalog.Dataset", null=True, blank=True, on_delete=models.PROTECT,
                                    related_name="val_sweeps")
    model = models.ForeignKey("catalog.ModelAsset", on_delete=models.PROTECT, related_name="sweeps")
    gpus = models.IntegerField(default=0, help_text="GPUs of each run.")
    base_config = models.JSONField(default=dict, help_text="The config every run starts from (the user's keys).")
    axes = models.JSONField(default=list, help_text='[{"key": "actor_rollout_ref.actor.optim.lr", "values": [...]}]')
    mode = models.CharField(max_length=8, choices=SweepMode.choices, default=SweepMode.GRID)
    seed = models.BigIntegerField(null=True, blank=True,
                                  help_text="The random sweep's seed: the same seed and axes draw the same points.")
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created", "-id"]
        constraints = [
            models.CheckConstraint(condition=models.Q(gpus__gte=0), name="sweep_gpus_nonneg"),
            models.CheckConstraint(condition=models.Q(mode__in=SweepMode.values), name="sweep_mode_valid"),
            models.CheckConstraint(condition=models.Q(mode=SweepMode.GRID, seed__isnull=True)
                                   | models.Q(mode=SweepMode.RANDOM, seed__gte=0), name="sweep_seed_iff_random"),
        ]

    def __str__(self) -> str:
        return self.name


class SweepRun(models.Model):
    """One run of a sweep: its place in the grid or the draw (`index`, from 0) and its axis values
    (`params`, {key: value} in the axes' order)."""

    sweep = models.ForeignKey(Sweep, on_delete=models.CASCADE, related_name="sweep_runs")
    run = models.OneToOneField("runs.Run", on_delete=models.CASCADE, related_name="sweep_run")
    index = models.PositiveIntegerField()
    params = models.JSONField(default=dict)

    class Meta:
        ordering = ["sweep", "index"]
        constraints = [models.UniqueConstraint(fields=["sweep", "index"], name="sweeprun_sweep_index_unique")]

    def __str__(self) -> str:
        return f"{self.sweep.name} #{self.index}"
