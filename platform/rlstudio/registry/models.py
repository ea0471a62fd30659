"""Records of the operator registries: reward functions and tool sets, each registered by staff,
checked before it is saved, and chosen by users by name (never by path or class)."""
from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models

# A registry name ends up in run configs (`reward.name`) and is shown in forms: letters, digits,
# "_" and "-", starting with a letter or digit (the runs gate accepts a superset of these).
NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}"
name_validator = RegexValidator(rf"^{NAME_PATTERN}\Z", "a name is 1-64 letters, digits, '_' or '-', "
                                "starting with a letter or digit")


class RegistryStatus(models.TextChoices):
    CHECKING = "checking", "checking"  # not (yet) checked: a row made outside the services
    READY = "ready", "ready"
    BROKEN = "broken", "broken"  # a re-check failed; runs cannot choose it until one passes


class RewardKind(models.TextChoices):
    FILE = "file", "file under a reward root"
    MODULE = "module", "importable module"


class RewardFunction(models.Model):
    """A reward function with verl's signature, `fn(data_source, solution_str, ground_truth,
    extra_info=None, **kwargs) -> float | dict`, from a file under RLSTUDIO_REWARD_ROOTS (`path`, the
    resolved real path) or an importable module (`module`), checked by scoring sample rows."""

    Kind = RewardKind
    Status = RegistryStatus

    name = models.CharField(max_length=64, unique=True, validators=[name_validator])
    description = models.TextField(blank=True)
    kind = models.CharField(max_length=8, choices=Kind.choices)
    path = models.CharField(max_length=1024, blank=True,
                            help_text="file: the resolved real path of the file, inside a reward root.")
    module = models.CharField(max_length=200, blank=True, help_text="module: a dotted module path.")
    function = models.CharField(max_length=100, default="compute_score")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.CHECKING)
    error = models.TextField(blank=True, help_text="Why the last check failed.")
    sample_rows = models.JSONField(default=list, blank=True,
                                   help_text="The rows the check scores: data_source, solution_str, ground_truth, "
                                             "extra_info, and optionally the expected score.")
    check_results = models.JSONField(default=list, blank=True,
                                     help_text="What the last check got: one {score, extra} per sample row.")
    checked_path = models.CharField(max_length=1024, blank=True, help_text="The file the last check loaded.")
    checked_sha256 = models.CharField(max_length=64, blank=True, help_text="That file's SHA-256 when checked.")
    checked = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=models.Q(status__in=RegistryStatus.values),
                                   name="reward_function_status_valid"),
            models.CheckConstraint(
                condition=(models.Q(kind=RewardKind.FILE, module="") & ~models.Q(path=""))
                | (models.Q(kind=RewardKind.MODULE, path="") & ~models.Q(module="")),
                name="reward_function_kind_fields",
                violation_error_message="a file reward function has a path and no module, a module one a "
                                        "module and no path",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def source(self) -> str:
        """Where the code is: the file path, or the module path."""
        return self.path if self.kind == RewardKind.FILE else self.module


class ToolSet(models.Model):
    """A verl tool-config YAML (`tools: [{class_name, config, tool_schema}]`) naming only tools of the
    trainer's registry; a run that chooses it gets the YAML written into its own folder."""

    Status = RegistryStatus

    name = models.CharField(max_length=64, unique=True, validators=[name_validator])
    description = models.TextField(blank=True)
    config_yaml = models.TextField(help_text="verl's tool_config: tools: [{class_name, config, tool_schema}]")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.CHECKING)
    error = models.TextField(blank=True)
    tools = models.JSONField(default=list, blank=True,
                             help_text="What the check built: [{name, class_name, description}].")
    checked = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=models.Q(status__in=RegistryStatus.values), name="tool_set_status_valid"),
        ]

    def __str__(self) -> str:
        return self.name
