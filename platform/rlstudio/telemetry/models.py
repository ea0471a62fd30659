"""Records of what a run reports, each stored once per (run, seq) or (run, step)."""
from django.db import models

from rlstudio.retention import RetentionMode  # defined with the retention's checks; importable from here too

from .fields import CompressedJSONField


class RunEvent(models.Model):
    """One event as the trainer sent it (its per-run sequence number makes re-sends idempotent)."""

    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="events")
    seq = models.BigIntegerField()
    type = models.CharField(max_length=32)
    time = models.DateTimeField()
    data = models.JSONField(default=dict)

    class Meta:
        ordering = ["run", "seq"]
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="runevent_run_seq_unique")]
        # The log tail (run page, logs API) reads the last N log events of a run: without it, a backward
        # scan of all the run's events (samples are most of them) filtered by type. Partial: only log
        # events are in it, so the ingest of every other event pays nothing for it.
        indexes = [models.Index(fields=["run", "seq"], condition=models.Q(type="log"), name="runevent_run_log_idx")]

    def __str__(self) -> str:
        return f"run {self.run_id} #{self.seq} {self.type}"


class MetricRow(models.Model):
    """All metrics of one step of a run (verl names: `critic/score/mean`, `actor/pg_loss`, ...)."""

    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="metric_rows")
    step = models.IntegerField()
    time = models.DateTimeField()
    metrics = models.JSONField(default=dict)

    class Meta:
        ordering = ["run", "step"]
        constraints = [models.UniqueConstraint(fields=["run", "step"], name="metricrow_run_step_unique")]
        indexes = [models.Index(fields=["run", "step"], name="metricrow_run_step_idx")]

    def __str__(self) -> str:
        return f"run {self.run_id} step {self.step}"


class Sample(models.Model):
    """One rollout sample with its transcript (and, where recorded, its token view)."""

    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="samples")
    seq = models.BigIntegerField()
    step = models.IntegerField()
    uid = models.CharField(max_length=128, help_text="The prompt's id in this batch draw (its GRPO group).")
    index = models.IntegerField(help_text="Index of the sample within its group.")
    # The prompt's stable identity across steps (null on samples of trainers that did not report it):
    # a prompt is followed across training by (run, prompt_split, prompt_hash).
    prompt_split = models.CharField(max_length=8, null=True, blank=True,
                                    help_text="The data the prompt was read from: train or val.")
    prompt_index = models.IntegerField(null=True, blank=True,
                                       help_text="The prompt's row in that data (verl's row index).")
    prompt_hash = models.CharField(max_length=32, null=True, blank=True,
                                   help_text="Content hash of the rendered prompt (trainer.types.prompt_hash).")
    reward = models.FloatField(null=True, blank=True)
    advantage = models.FloatField(null=True, blank=True)
    response_length = models.IntegerField(default=0)
    num_turns = models.IntegerField(default=1)
    finish_reason = models.CharField(max_length=32, blank=True)
    has_tool_call = models.BooleanField(default=False)
    transcript = models.JSONField(default=list)
    # Compressed JSON, not jsonb: see fields.py (jsonb's number parsing was most of the ingest).
    token_view = CompressedJSONField(null=True, blank=True)

    class Meta:
        ordering = ["run", "seq"]
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="sample_run_seq_unique")]
        indexes = [
            models.Index(fields=["run", "step"], name="sample_run_step_idx"),
            models.Index(fields=["run", "reward"], name="sample_run_reward_idx"),
            models.Index(fields=["run", "prompt_hash"], name="sample_run_prompt_idx"),
            # The samples table's other sorts by a column with many values (longest responses, largest
            # advantage): without them a sorted page sorts every sample of the run.
            models.Index(fields=["run", "response_length", "seq"], name="sample_run_length_idx"),
            models.Index(fields=["run", "advantage", "seq"], name="sample_run_advantage_idx"),
            # The finish_reason filter (truncated responses: `length`), alone or with a reward range: its
            # count and its page without reading every sample row of the run.
            models.Index(fields=["run", "finish_reason", "reward"], name="sample_run_finish_idx"),
            # The samples that called a tool (a partial index: usually a minority), in seq order; and one
            # GRPO group by its uid across the run's steps (the API's ?uid= without ?step=), in seq order.
            models.Index(fields=["run", "seq"], condition=models.Q(has_tool_call=True), name="sample_run_tool_idx"),
            models.Index(fields=["run", "uid", "seq"], name="sample_run_uid_idx"),
        ]

    def __str__(self) -> str:
        return f"run {self.run_id} step {self.step} {self.uid}[{self.index}]"


class MemoryPoint(models.Model):
    """Memory at one moment of a run, from one worker: GPU allocated/reserved/peak bytes and the
    device's NVML-used bytes, or process RSS on CPU."""

    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="memory_points")
    seq = models.BigIntegerField()
    time = models.DateTimeField()
    step = models.IntegerField(null=True, blank=True)
    phase = models.CharField(max_length=32, blank=True)
    device = models.CharField(max_length=32, blank=True)
    allocated = models.BigIntegerField(null=True, blank=True)
    reserved = models.BigIntegerField(null=True, blank=True)
    peak = models.BigIntegerField(null=True, blank=True)
    rss = models.BigIntegerField(null=True, blank=True)
    # Which worker measured it (several ranks report into one timeline), and the whole device's used
    # memory as NVML sees it (the CUDA context, NCCL, a rollout engine's own pool), 0 without NVML.
    rank = models.IntegerField(default=0)
    device_used = models.BigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["run", "seq"]
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="memorypoint_run_seq_unique")]
        indexes = [models.Index(fields=["run", "time"], name="memorypoint_run_time_idx")]

    def __str__(self) -> str:
        return f"run {self.run_id} #{self.seq} {self.phase}"


class RunRetention(models.Model):
    """A run's sample retention (no row = keep all). Rollout dumps (JSONL files) always keep all."""

    Mode = RetentionMode

    run = models.OneToOneField("runs.Run", on_delete=models.CASCADE, related_name="retention")
    mode = models.CharField(max_length=16, choices=RetentionMode.choices, default=RetentionMode.ALL)
    k = models.PositiveIntegerField(default=1, help_text="k of per_step / every_kth_step (>= 1).")

    class Meta:
        constraints = [
            models.CheckConstraint(condition=models.Q(k__gte=1), name="runretention_k_positive"),
            models.CheckConstraint(
                condition=models.Q(mode__in=RetentionMode.values), name="runretention_mode_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"run {self.run_id}: {self.mode} k={self.k}"


class RunIngestCount(models.Model):
    """What a run has stored through the ingest: the per-run caps (RLSTUDIO_RUN_MAX_*) are checked
    against these counters, never by counting rows. The ingest locks this row and updates it in the
    transaction that stores the batch, so the counts are exact and two POSTs of one run are serialized.
    Created by the run's first batch (from a count of what is already stored, once).

    `caps_reached` maps a cap ("events", "samples", "metric_rows") to the limit it was reached at, so
    that reaching it is audited once (again only if an operator changes that limit). `metric_names`:
    the names of every metric the run stored, so that a comparison, the Summary card and the CSV name
    them without reading every row (compare.metric_names_by_run)."""

    run = models.OneToOneField("runs.Run", on_delete=models.CASCADE, primary_key=True, related_name="ingest_count")
    events = models.BigIntegerField(default=0, help_text="RunEvents stored.")
    samples = models.BigIntegerField(default=0, help_text="Sample events stored (a transcript each, under retention).")
    metric_rows = models.BigIntegerField(default=0, help_text="MetricRows (steps with metrics).")
    caps_reached = models.JSONField(default=dict, blank=True)
    metric_names = models.JSONField(null=True, blank=True, default=None, help_text=(
        "Every metric name the run reported, sorted (kept by the ingest; null: not known yet)."))

    def __str__(self) -> str:
        return f"run {self.run_id}: {self.events} events, {self.samples} samples, {self.metric_rows} metric rows"
