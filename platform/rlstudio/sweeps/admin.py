"""Admin pages of sweeps (read-only: a sweep's runs are made and stopped through the services)."""
from django.contrib import admin

from .models import Sweep, SweepRun


class SweepRunInline(admin.TabularInline):
    model = SweepRun
    extra = 0
    fields = ("index", "run", "params")
    readonly_fields = fields
    can_delete = False


@admin.register(Sweep)
class SweepAdmin(admin.ModelAdmin):
    list_display = ("id", "name", "owner", "mode", "seed", "gpus", "created")
    list_filter = ("mode",)
    search_fields = ("name", "owner__username")
    readonly_fields = [f.name for f in Sweep._meta.fields]
    inlines = [SweepRunInline]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
