"""Admin page of projects (name, description and share are editable; the runs are moved on the run)."""
from django.contrib import admin

from .models import Project


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ["id", "name", "owner", "created"]
    list_filter = ["created"]
    search_fields = ["name", "description", "owner__username"]
    raw_id_fields = ["owner"]
    filter_horizontal = ["shared_with"]
    readonly_fields = ["created"]
