"""Admin pages of telemetry (read mostly: these rows come from the trainer)."""
from django.contrib import admin

from .models import MemoryPoint, MetricRow, RunEvent, RunIngestCount, RunRetention, Sample


@admin.register(RunEvent)
class RunEventAdmin(admin.ModelAdmin):
    list_display = ["run", "seq", "type", "time"]
    list_filter = ["type", "time"]
    search_fields = ["run__name", "type"]
    raw_id_fields = ["run"]


@admin.register(MetricRow)
class MetricRowAdmin(admin.ModelAdmin):
    list_display = ["run", "step", "time"]
    list_filter = ["time"]
    search_fields = ["run__name"]
    raw_id_fields = ["run"]


@admin.register(Sample)
class SampleAdmin(admin.ModelAdmin):
    list_display = ["run", "step", "uid", "index", "prompt_split", "prompt_index", "reward", "advantage",
                    "response_length", "num_turns", "finish_reason"]
    list_filter = ["finish_reason", "has_tool_call", "prompt_split"]
    search_fields = ["run__name", "uid", "prompt_hash"]
    raw_id_fields = ["run"]


@admin.register(MemoryPoint)
class MemoryPointAdmin(admin.ModelAdmin):
    list_display = ["run", "seq", "time", "step", "phase", "device", "rank", "allocated", "reserved", "peak", "rss", "device_used"]
    list_filter = ["phase", "device"]
    search_fields = ["run__name", "phase"]
    raw_id_fields = ["run"]


@admin.register(RunRetention)
class RunRetentionAdmin(admin.ModelAdmin):
    list_display = ["run", "mode", "k"]
    list_filter = ["mode"]
    search_fields = ["run__name"]
    raw_id_fields = ["run"]


@admin.register(RunIngestCount)
class RunIngestCountAdmin(admin.ModelAdmin):
    """The per-run ingest counters the caps are checked against (written by the ingest only)."""

    list_display = ["run", "events", "samples", "metric_rows", "caps_reached"]
    search_fields = ["run__name"]
    raw_id_fields = ["run"]
    readonly_fields = ["events", "samples", "metric_rows", "caps_reached"]
