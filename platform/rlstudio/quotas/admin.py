"""Admin page of GPU quotas (changes are audited; the user is picked by name, with autocomplete).

The GPU-hours kept of deleted jobs (`GpuHoursSpent`) are listed read-only: the platform writes them
when it deletes a run, and nobody adds, changes or deletes them by hand.

The staff quota page (`rlstudio.quotas.views`, /quotas/admin/) is the place built for the job; the
admin's index links to it (its index template is set here).
"""
from django.contrib import admin

from rlstudio.accounts.services import audit_record

from .models import GpuHoursSpent, GpuQuota


admin.site.index_template = "quotas/admin_index.html"


@admin.register(GpuQuota)
class GpuQuotaAdmin(admin.ModelAdmin):
    list_display = ["__str__", "user", "is_default", "max_gpus", "gpu_hours_per_month", "max_concurrent_runs",
                    "max_queued_runs", "dataset_storage_gb", "held_now", "hours_this_month", "queued_runs",
                    "datasets_stored", "updated"]
    list_filter = ["is_default"]
    search_fields = ["user__username"]
    autocomplete_fields = ["user"]  # a search by username (the auth app's UserAdmin searches it)

    def _usage(self, obj):
        from .selectors import quota_usage_for

        return quota_usage_for(user=obj.user) if obj.user_id else None

    @admin.display(description="held now (GPUs / runs)")
    def held_now(self, obj) -> str:
        u = self._usage(obj)
        return f"{u.gpus_held} GPUs / {u.runs_active} runs" if u else "—"

    @admin.display(description="GPU-hours this month")
    def hours_this_month(self, obj) -> str:
        u = self._usage(obj)
        return f"{u.gpu_hours_this_month:.2f}" if u else "—"

    @admin.display(description="queued runs (position: reason)")
    def queued_runs(self, obj) -> str:
        u = self._usage(obj)
        if not u or not u.queued:
            return "—"
        return "; ".join(f"#{q.id} at {q.position}: {q.reason or 'next reconcile'}" for q in u.queued[:5])

    @admin.display(description="datasets stored (GB)")
    def datasets_stored(self, obj) -> str:
        u = self._usage(obj)
        return f"{u.dataset_storage_used_gb:.2f}" if u else "—"

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        audit_record(
            actor=request.user,
            action="quota.change" if change else "quota.create",
            obj=obj,
            data={f: form.cleaned_data.get(f) for f in form.changed_data if f != "user"},
        )


@admin.register(GpuHoursSpent)
class GpuHoursSpentAdmin(admin.ModelAdmin):
    list_display = ["user", "month", "hours", "job", "created"]
    list_filter = ["month"]
    search_fields = ["user__username", "job"]
    readonly_fields = ["user", "month", "gpu_microseconds", "hours", "job", "created"]

    @admin.display(description="GPU-hours")
    def hours(self, obj) -> str:
        return f"{obj.gpu_hours:.4f}"

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
