"""Admin page of GPU quotas (changes are audited)."""
from django.contrib import admin

from rlstudio.accounts.services import audit_record

from .models import GpuQuota


@admin.register(GpuQuota)
class GpuQuotaAdmin(admin.ModelAdmin):
    list_display = ["__str__", "user", "is_default", "max_gpus", "gpu_hours_per_month", "max_concurrent_runs", "updated"]
    list_filter = ["is_default"]
    search_fields = ["user__username"]
    raw_id_fields = ["user"]

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        audit_record(
            actor=request.user,
            action="quota.change" if change else "quota.create",
            obj=obj,
            data={f: form.cleaned_data.get(f) for f in form.changed_data if f != "user"},
        )
