"""Admin pages of the catalog. Sharing (the `visibility` field, or the two list actions) goes through
`catalog_set_visibility`, so every change is audited like one made through the API."""
from django.contrib import admin, messages

from .models import Dataset, ModelAsset, Visibility
from .errors import CatalogRefused, NotPermitted
from .sharing import catalog_set_visibility


class SharingAdmin(admin.ModelAdmin):
    """Share / unshare as list actions and as an audited field of the change form."""

    actions = ["share_with_everyone", "make_private"]

    def _set(self, request, queryset, visibility: str) -> None:
        changed = 0
        try:
            for item in queryset.select_related("owner"):
                changed += catalog_set_visibility(item=item, by=request.user, visibility=visibility)
        except (NotPermitted, CatalogRefused) as exc:
            self.message_user(request, exc.message, level=messages.ERROR)
            return
        self.message_user(request, f"{changed} changed to {visibility}.", level=messages.SUCCESS)

    @admin.action(description="Share the selected with everyone")
    def share_with_everyone(self, request, queryset):
        self._set(request, queryset, Visibility.EVERYONE)

    @admin.action(description="Make the selected private")
    def make_private(self, request, queryset):
        self._set(request, queryset, Visibility.PRIVATE)

    def save_model(self, request, obj, form, change):
        wanted = obj.visibility
        if "visibility" in form.changed_data:
            obj.visibility = form.initial.get("visibility", Visibility.PRIVATE) if change else Visibility.PRIVATE
        super().save_model(request, obj, form, change)
        if wanted != obj.visibility:
            catalog_set_visibility(item=obj, by=request.user, visibility=wanted)


@admin.register(Dataset)
class DatasetAdmin(SharingAdmin):
    list_display = ["name", "owner", "visibility", "status", "preset", "split", "format", "num_rows", "size_bytes",
                    "created"]
    list_filter = ["visibility", "status", "preset", "split", "format", "created"]
    search_fields = ["name", "sha256", "owner__username"]
    readonly_fields = ["sha256", "size_bytes", "created"]


@admin.register(ModelAsset)
class ModelAssetAdmin(SharingAdmin):
    """Models; `trust_remote_code` is set here only (staff), audited: runs never set it."""

    list_display = ["name", "owner", "visibility", "trust_remote_code", "source", "tokenizer_ok", "num_parameters",
                    "created"]
    list_filter = ["visibility", "trust_remote_code", "source", "tokenizer_ok", "created"]
    search_fields = ["name", "path", "owner__username"]
    raw_id_fields = ["source_run"]

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        if "trust_remote_code" in form.changed_data:
            from rlstudio.accounts.services import audit_record

            audit_record(actor=request.user, action="model.trust_remote_code", obj=obj,
                         data={"trust_remote_code": obj.trust_remote_code})
