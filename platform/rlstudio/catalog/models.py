"""Records of the catalog: uploaded datasets and registered model checkpoints, each private to its
owner or shared with everyone (read-only for the others; only staff share or unshare)."""
from django.conf import settings
from django.db import models


class Visibility(models.TextChoices):
    PRIVATE = "private", "private"
    EVERYONE = "everyone", "everyone"


class DatasetPreset(models.TextChoices):
    AUTO = "auto", "auto"
    GSM8K = "gsm8k", "GSM8K"
    MESSAGES = "messages", "messages"
    VERL = "verl", "verl"


class DatasetSplit(models.TextChoices):
    TRAIN = "train", "train"
    VAL = "val", "val"


class DatasetStatus(models.TextChoices):
    VALIDATING = "validating", "validating"
    READY = "ready", "ready"
    INVALID = "invalid", "invalid"


class Dataset(models.Model):
    """An uploaded dataset file, stored by content hash, validated and converted by a preset."""

    Preset = DatasetPreset
    Split = DatasetSplit
    Status = DatasetStatus
    Visibility = Visibility

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="datasets")
    name = models.CharField(max_length=200)
    file_path = models.CharField(max_length=1024, help_text="Stored file, named by content hash.")
    sha256 = models.CharField(max_length=64, db_index=True)
    size_bytes = models.BigIntegerField(default=0)
    format = models.CharField(max_length=32, blank=True, help_text="jsonl, parquet, csv, hf_disk")
    preset = models.CharField(max_length=16, choices=Preset.choices, default=Preset.AUTO)
    split = models.CharField(max_length=8, choices=Split.choices, default=Split.TRAIN)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.VALIDATING)
    error = models.TextField(blank=True)
    num_rows = models.IntegerField(null=True, blank=True)
    columns = models.JSONField(default=list, blank=True)
    stats = models.JSONField(default=dict, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    # Added by the upload pipeline (issue 4).
    source_name = models.CharField(max_length=255, blank=True, help_text="The uploaded file's name.")
    converted_path = models.CharField(
        max_length=1024, blank=True, help_text="Absolute path of the converted rows (JSONL, trainer row format)."
    )
    row_index = models.JSONField(default=list, blank=True, help_text="Byte offsets of every 100th converted row.")
    converted_bytes = models.BigIntegerField(
        default=0, help_text="Size of the converted rows on disk (0 until they are written; counted in storage)."
    )
    error_line = models.IntegerField(null=True, blank=True, help_text="Line (or row) the error is on.")
    error_field = models.CharField(max_length=200, blank=True, help_text="Field the error is in.")
    stats_model = models.ForeignKey(
        "catalog.ModelAsset", null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
        help_text="The model whose tokenizer measured the prompt lengths.",
    )
    visibility = models.CharField(
        max_length=8, choices=Visibility.choices, default=Visibility.PRIVATE,
        help_text="private: its owner (and staff) only; everyone: every user may read it and launch runs on it.",
    )

    class Meta:
        ordering = ["-created", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(status__in=DatasetStatus.values), name="dataset_status_valid"
            ),
            models.CheckConstraint(
                condition=models.Q(preset__in=DatasetPreset.values), name="dataset_preset_valid"
            ),
            models.CheckConstraint(
                condition=models.Q(split__in=DatasetSplit.values), name="dataset_split_valid"
            ),
            models.CheckConstraint(condition=models.Q(size_bytes__gte=0), name="dataset_size_nonneg"),
            models.CheckConstraint(
                condition=models.Q(converted_bytes__gte=0), name="dataset_converted_bytes_nonneg"
            ),
            models.CheckConstraint(
                condition=models.Q(visibility__in=Visibility.values), name="dataset_visibility_valid"
            ),
        ]

    def __str__(self) -> str:
        return self.name


class ModelSource(models.TextChoices):
    REGISTERED = "registered", "registered"
    RUN_EXPORT = "run_export", "run export"


class ModelKind(models.TextChoices):
    POLICY = "policy", "policy"
    REWARD = "reward", "reward model"


class ModelAsset(models.Model):
    """A Hugging Face–format checkpoint (local path or URI) runs can start from, or (kind reward) a
    sequence-classification reward model runs can score with."""

    Source = ModelSource
    Visibility = Visibility
    Kind = ModelKind

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="model_assets")
    name = models.CharField(max_length=200)
    path = models.CharField(max_length=1024)
    tokenizer_ok = models.BooleanField(default=False)
    num_parameters = models.BigIntegerField(null=True, blank=True)
    source = models.CharField(max_length=16, choices=Source.choices, default=Source.REGISTERED)
    trust_remote_code = models.BooleanField(
        default=False,
        help_text="Let runs import Python code shipped in the model folder (an operator decision: staff only).",
    )
    source_run = models.ForeignKey(
        "runs.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="exported_models"
    )
    # What the registration check found (catalog.modelcheck): the checkpoint and its chat format.
    kind = models.CharField(
        max_length=8, choices=ModelKind.choices, default=ModelKind.POLICY,
        help_text="policy: a causal LM runs train; reward: a sequence-classification model (one label) runs "
                  "score trajectories with (reward_model).")
    architecture = models.CharField(max_length=100, blank=True)
    dtype = models.CharField(max_length=16, blank=True, help_text="The dtype the weights are stored in.")
    shards = models.PositiveIntegerField(default=1)
    chat_family = models.CharField(
        max_length=16, blank=True, help_text="qwen2.5, qwen3, llama3 or chatml; empty: none of those, checked as it is.")
    tool_parser = models.CharField(
        max_length=16, blank=True, help_text="The tool-call parser runs of this model use (SGLang's names).")
    stop_tokens = models.JSONField(default=list, blank=True, help_text="Tokens that end a generated turn.")
    check_report = models.JSONField(default=dict, blank=True, help_text="The chat template check's full report.")
    created = models.DateTimeField(auto_now_add=True)
    visibility = models.CharField(
        max_length=8, choices=Visibility.choices, default=Visibility.PRIVATE,
        help_text="private: its owner (and staff) only; everyone: every user may read it and launch runs from it.",
    )
    note = models.CharField(max_length=500, blank=True,
                            help_text="What users should know before they train it, shown with it (the demo "
                                      "models' say how they were made; staff may write one in the admin).")

    class Meta:
        ordering = ["-created", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(source__in=ModelSource.values), name="modelasset_source_valid"
            ),
            models.CheckConstraint(
                condition=models.Q(visibility__in=Visibility.values), name="modelasset_visibility_valid"
            ),
            models.CheckConstraint(condition=models.Q(kind__in=ModelKind.values), name="modelasset_kind_valid"),
        ]

    def __str__(self) -> str:
        return self.name
