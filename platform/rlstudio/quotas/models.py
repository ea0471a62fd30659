"""GPU quotas: one row per user with a quota of their own, plus one default row for everyone else."""
from django.conf import settings
from django.db import models


def default_max_queued_runs() -> int:
    """What a new quota row's max_queued_runs starts at (RLSTUDIO_DEFAULT_MAX_QUEUED_RUNS)."""
    return settings.RLSTUDIO_DEFAULT_MAX_QUEUED_RUNS


# The default quota the platform ships with (migration 0002 creates it; quota_for puts it back if deleted).
SHIPPED_DEFAULT = {"max_gpus": 1, "gpu_hours_per_month": 100.0, "max_concurrent_runs": 2}


class GpuQuota(models.Model):
    """Limits for one user (`user` set) or the default for users without a row (`is_default`)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="gpu_quota"
    )
    is_default = models.BooleanField(default=False)
    max_gpus = models.IntegerField(default=1, help_text="GPUs held at once.")
    gpu_hours_per_month = models.FloatField(default=100.0)
    max_concurrent_runs = models.IntegerField(default=2)
    max_queued_runs = models.IntegerField(
        default=default_max_queued_runs,
        help_text="Runs waiting in the queue at once; a launch past it is refused (staff included).",
    )
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "GPU quota"
        constraints = [
            models.CheckConstraint(condition=models.Q(max_gpus__gte=0), name="gpuquota_max_gpus_nonneg"),
            models.CheckConstraint(
                condition=models.Q(gpu_hours_per_month__gte=0), name="gpuquota_gpu_hours_nonneg"
            ),
            models.CheckConstraint(
                condition=models.Q(max_concurrent_runs__gte=0), name="gpuquota_max_runs_nonneg"
            ),
            models.CheckConstraint(
                condition=models.Q(max_queued_runs__gte=0), name="gpuquota_max_queued_nonneg"
            ),
            # Either a user's row or the default row, never both nor neither.
            models.CheckConstraint(
                condition=(models.Q(user__isnull=True, is_default=True) | models.Q(user__isnull=False, is_default=False)),
                name="gpuquota_user_xor_default",
            ),
            models.UniqueConstraint(fields=["is_default"], condition=models.Q(is_default=True), name="gpuquota_one_default"),
        ]

    def __str__(self) -> str:
        who = "default" if self.is_default else str(self.user)
        gpus = f"{self.max_gpus} GPU" + ("" if self.max_gpus == 1 else "s")
        runs = f"{self.max_concurrent_runs} run" + ("" if self.max_concurrent_runs == 1 else "s")
        return (f"{who}: {gpus}, {self.gpu_hours_per_month:g} GPU-h/month, {runs}, "
                f"{self.max_queued_runs} queued")
