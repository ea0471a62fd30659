"""Admin pages of the accounts app (tokens are read-only: keys are never stored)."""
from django.contrib import admin

from .models import ApiToken, AuditEvent


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["key_prefix", "name", "user", "created", "last_used"]
    list_filter = ["created", "last_used"]
    search_fields = ["name", "key_prefix", "user__username"]
    readonly_fields = ["user", "name", "key_prefix", "key_hash", "created", "last_used"]

    def has_add_permission(self, request) -> bool:
        return False  # a key is created by its owner (profile page or `manage.py api_token`)


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    list_display = ["time", "actor", "action", "object_type", "object_id"]
    list_filter = ["action", "object_type", "time"]
    search_fields = ["action", "object_type", "object_id", "actor__username"]
    readonly_fields = ["time", "actor", "action", "object_type", "object_id", "data"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False  # the audit log is append-only
