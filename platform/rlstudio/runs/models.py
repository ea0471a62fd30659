"""Records of the runs app: saved configs (templates) and runs with their frozen config, their tags
and note, and who else may read them (shared read-only with some users or with everyone)."""
from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.db import models


class RunConfig(models.Model):
    """A saved, named trainer config a user can launch again or clone."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="run_configs")
    name = models.CharField(max_length=200)
    config = models.JSONField(default=dict)
    description = models.TextField(blank=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created", "-id"]
        constraints = [models.UniqueConstraint(fields=["owner", "name"], name="runconfig_owner_name_unique")]

    def __str__(self) -> str:
        return self.name


class RunStatus(models.TextChoices):
    """Run states; transitions between them live in `rlstudio.runs.services` only."""

    QUEUED = "queued", "queued"
    SUBMITTING = "submitting", "submitting"
    RUNNING = "running", "running"
    STOPPING = "stopping", "stopping"
    STOPPED = "stopped", "stopped"
    SUCCEEDED = "succeeded", "succeeded"
    FAILED = "failed", "failed"
    LOST = "lost", "lost"


TERMINAL_STATUSES = frozenset({RunStatus.STOPPED, RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.LOST})
# States in which a run holds its devices (quota usage counts these).
ACTIVE_STATUSES = frozenset({RunStatus.SUBMITTING, RunStatus.RUNNING, RunStatus.STOPPING})


class RunParentKind(models.TextChoices):
    """How a run was made from its parent: a resume continues from its last checkpoint with its config,
    a clone starts afresh from the model with its config (changed), a fork starts from one of its
    checkpoints with some settings changed (`trainer.config.fork.FORK_CHANGEABLE`)."""

    NONE = "", "none"
    RESUME = "resume", "resume"
    CLONE = "clone", "clone"
    FORK = "fork", "fork"


class RunVisibility(models.TextChoices):
    """Who besides the owner and staff reads a run: the users it is shared with, or everyone."""

    PRIVATE = "private", "private"
    EVERYONE = "everyone", "everyone"


# A run's tags and note (edited by its owner or staff; rlstudio.runs.services.sharing checks them).
MAX_TAGS = 20
MAX_TAG_LENGTH = 40
MAX_NOTE_LENGTH = 10_000


class Run(models.Model):
    """One training run: what it trains on, its frozen config, where it is in its life."""

    ParentKind = RunParentKind
    Visibility = RunVisibility

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="runs")
    name = models.CharField(max_length=200)
    dataset = models.ForeignKey("catalog.Dataset", on_delete=models.PROTECT, related_name="runs")
    val_dataset = models.ForeignKey(
        "catalog.Dataset", null=True, blank=True, on_delete=models.PROTECT, related_name="val_runs"
    )
    model = models.ForeignKey("catalog.ModelAsset", on_delete=models.PROTECT, related_name="runs")
    reward_model = models.ForeignKey(
        "catalog.ModelAsset", null=True, blank=True, on_delete=models.PROTECT, related_name="reward_runs",
        help_text="The catalog reward model (kind reward) the run scores with (reward_model.model.path).",
    )
    config = models.JSONField(default=dict, help_text="Frozen snapshot handed to the trainer.")
    gpus = models.IntegerField(default=0)
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.QUEUED, db_index=True)
    queue_reason = models.CharField(max_length=300, blank=True)
    queue_priority = models.IntegerField(
        default=0,
        help_text="Admission order among queued runs: higher first, then oldest first (staff move a run "
                  "to the front or back of the queue).",
    )
    ray_submission_id = models.CharField(max_length=128, unique=True, null=True, blank=True)
    ingest_token_hash = models.CharField(max_length=64, blank=True)
    step = models.IntegerField(default=0)
    total_steps = models.IntegerField(null=True, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    started = models.DateTimeField(null=True, blank=True)
    finished = models.DateTimeField(null=True, blank=True)
    last_heartbeat = models.DateTimeField(null=True, blank=True)
    stop_requested = models.DateTimeField(
        null=True, blank=True, help_text="When a graceful stop was asked (the force-stop grace counts from it)."
    )
    submit_requested = models.DateTimeField(
        null=True, blank=True,
        help_text="When the submit task was last sent (the reconcile's submit timeout counts from it).",
    )
    submit_resends = models.PositiveSmallIntegerField(
        default=0, help_text="How many times the reconcile re-sent a lost submit task in this submitting phase."
    )
    error = models.TextField(blank=True)  # why it failed: no server paths (runs.failure)
    error_log = models.TextField(
        blank=True, help_text="A failed run's job log tail or traceback (its owner's and staff's only)."
    )
    checkpoint_path = models.CharField(max_length=1024, blank=True)
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children")
    parent_kind = models.CharField(max_length=8, choices=RunParentKind.choices, blank=True, default="")
    tool_set = models.CharField(
        max_length=64, blank=True, help_text="The operator-registered tool set the run offers (by name)."
    )
    resume_from = models.CharField(
        max_length=1024, blank=True,
        help_text="The checkpoint a resumed or forked run starts from, recorded by the platform in the parent's folder.",
    )
    fork_changes = models.JSONField(
        null=True, blank=True,
        help_text="A fork's user keys changed from its parent's config when it was made: [{key, old, new}] "
                  "(null for any other run).",
    )
    tags = ArrayField(models.CharField(max_length=MAX_TAG_LENGTH), default=list, blank=True,
                      help_text="Short labels the owner gives the run (the runs list filters by them).")
    note = models.TextField(blank=True, help_text="The owner's free-text note on the run.")
    visibility = models.CharField(
        max_length=16, choices=RunVisibility.choices, default=RunVisibility.PRIVATE,
        help_text="everyone: every signed-in user reads the run (never its controls).",
    )
    shared_with = models.ManyToManyField(
        settings.AUTH_USER_MODEL, blank=True, related_name="runs_shared_with_me",
        help_text="Users who read the run (its page, samples, transcripts); only the owner and staff control it.",
    )
    shared_with_teams = models.ManyToManyField(
        "auth.Group", blank=True, related_name="runs_shared_with_team",
        help_text="Teams whose members read the run as a user it is shared with does, for as long as "
                  "they are members; only the owner and staff control it.",
    )
    project = models.ForeignKey(
        "projects.Project", null=True, blank=True, on_delete=models.SET_NULL, related_name="runs",
        help_text="The owner's project the run is in; the project's share lets its users read the run.",
    )

    class Meta:
        ordering = ["-created", "-id"]
        indexes = [models.Index(fields=["owner", "status"], name="run_owner_status_idx"),
                   GinIndex(fields=["tags"], name="run_tags_gin")]
        constraints = [
            models.CheckConstraint(condition=models.Q(gpus__gte=0), name="run_gpus_nonneg"),
            models.CheckConstraint(condition=models.Q(step__gte=0), name="run_step_nonneg"),
            models.CheckConstraint(
                condition=models.Q(status__in=RunStatus.values), name="run_status_valid"
            ),
            models.CheckConstraint(
                condition=models.Q(parent_kind__in=RunParentKind.values),
                name="run_parent_kind_valid",
            ),
            models.CheckConstraint(
                condition=models.Q(visibility__in=RunVisibility.values), name="run_visibility_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.status})"

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES
