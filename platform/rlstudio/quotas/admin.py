"""Admin page of GPU quotas (changes are audited; the user is picked by name, with autocomplete).

The staff quota page (`rlstudio.quotas.views`, /quotas/admin/) is the place built for the job; the
admin's index links to it (its index template is set here).
"""
from django.contrib import admin

from rlstudio.accounts.services import audit_record

from .models import GpuQuota


admin.site.index_template = "quotas/admin_index.html"


@admin.register(GpuQuota)
class GpuQuotaAdmin(admin.ModelAdmin):
    list_display = ["__str__", "user", "is_default", "max_gpus", "gpu_hours_per_month", "max_concurrent_runs",
                    "max_queued_runs", "held_now", "hours_this_month", "queued_runs", "updated"]
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

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        audit_record(
            actor=request.user,
            action="quota.change" if change else "quota.create",
            obj=obj,
            data={f: form.cleaned_data.get(f) for f in form.changed_data if f != "user"},
        )
