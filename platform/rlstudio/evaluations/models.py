"""Records of evaluations: one request to evaluate some checkpoints (steps) of a run, and optionally its
base model, or one registered catalog model, on a dataset, k samples per prompt, run as a Ray job
within the owner's quota; its stored results (per column figures, the prompts x columns matrix) and
every sample's transcript."""
from django.conf import settings
from django.db import models


class EvaluationStatus(models.TextChoices):
    QUEUED = "queued", "queued"  # waiting for the owner's quota (queue_reason says why)
    RUNNING = "running", "running"  # admitted: holds its GPUs; submitted to Ray once ray_submission_id is set
    SUCCEEDED = "succeeded", "succeeded"
    FAILED = "failed", "failed"
    STOPPED = "stopped", "stopped"


ACTIVE_EVALUATION_STATUSES = frozenset({EvaluationStatus.QUEUED, EvaluationStatus.RUNNING})
TERMINAL_EVALUATION_STATUSES = frozenset({EvaluationStatus.SUCCEEDED, EvaluationStatus.FAILED,
                                          EvaluationStatus.STOPPED})


class Evaluation(models.Model):
    """An evaluation on `dataset` of either `checkpoints` (global steps of `run`) and of the run's base
    model when `include_base`, or of one catalog `model` (kind policy; then `checkpoints` is empty,
    `include_base` true and the model is the one column, "base", step 0). Exactly one of `run` and
    `model` is set (a database constraint).

    `results` (once succeeded): {"checkpoints": [{"key", "step", "base", "mean_at_k", "pass_at_k",
    "maj_at_k", "samples", "seconds", "samples_per_s"}], "prompts": [{"index", "prompt", "ground_truth",
    "cells": {"<key>": {"n", "correct", "mean_at_k", "pass_at_k", "maj_at_k", "sample"}}}]}
    (trainer.evaluate.evaluate_columns; key "base" for the base model, else the step). Paths are never
    stored: the job's spec is made again from the run's own folder (or the model's catalog record) and
    the dataset's record."""

    run = models.ForeignKey("runs.Run", null=True, blank=True, on_delete=models.CASCADE, related_name="evaluations")
    # A registered model evaluated on its own (issue 19): deleting the model deletes its evaluations
    # (the catalog refuses that while one of them is queued or running).
    model = models.ForeignKey("catalog.ModelAsset", null=True, blank=True, on_delete=models.CASCADE,
                              related_name="evaluations")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="evaluations")
    dataset = models.ForeignKey("catalog.Dataset", on_delete=models.PROTECT, related_name="evaluations")
    checkpoints = models.JSONField(default=list)  # sorted global steps
    include_base = models.BooleanField(default=False)  # the run's base model as a column ("base", step 0)
    k = models.PositiveIntegerField()
    max_prompts = models.PositiveIntegerField()
    sampling = models.JSONField(default=dict)  # temperature, top_p, top_k, max_new_tokens, seed
    # A catalog model's evaluation: the reward it is scored with, a name the run form accepts for
    # `reward.name` (a built-in or an operator-registered reward function; blank: the default reward).
    # Always blank for a run's evaluation, which is scored with the run's own config.
    reward = models.CharField(max_length=64, blank=True)
    gpus = models.PositiveIntegerField(default=0)  # counted against the owner's GPU quota while running
    status = models.CharField(max_length=16, choices=EvaluationStatus.choices, default=EvaluationStatus.QUEUED)
    queue_reason = models.CharField(max_length=300, blank=True)
    error = models.TextField(blank=True)  # why it failed: no server paths (rlstudio.runs.failure)
    error_log = models.TextField(
        blank=True, help_text="A failed evaluation's job log tail or the error as it was (its managers' only)."
    )
    results = models.JSONField(default=dict, blank=True)
    ray_submission_id = models.CharField(max_length=120, blank=True)
    stop_requested = models.DateTimeField(null=True, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    started = models.DateTimeField(null=True, blank=True)  # admitted (its quota held from then)
    finished = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created", "-id"]
        constraints = [models.CheckConstraint(condition=models.Q(status__in=EvaluationStatus.values),
                                              name="evaluation_status_valid"),
                       models.CheckConstraint(condition=models.Q(run__isnull=False, model__isnull=True)
                                              | models.Q(run__isnull=True, model__isnull=False),
                                              name="evaluation_run_xor_model")]

    def __str__(self) -> str:
        if self.run_id is None:
            return f"evaluation {self.pk} of model {self.model_id}"
        return f"evaluation {self.pk} of run {self.run_id}"

    @property
    def subject(self):
        """What is evaluated: the run, or the catalog model (the object its audit events name)."""
        return self.run if self.run_id is not None else self.model

    @property
    def columns(self) -> list[str]:
        """The matrix's column keys in order: "base" first when included, then the steps."""
        return (["base"] if self.include_base else []) + [str(s) for s in self.checkpoints]


class EvaluationSample(models.Model):
    """One of the k samples of one prompt in one column: the transcript after the prompt (turns of
    {"role", "content"}, each cut by the trainer) and its score. Read by the matrix cell that opens it."""

    evaluation = models.ForeignKey(Evaluation, on_delete=models.CASCADE, related_name="samples")
    column = models.CharField(max_length=20)  # "base" or the step
    prompt = models.PositiveIntegerField()  # position in results["prompts"]
    sample = models.PositiveIntegerField()
    score = models.FloatField()
    correct = models.BooleanField()
    answer = models.CharField(max_length=200, blank=True)
    finish_reason = models.CharField(max_length=20, blank=True)
    turns = models.JSONField(default=list)

    class Meta:
        ordering = ["evaluation", "column", "prompt", "sample"]
        indexes = [models.Index(fields=["evaluation", "prompt", "column"], name="evalsample_cell")]
