"""Admin pages of the catalog."""
from django.contrib import admin

from .models import Dataset, ModelAsset


@admin.register(Dataset)
class DatasetAdmin(admin.ModelAdmin):
    list_display = ["name", "owner", "status", "preset", "split", "format", "num_rows", "size_bytes", "created"]
    list_filter = ["status", "preset", "split", "format", "created"]
    search_fields = ["name", "sha256", "owner__username"]
    readonly_fields = ["sha256", "size_bytes", "created"]


@admin.register(ModelAsset)
class ModelAssetAdmin(admin.ModelAdmin):
    list_display = ["name", "owner", "source", "tokenizer_ok", "num_parameters", "created"]
    list_filter = ["source", "tokenizer_ok", "created"]
    search_fields = ["name", "path", "owner__username"]
    raw_id_fields = ["source_run"]
