"""Records of alerts: rules, a run's rolling rule state, firings, notifications and their settings,
the operators' webhook endpoints and the log of what was delivered to them."""
from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models

from .rules import CATALOGUE, OPS

NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}"
name_validator = RegexValidator(rf"^{NAME_PATTERN}\Z", "a name is 1-64 letters, digits, '_' or '-', "
                                "starting with a letter or digit")
# A webhook's secret is never stored: the endpoint names the environment variable that holds it.
SECRET_ENV_PATTERN = r"RLSTUDIO_WEBHOOK_SECRET_[A-Z0-9_]{1,64}"
secret_env_validator = RegexValidator(rf"^{SECRET_ENV_PATTERN}\Z",
                                      "an environment variable named RLSTUDIO_WEBHOOK_SECRET_<A-Z, 0-9, _>")


class WebhookEndpoint(models.Model):
    """An address notifications may be POSTed to, registered by an operator (staff, Django admin).

    Users choose one by `name`; they never type an address. The body is signed with HMAC-SHA256 under
    the secret in the environment variable `secret_env` (read by the process that delivers)."""

    name = models.CharField(max_length=64, unique=True, validators=[name_validator])
    description = models.TextField(blank=True)
    url = models.URLField(max_length=1000, help_text="http(s) URL the JSON body is POSTed to.")
    secret_env = models.CharField(max_length=100, validators=[secret_env_validator],
                                  help_text="The environment variable holding the signing secret "
                                            "(RLSTUDIO_WEBHOOK_SECRET_...), set for the web and Celery processes.")
    body_format = models.CharField(
        max_length=8, choices=[("full", "text + the notification as JSON (rlstudio)"), ("slack", "text only")],
        default="full", help_text="slack: only Slack's `text` field; full: `text` and an `rlstudio` object with "
                                  "the notification's fields (for your own receiver).")
    enabled = models.BooleanField(default=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


KIND_CHOICES = [(k, spec.title) for k, spec in CATALOGUE.items()]
OP_CHOICES = [("", "(the kind's own)")] + [(op, op) for op in OPS]


class AlertRule(models.Model):
    """One rule of a user: for one run (`run` set) or a default for all their runs (`run` empty).

    A run's rules are its own plus its owner's defaults that no own rule of the same kind and metric
    replaces (a disabled own rule mutes a default). Actions: an in-app notification always; e-mail,
    a webhook (an operator's, by name) and `pause` (stop with a checkpoint) when chosen."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="alert_rules")
    run = models.ForeignKey("runs.Run", null=True, blank=True, on_delete=models.CASCADE, related_name="alert_rules")
    kind = models.CharField(max_length=32, choices=KIND_CHOICES)
    metric = models.CharField(max_length=200, blank=True)
    op = models.CharField(max_length=16, blank=True, choices=OP_CHOICES)
    threshold = models.FloatField()
    window = models.PositiveIntegerField(default=1)
    enabled = models.BooleanField(default=True)
    email = models.BooleanField(default=False)
    webhook = models.ForeignKey(WebhookEndpoint, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    pause = models.BooleanField(default=False, help_text="Stop the run with a checkpoint when it fires.")
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["run_id", "kind", "metric", "id"]
        indexes = [models.Index(fields=["owner", "run"])]

    def __str__(self) -> str:
        where = f"run {self.run_id}" if self.run_id else "default"
        return f"{self.kind} {self.metric} ({where})".replace("  ", " ")


class RunAlertState(models.Model):
    """A run's rolling rule state (rules.evaluate's dict) and what has been said about it already
    (`flags`: heartbeat silence, budget warnings, waited in the queue), one row per run."""

    run = models.OneToOneField("runs.Run", on_delete=models.CASCADE, primary_key=True, related_name="alert_state")
    state = models.JSONField(default=dict)
    version = models.BigIntegerField(default=0, help_text="Bumped by every write of `state` (the ingest's cache check).")
    flags = models.JSONField(default=dict)
    updated = models.DateTimeField(auto_now=True)


class AlertFiring(models.Model):
    """One time a rule fired on a run: the step, the metric values that made it, what was done.

    Drawn as a marker on the run's charts; visible to whoever may see the run."""

    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="alert_firings")
    rule = models.ForeignKey(AlertRule, null=True, blank=True, on_delete=models.SET_NULL, related_name="firings")
    kind = models.CharField(max_length=32)
    metric = models.CharField(max_length=200, blank=True)
    step = models.IntegerField(null=True, blank=True)
    values = models.JSONField(default=dict)
    message = models.TextField()
    paused = models.BooleanField(default=False, help_text="The run was stopped with a checkpoint because of it.")
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["run", "id"])]


class NotificationKind(models.TextChoices):
    ALERT = "alert", "alert"
    LIFECYCLE = "lifecycle", "run lifecycle"
    BUDGET = "budget", "budget"


class NotificationLevel(models.TextChoices):
    INFO = "info", "info"
    WARNING = "warning", "warning"
    CRITICAL = "critical", "critical"


class Notification(models.Model):
    """Something a user is told: shown in the page header's notification centre (live over the
    websocket), and e-mailed or POSTed to a webhook when their settings or the rule say so."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notifications")
    run = models.ForeignKey("runs.Run", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    firing = models.ForeignKey(AlertFiring, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    kind = models.CharField(max_length=16, choices=NotificationKind.choices)
    event = models.CharField(max_length=32, help_text="alert: the rule's kind; lifecycle: finished, failed, "
                                                      "stopped, lost, started; budget: run_warn, run_stop, month_warn, month_stop")
    level = models.CharField(max_length=16, choices=NotificationLevel.choices, default=NotificationLevel.INFO)
    title = models.CharField(max_length=300)
    body = models.TextField(blank=True)
    email = models.BooleanField(default=False, help_text="To be e-mailed.")
    webhook = models.ForeignKey(WebhookEndpoint, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    emailed = models.DateTimeField(null=True, blank=True)
    read = models.BooleanField(default=False)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["user", "read", "id"])]


LIFECYCLE_EVENTS = ("started", "finished", "failed", "stopped", "lost")
CHANNELS = ("app", "email", "webhook")


def default_routes() -> dict:
    """Where each lifecycle event goes until the user says otherwise."""
    return {"started": ["app"], "finished": ["app", "email"], "failed": ["app", "email"],
            "stopped": ["app"], "lost": ["app", "email"]}


class NotificationSettings(models.Model):
    """A user's choice of where each lifecycle event goes (`routes`: {event: [channel, ...]}, channels
    app / email / webhook) and which operator webhook `webhook` means for them. The monthly quota's
    warnings are e-mailed when failures are."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, primary_key=True,
                                related_name="notification_settings")
    routes = models.JSONField(default=default_routes)
    webhook = models.ForeignKey(WebhookEndpoint, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    month_notices = models.JSONField(default=dict, help_text="{'YYYY-MM': 'warn' | 'stop'}: what the monthly "
                                                             "GPU-hour quota watch has said this month.")
    updated = models.DateTimeField(auto_now=True)


class DeliveryStatus(models.TextChoices):
    PENDING = "pending", "pending"
    DELIVERED = "delivered", "delivered"
    FAILED = "failed", "failed"


class WebhookDelivery(models.Model):
    """One notification POSTed to one endpoint: every attempt counted, the last answer kept."""

    endpoint = models.ForeignKey(WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries")
    notification = models.ForeignKey(Notification, on_delete=models.CASCADE, related_name="deliveries")
    status = models.CharField(max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    response_status = models.IntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    body = models.JSONField(default=dict, help_text="What was sent (the same bytes every attempt).")
    created = models.DateTimeField(auto_now_add=True)
    last_attempt = models.DateTimeField(null=True, blank=True)
    delivered = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        verbose_name_plural = "webhook deliveries"  # Django's default adds an s: "deliverys"
        constraints = [models.UniqueConstraint(fields=["endpoint", "notification"], name="one_delivery_per_endpoint")]
