"""Quotas: one row per user with a quota of their own, plus one default row for everyone else; each
row holds the GPU limits and the dataset storage allowed (`dataset_storage_gb`)."""
from django.conf import settings
from django.db import models


def default_max_queued_runs() -> int:
    """What a new quota row's max_queued_runs starts at (RLSTUDIO_DEFAULT_MAX_QUEUED_RUNS)."""
    return settings.RLSTUDIO_DEFAULT_MAX_QUEUED_RUNS


def default_dataset_storage_gb() -> float:
    """What a new quota row's dataset_storage_gb starts at (RLSTUDIO_DEFAULT_DATASET_STORAGE_GB)."""
    return settings.RLSTUDIO_DEFAULT_DATASET_STORAGE_GB


BYTES_PER_GB = 10**9  # dataset storage is counted in decimal gigabytes

# The default quota the platform ships with (migration 0002 creates it; quota_for puts it back if deleted;
# max_queued_runs and dataset_storage_gb come from their settings, as the fields' defaults).
SHIPPED_DEFAULT = {"max_gpus": 1, "gpu_hours_per_month": 100.0, "max_concurrent_runs": 2}

US_PER_HOUR = 3_600_000_000  # microseconds in an hour (GPU-time is counted in GPU-microseconds)


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
    dataset_storage_gb = models.FloatField(
        default=default_dataset_storage_gb,
        help_text="Dataset storage in GB (10^9 bytes): an upload past it is refused; 0 = no new uploads "
                  "(staff included).",
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
            models.CheckConstraint(
                condition=models.Q(dataset_storage_gb__gte=0), name="gpuquota_dataset_storage_nonneg"
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
                f"{self.max_queued_runs} queued, {self.dataset_storage_gb:g} GB of datasets")


class GpuHoursSpent(models.Model):
    """GPU-time a deleted job (a run, or an evaluation: deleted on its own, with its run or with its
    catalog model) held in one calendar month, kept so that the month's GPU-hours (the budget:
    `selectors.month_gpu_hours_by_owner`) still count it.

    One row per deleted job and month it held GPUs in, written by the platform in the transaction that
    deletes the job (`services._keep`, through the deleting app's hook), never by a user (no API,
    read-only in the admin).
    Per job rather than one running total per user and month: rows are only ever inserted (two
    deletions never contend for one row), and each says which job it was. The time is kept exact, in
    GPU-microseconds (GPUs × microseconds held within the month, as the selectors count a job's
    record), so a month's figure after a deletion equals the figure before it, to the float.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="gpu_hours_spent")
    month = models.DateField(help_text="The first day of the month (UTC, as the budget's month).")
    gpu_microseconds = models.BigIntegerField(help_text="GPUs × microseconds held within the month.")
    job = models.CharField(max_length=300, help_text="The deleted job, e.g. run #12 “name”.")
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "GPU-hours of a deleted job"
        verbose_name_plural = "GPU-hours of deleted jobs"
        ordering = ["-month", "-id"]
        indexes = [models.Index(fields=["month", "user"], name="gpuhoursspent_month_user")]
        constraints = [
            models.CheckConstraint(condition=models.Q(gpu_microseconds__gt=0), name="gpuhoursspent_positive"),
        ]

    @property
    def gpu_hours(self) -> float:
        return self.gpu_microseconds / US_PER_HOUR

    def __str__(self) -> str:
        return f"{self.user}: {self.gpu_hours:.2f} GPU-h in {self.month:%Y-%m} ({self.job})"



class TeamQuota(models.Model):
    """The GPU limits a team's members share (one row per team; a team without one has no team limit):
    the GPUs its members hold at once, all their active runs and running evaluations together, and the
    GPU-hours they use in a calendar month together. Admission checks it next to each member's own
    quota (`rlstudio.quotas.team_quotas`); staff set it in the admin (`team_quota_set`, audited)."""

    team = models.OneToOneField("auth.Group", on_delete=models.CASCADE, related_name="team_quota",
                                help_text="The team (Django's auth group) whose members share these limits.")
    max_gpus = models.IntegerField(default=8, help_text="GPUs the team's members hold at once, together.")
    gpu_hours_per_month = models.FloatField(
        default=1000.0, help_text="GPU-hours the team's current members use in a calendar month (UTC), together.")
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "team GPU quota"
        constraints = [
            models.CheckConstraint(condition=models.Q(max_gpus__gte=0), name="teamquota_max_gpus_nonneg"),
            models.CheckConstraint(condition=models.Q(gpu_hours_per_month__gte=0), name="teamquota_gpu_hours_nonneg"),
        ]

    def __str__(self) -> str:
        gpus = f"{self.max_gpus} GPU" + ("" if self.max_gpus == 1 else "s")
        return f"team {self.team.name}: {gpus}, {self.gpu_hours_per_month:g} GPU-h/month"
