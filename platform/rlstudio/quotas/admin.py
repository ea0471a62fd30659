"""Admin page of GPU quotas (changes are audited; the user is picked by name, with autocomplete).

The GPU-hours kept of deleted jobs (`GpuHoursSpent`) are listed read-only: the platform writes them
when it deletes a run, and nobody adds, changes or deletes them by hand.

Team GPU quotas (`TeamQuota`) have their own page: a team picked by name (fixed once created), its
limits, and what its members hold and used this month; every save and deletion goes through
`services.team_quota_set` / `team_quota_delete` (staff only, checked and audited as `team_quota.*`).

The staff quota page (`rlstudio.quotas.views`, /quotas/admin/) is the place built for the job; the
admin's index links to it (its index template is set here, and the admin site's sidebar turned off).
"""
from django.contrib import admin

from rlstudio.accounts.services import audit_record

from .models import GpuHoursSpent, GpuQuota, TeamQuota
from .services import team_quota_delete, team_quota_set
from .team_quotas import members_of, team_usages


admin.site.index_template = "quotas/admin_index.html"
# No navigation sidebar on the admin's pages (the index and the breadcrumbs lead everywhere): at
# 1280 px its 275 px with a change list's filters left a list 631 px, and the runs', models',
# datasets' and reward functions' lists ran past it, their right-hand columns cut off.
admin.site.enable_nav_sidebar = False


@admin.register(GpuQuota)
class GpuQuotaAdmin(admin.ModelAdmin):
    # One short column per limit and per usage, the row's link on whose quota it is. The list began
    # with the row's description (`__str__`: every limit in one sentence, wrapped to a tall narrow
    # link) and a filter on "is default" (one row is), and its right-hand columns were cut off.
    list_display = ["who", "max_gpus", "gpu_hours_per_month", "max_concurrent_runs", "max_queued_runs",
                    "dataset_storage_gb", "held_now", "hours_this_month", "queued_runs", "datasets_stored",
                    "updated"]
    list_display_links = ["who"]
    list_select_related = ["user"]
    search_fields = ["user__username"]
    autocomplete_fields = ["user"]  # a search by username (the auth app's UserAdmin searches it)

    @admin.display(description="user", ordering="user__username")
    def who(self, obj) -> str:
        return obj.user.get_username() if obj.user_id else "(default)"

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


@admin.register(TeamQuota)
class TeamQuotaAdmin(admin.ModelAdmin):
    list_display = ["team_name", "max_gpus", "gpu_hours_per_month", "members", "held_now", "hours_this_month",
                    "updated"]
    search_fields = ["team__name"]
    fields = ["team", "max_gpus", "gpu_hours_per_month"]
    ordering = ["team__name"]

    def get_readonly_fields(self, request, obj=None):
        return ["team"] if obj is not None else []  # a row is one team's: make another for another team

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        field = super().formfield_for_foreignkey(db_field, request, **kwargs)
        if db_field.name == "team" and field is not None:
            field.queryset = field.queryset.order_by("name")
        return field

    list_select_related = ["team"]

    def get_changelist_instance(self, request):
        """The list's page, each row's usage read for the whole page at once (`team_usages`: a fixed
        number of queries, whatever the number of teams or members), not three times per row."""
        cl = super().get_changelist_instance(request)
        rows = list(cl.result_list)
        usages = {u.team_id: u for u in team_usages(rows, members_of(q.team_id for q in rows))}
        for row in rows:
            row.usage_now = usages[row.team_id]
        cl.result_list = rows
        return cl

    def _usage(self, obj):
        usage = getattr(obj, "usage_now", None)
        return usage if usage is not None else team_usages([obj], members_of([obj.team_id]))[0]

    @admin.display(description="team", ordering="team__name")
    def team_name(self, obj) -> str:
        return obj.team.name

    @admin.display(description="members")
    def members(self, obj) -> int:
        return self._usage(obj).members

    @admin.display(description="GPUs held now")
    def held_now(self, obj) -> str:
        return f"{self._usage(obj).gpus_held} of {obj.max_gpus}"

    @admin.display(description="GPU-hours this month")
    def hours_this_month(self, obj) -> str:
        return f"{self._usage(obj).gpu_hours_this_month:.2f} of {obj.gpu_hours_per_month:g}"

    def save_model(self, request, obj, form, change):
        saved = team_quota_set(team=obj.team, by=request.user, max_gpus=obj.max_gpus,
                               gpu_hours_per_month=obj.gpu_hours_per_month)
        obj.pk, obj.updated = saved.pk, saved.updated

    def delete_model(self, request, obj):
        team_quota_delete(quota=obj, by=request.user)

    def delete_queryset(self, request, queryset):
        for quota in queryset:
            team_quota_delete(quota=quota, by=request.user)


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
