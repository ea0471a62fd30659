"""Records of playground sessions: one conversation sent to one or two targets (a catalog model or a
run's checkpoint), its bounded settings, and what each target answered."""
from django.conf import settings
from django.db import models


class SessionStatus(models.TextChoices):
    QUEUED = "queued", "queued"  # waiting for a worker
    RUNNING = "running", "running"
    SUCCEEDED = "succeeded", "succeeded"  # every target answered (one may have failed: see results)
    STOPPED = "stopped", "stopped"  # the page was left, Stop was pressed, or the time limit came
    FAILED = "failed", "failed"


ACTIVE_SESSION_STATUSES = frozenset({SessionStatus.QUEUED, SessionStatus.RUNNING})


class PlaygroundSession(models.Model):
    """`targets`: [{"key": "a"|"b", "kind": "model"|"checkpoint", "model": id | None, "run": id | None,
    "step": int | None, "label": str}] (ids only: paths are found again from the catalog and the run's
    own folder when the session runs); `messages`: {key: [{"role", "content"}]}; `settings`: the
    bounded sampling settings and tools on/off; `results`: {key: the target's last event ("done" with
    its turns, "stopped" or "error")}."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="playground_sessions")
    targets = models.JSONField(default=list)
    messages = models.JSONField(default=dict)
    settings = models.JSONField(default=dict)
    status = models.CharField(max_length=16, choices=SessionStatus.choices, default=SessionStatus.QUEUED)
    stop_reason = models.CharField(max_length=100, blank=True)
    error = models.TextField(blank=True)
    results = models.JSONField(default=dict, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    started = models.DateTimeField(null=True, blank=True)
    finished = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created", "-id"]
        constraints = [models.CheckConstraint(condition=models.Q(status__in=SessionStatus.values),
                                              name="playground_status_valid")]
        indexes = [models.Index(fields=["owner", "status"], name="playground_owner_status")]

    def __str__(self) -> str:
        return f"playground session {self.pk} of {self.owner}"
