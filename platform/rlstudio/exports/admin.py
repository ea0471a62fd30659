"""Read-only admin page of exports."""
from django.contrib import admin

from .models import Export


@admin.register(Export)
class ExportAdmin(admin.ModelAdmin):
    list_display = ("id", "run", "step", "owner", "status", "lora", "size_bytes", "created", "finished")
    list_filter = ("status", "lora")
    readonly_fields = [f.name for f in Export._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
