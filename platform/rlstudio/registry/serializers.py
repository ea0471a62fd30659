"""API shapes of the registries. Everyone sees what they may choose (name, description, kind,
function, the check's scores, the tools); staff also see where the code is, its sample rows and
errors, and a tool set's YAML."""
from rest_framework import serializers

from .models import RewardFunction, RewardKind, ToolSet



class RewardFunctionSerializer(serializers.ModelSerializer):
    scores = serializers.SerializerMethodField(help_text="The check's score of each sample row.")

    class Meta:
        model = RewardFunction
        fields = ["name", "description", "kind", "function", "status", "scores", "checked", "created"]
        read_only_fields = fields

    def get_scores(self, obj) -> list[float | None]:
        return [r.get("score") if isinstance(r, dict) else None for r in obj.check_results or []]


class RewardFunctionStaffSerializer(RewardFunctionSerializer):
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta(RewardFunctionSerializer.Meta):
        fields = RewardFunctionSerializer.Meta.fields + ["path", "module", "error", "sample_rows", "check_results",
                                                         "checked_path", "checked_sha256", "created_by"]
        read_only_fields = fields


class RewardFunctionRegisterSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=64)
    description = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")
    kind = serializers.ChoiceField(choices=RewardKind.choices)
    path = serializers.CharField(max_length=1024, required=False, allow_blank=True, default="",
                                 help_text="kind=file: absolute path of a .py file inside RLSTUDIO_REWARD_ROOTS.")
    module = serializers.CharField(max_length=200, required=False, allow_blank=True, default="",
                                   help_text="kind=module: a dotted module path importable on the server.")
    function = serializers.CharField(max_length=100, required=False, allow_blank=True, default="compute_score")
    sample_rows = serializers.JSONField(required=False, default=None, help_text=(
        "Rows to check it on: [{data_source, solution_str, ground_truth, extra_info?, expected?}] "
        "(default: a GSM8K-style and an arithmetic-style row)."))


class ToolSetSerializer(serializers.ModelSerializer):
    class Meta:
        model = ToolSet
        fields = ["name", "description", "status", "tools", "checked", "created"]
        read_only_fields = fields


class ToolSetStaffSerializer(ToolSetSerializer):
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta(ToolSetSerializer.Meta):
        fields = ToolSetSerializer.Meta.fields + ["config_yaml", "error", "created_by"]
        read_only_fields = fields


class ToolSetRegisterSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=64)
    description = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")
    config_yaml = serializers.CharField(max_length=70000, trim_whitespace=False, help_text=(
        "verl's tool_config YAML: tools: [{class_name, config, tool_schema}], class names from the trainer's "
        "tool registry."))
