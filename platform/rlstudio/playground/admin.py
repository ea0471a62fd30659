"""Admin page of playground sessions: read-only records (written by the API and the worker's task)."""
from django.contrib import admin

from .models import PlaygroundSession


@admin.register(PlaygroundSession)
class PlaygroundSessionAdmin(admin.ModelAdmin):
    list_display = ["id", "owner", "status", "stop_reason", "created", "finished"]
    list_filter = ["status", "created"]
    search_fields = ["owner__username"]
    raw_id_fields = ["owner"]
    readonly_fields = ["targets", "messages", "settings", "status", "stop_reason", "error", "results", "created",
                       "started", "finished"]
