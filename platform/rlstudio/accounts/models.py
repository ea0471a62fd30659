"""Records of the accounts app: personal API tokens, the audit log, and `Team`, Django's auth `Group`
under the name the platform gives it (a proxy: no table of its own)."""
from django.conf import settings
from django.contrib.auth.models import Group
from django.db import models


class ApiToken(models.Model):
    """A personal API token. Only the sha256 of the key is stored; the key is shown once."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, blank=True)
    key_prefix = models.CharField(max_length=16, help_text="The first characters, to recognise a key.")
    key_hash = models.CharField(max_length=64, unique=True, help_text="sha256 hex of the key.")
    created = models.DateTimeField(auto_now_add=True)
    last_used = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created"]
        verbose_name = "API token"  # the admin's list says "API tokens", not Django's "Api tokens"

    def __str__(self) -> str:
        return f"{self.user} · {self.name or self.key_prefix}"


class AuditEvent(models.Model):
    """Who did what to which object, and when (launch, stop, transition, quota change, ...)."""

    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
        related_name="audit_events",
    )
    action = models.CharField(max_length=64)
    object_type = models.CharField(max_length=64, blank=True)
    object_id = models.CharField(max_length=64, blank=True)
    data = models.JSONField(default=dict, blank=True)
    time = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-time", "-id"]
        indexes = [models.Index(fields=["object_type", "object_id"], name="audit_object_idx")]

    def __str__(self) -> str:
        return f"{self.time:%Y-%m-%d %H:%M:%S} {self.actor or 'system'} {self.action} {self.object_type}#{self.object_id}"


class Team(Group):
    """A team is a Django auth `Group` (a proxy, the same rows): staff make teams and set their members
    in the admin; an owner shares a run or a project with a team they are in (`Run.shared_with_teams`,
    `Project.shared_with_teams`), and every member reads it for as long as they are one."""

    class Meta:
        proxy = True
        verbose_name = "team"
        verbose_name_plural = "teams"
