"""Records of exports: one checkpoint (a global step) of a run turned into a Hugging Face folder in the
run's own folder (`exports/step_<N>/`), its state, and the catalog model it was registered as."""
from django.conf import settings
from django.db import models


class ExportStatus(models.TextChoices):
    QUEUED = "queued", "queued"
    RUNNING = "running", "running"
    SUCCEEDED = "succeeded", "succeeded"
    FAILED = "failed", "failed"


ACTIVE_EXPORT_STATUSES = frozenset({ExportStatus.QUEUED, ExportStatus.RUNNING})


class Export(models.Model):
    """The export of checkpoint `step` of `run` (one per run and step; a failed one is queued again).

    Paths are never stored: the folder is `exports/step_<step>/` inside the run's folder, found again
    from the run's record (rlstudio.runs.launch.run_folder) each time it is needed."""

    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="exports")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="exports",
                              help_text="Who asked for it (the run's owner or staff).")
    step = models.PositiveIntegerField()
    status = models.CharField(max_length=16, choices=ExportStatus.choices, default=ExportStatus.QUEUED)
    error = models.TextField(blank=True)  # why it failed: no server paths (rlstudio.runs.failure)
    error_log = models.TextField(
        blank=True, help_text="A failed export's error as it was and its traceback (the run's owner's and staff's only)."
    )
    lora = models.BooleanField(default=False, help_text="A LoRA checkpoint: the folder holds the adapter too.")
    files = models.JSONField(default=list, blank=True, help_text="The files written, relative to the folder.")
    size_bytes = models.BigIntegerField(null=True, blank=True)
    model = models.ForeignKey("catalog.ModelAsset", null=True, blank=True, on_delete=models.SET_NULL,
                              related_name="exports", help_text="Its catalog entry (registered for the run's owner).")
    created = models.DateTimeField(auto_now_add=True)
    sent = models.DateTimeField(null=True, blank=True,
                                help_text="When its task was last sent to the workers' queue (recovery re-sends a lost one).")
    started = models.DateTimeField(null=True, blank=True)
    finished = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["run", "step"], name="export_run_step_unique"),
            models.CheckConstraint(condition=models.Q(status__in=ExportStatus.values), name="export_status_valid"),
        ]

    def __str__(self) -> str:
        return f"export of run {self.run_id} step {self.step}"
