"""Shapes of exports in the API (docs/api.md "Exports")."""
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from .models import Export
from .selectors import export_error_log_for


class ExportCreateSerializer(serializers.Serializer):
    """The request body (checked by `services.clean_step`; this is its documented shape)."""

    step = serializers.IntegerField(min_value=0, help_text="The global step of one of the run's checkpoints.")


class ExportSerializer(serializers.ModelSerializer):
    """An export: its state, what it wrote, its catalog model and where to download it."""

    run = serializers.IntegerField(source="run_id", read_only=True)
    owner = serializers.CharField(source="owner.username", read_only=True)
    model = serializers.IntegerField(source="model_id", read_only=True, allow_null=True)
    # A plain string in the schema: an enum named after this field would collide with the other
    # apps' `status` enums of the same states (drf-spectacular's ENUM_NAME_OVERRIDES keys on values).
    status = serializers.CharField(read_only=True, help_text="queued | running | succeeded | failed")
    error = serializers.CharField(read_only=True, help_text=(
        "Why a failed export ended (no server paths: a path in it reads [path])."))
    error_log = serializers.SerializerMethodField(help_text=(
        "A failed export's error as it was and its traceback, which name server paths (the run's owner and "
        "staff; empty for a reader)."))
    archive = serializers.SerializerMethodField()

    class Meta:
        model = Export
        fields = ["id", "run", "owner", "step", "status", "error", "error_log", "lora", "files", "size_bytes",
                  "model", "archive", "created", "started", "finished"]

    @extend_schema_field(OpenApiTypes.STR)
    def get_error_log(self, obj) -> str:
        request = self.context.get("request")
        return export_error_log_for(user=getattr(request, "user", None), export=obj)

    def get_archive(self, obj) -> str | None:
        """The archive's URL once the export succeeded, else null."""
        if obj.status != "succeeded":
            return None
        return f"/api/v1/runs/{obj.run_id}/exports/{obj.pk}/archive/"
