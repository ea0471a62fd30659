"""Admin pages of the runs app. Status is read-only here: it changes through the state machine."""
from django.contrib import admin

from .models import Run, RunConfig


@admin.register(RunConfig)
class RunConfigAdmin(admin.ModelAdmin):
    list_display = ["name", "owner", "created"]
    list_filter = ["created"]
    search_fields = ["name", "description", "owner__username"]


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ["id", "name", "owner", "status", "gpus", "step", "total_steps", "created", "started", "finished"]
    list_filter = ["status", "parent_kind", "created"]
    search_fields = ["name", "owner__username", "ray_submission_id"]
    raw_id_fields = ["dataset", "val_dataset", "model", "parent"]
    readonly_fields = [
        "status", "ray_submission_id", "ingest_token_hash", "created", "started", "finished", "last_heartbeat",
        "fork_changes",
    ]
