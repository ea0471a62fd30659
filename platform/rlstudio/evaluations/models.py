"""Records of evaluations: one request to evaluate some checkpoints (steps) of a run on a dataset, k
samples per prompt, and its stored results (per checkpoint figures, the prompts x checkpoints matrix)."""
from django.conf import settings
from django.db import models


class EvaluationStatus(models.TextChoices):
    QUEUED = "queued", "queued"
    RUNNING = "running", "running"
    SUCCEEDED = "succeeded", "succeeded"
    FAILED = "failed", "failed"


ACTIVE_EVALUATION_STATUSES = frozenset({EvaluationStatus.QUEUED, EvaluationStatus.RUNNING})


class Evaluation(models.Model):
    """An evaluation of `checkpoints` (global steps of `run`) on `dataset`.

    `results` (once succeeded): {"checkpoints": [{"step", "mean_at_k", "pass_at_k", "maj_at_k",
    "samples", "seconds", "samples_per_s"}], "prompts": [{"index", "prompt", "ground_truth",
    "cells": {"<step>": {"n", "correct", "mean_at_k", "pass_at_k", "maj_at_k", "sample"}}}]}
    (trainer.evaluate.evaluate_checkpoints). Paths are never stored: the task finds each step's folder
    in the run's own folder again."""

    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="evaluations")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="evaluations")
    dataset = models.ForeignKey("catalog.Dataset", on_delete=models.PROTECT, related_name="evaluations")
    checkpoints = models.JSONField(default=list)  # sorted global steps
    k = models.PositiveIntegerField()
    max_prompts = models.PositiveIntegerField()
    sampling = models.JSONField(default=dict)  # temperature, top_p, top_k, max_new_tokens, seed
    status = models.CharField(max_length=16, choices=EvaluationStatus.choices, default=EvaluationStatus.QUEUED)
    error = models.TextField(blank=True)
    results = models.JSONField(default=dict, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    started = models.DateTimeField(null=True, blank=True)
    finished = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created", "-id"]
        constraints = [models.CheckConstraint(condition=models.Q(status__in=EvaluationStatus.values),
                                              name="evaluation_status_valid")]

    def __str__(self) -> str:
        return f"evaluation {self.pk} of run {self.run_id}"
