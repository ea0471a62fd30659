"""Shapes of evaluations in the API (docs/api.md "Evaluations")."""
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from .models import Evaluation, EvaluationSample
from .selectors import evaluation_error_log_for, evaluation_queue_reason_for


class SamplingSerializer(serializers.Serializer):
    temperature = serializers.FloatField(required=False, min_value=0.0, max_value=2.0)
    top_p = serializers.FloatField(required=False, max_value=1.0)
    top_k = serializers.IntegerField(required=False, min_value=-1, max_value=1000)
    max_new_tokens = serializers.IntegerField(required=False, min_value=1)
    seed = serializers.IntegerField(required=False, min_value=0)


class EvaluationRequestFields(serializers.Serializer):
    """The fields a run's and a model's evaluation request share: the dataset, k, prompts, GPUs and
    sampling (not a request body itself; each request serializer below adds its own fields)."""

    dataset = serializers.IntegerField()
    k = serializers.IntegerField(min_value=1)
    max_prompts = serializers.IntegerField(required=False, min_value=1)
    gpus = serializers.IntegerField(required=False, min_value=0, max_value=1,
                                    help_text="0: on the CPU; 1: one GPU, counted against the quota")
    sampling = SamplingSerializer(required=False)


class ModelEvaluationCreateSerializer(EvaluationRequestFields):
    """The request body of a catalog model's evaluation (checked by `services.clean_model_request`):
    the shared fields and the reward; no checkpoints: the model is the one column, 'base'."""

    reward = serializers.CharField(required=False, allow_blank=True, max_length=64,
                                   help_text="the reward's name, one the run form accepts for reward.name (a "
                                             "built-in or an operator-registered reward function); absent or "
                                             "'': the default reward")


class EvaluationCreateSerializer(EvaluationRequestFields):
    """The request body of a run's evaluation (checked in full by `services.clean_request`; this is its
    documented shape): what is evaluated, then the shared fields. No reward: the run's config scores it."""

    checkpoints = serializers.ListField(child=serializers.IntegerField(min_value=0), allow_empty=True,
                                        help_text="steps of the run's checkpoints (may be empty with include_base)")
    include_base = serializers.BooleanField(required=False, default=False,
                                            help_text="evaluate the run's base model too, as column 'base' (step 0)")


class EvaluationSerializer(serializers.ModelSerializer):
    """An evaluation without its per-prompt matrix: the per-checkpoint figures only."""

    run = serializers.IntegerField(source="run_id", read_only=True, allow_null=True,
                                   help_text="the run evaluated (null for a catalog model's evaluation)")
    model = serializers.IntegerField(source="model_id", read_only=True, allow_null=True,
                                     help_text="the catalog model evaluated (null for a run's evaluation)")
    dataset = serializers.IntegerField(source="dataset_id", read_only=True)
    owner = serializers.CharField(source="owner.username", read_only=True)
    figures = serializers.SerializerMethodField()
    error = serializers.CharField(read_only=True, help_text=(
        "Why a failed evaluation ended: the job's exception, Ray's reason or the platform's message (no server "
        "paths: a path in it reads [path])."))
    error_log = serializers.SerializerMethodField(help_text=(
        "A failed evaluation's job log tail (the traceback) and the error as it was, which name server paths "
        "(its managers: the run's owner and staff, a model evaluation's owner and staff; empty for a reader)."))
    queue_reason = serializers.SerializerMethodField(help_text=(
        "Why a queued evaluation waits ('' when it does not); a reason naming its owner's team reads, for a "
        "reader of the run, \"waiting for a team quota of its owner's\"."))
    reward = serializers.CharField(read_only=True,
                                   help_text="a model's evaluation: the reward it is scored with ('': the default "
                                             "reward); a run's: '' (the run's own config scores it)")

    class Meta:
        model = Evaluation
        fields = ["id", "run", "model", "owner", "dataset", "checkpoints", "include_base", "columns", "k", "max_prompts",
                  "gpus", "sampling", "reward", "status", "queue_reason", "error", "error_log", "stop_requested", "figures",
                  "created", "started", "finished"]

    columns = serializers.ListField(child=serializers.CharField(), read_only=True,
                                    help_text="the matrix's column keys: 'base' first when included, then the steps")

    @extend_schema_field(OpenApiTypes.STR)
    def get_error_log(self, obj) -> str:
        request = self.context.get("request")
        return evaluation_error_log_for(user=getattr(request, "user", None), ev=obj)

    @extend_schema_field(OpenApiTypes.STR)
    def get_queue_reason(self, obj) -> str:
        request = self.context.get("request")
        return evaluation_queue_reason_for(user=getattr(request, "user", None), ev=obj)

    def get_figures(self, obj) -> list[dict]:
        """Per column: key ("base" or the step), step (0 for the base model), base, mean_at_k, pass_at_k,
        maj_at_k, samples, seconds, samples_per_s."""
        return list((obj.results or {}).get("checkpoints", []))


class EvaluationDetailSerializer(EvaluationSerializer):
    """An evaluation with the prompts x checkpoints matrix (`prompts`, filtered by ?change=)."""

    prompts = serializers.SerializerMethodField()

    class Meta(EvaluationSerializer.Meta):
        fields = EvaluationSerializer.Meta.fields + ["prompts"]

    def get_prompts(self, obj) -> list[dict]:
        """Per prompt: position (its transcripts' `prompt`), index, prompt, ground_truth, change
        (better|worse|same: last column against the first, on mean@k), cells {column key: {n, correct,
        mean_at_k, pass_at_k, maj_at_k, sample}}."""
        return self.context.get("prompts", [])


class EvaluationSampleSerializer(serializers.ModelSerializer):
    """One transcript of a matrix cell: the turns after the prompt ({role, content} and a tool-calling
    turn's tool_calls [{name, arguments}]) and its score."""

    class Meta:
        model = EvaluationSample
        fields = ["column", "prompt", "sample", "score", "correct", "answer", "finish_reason", "turns"]
