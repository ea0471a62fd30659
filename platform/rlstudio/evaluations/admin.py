"""Admin pages of evaluations: read-only records (they are written by the API and the worker's task)."""
from django.contrib import admin

from .models import Evaluation


@admin.register(Evaluation)
class EvaluationAdmin(admin.ModelAdmin):
    list_display = ["id", "run", "model", "owner", "dataset", "k", "gpus", "status", "created", "finished"]
    list_filter = ["status", "created"]
    search_fields = ["run__name", "model__name", "owner__username"]
    raw_id_fields = ["run", "model", "owner", "dataset"]
    readonly_fields = ["status", "queue_reason", "error", "error_log", "results", "ray_submission_id", "stop_requested",
                       "created", "started", "finished"]
