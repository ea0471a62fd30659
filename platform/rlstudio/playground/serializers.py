"""Shapes of the playground in the API (docs/api.md "Playground")."""
from rest_framework import serializers

from .models import PlaygroundSession


class PlaygroundMessageSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=["system", "user", "assistant"])
    content = serializers.CharField(allow_blank=True)


class PlaygroundTargetSerializer(serializers.Serializer):
    model = serializers.IntegerField(required=False, help_text="a catalog model's id")
    run = serializers.IntegerField(required=False, help_text="a run's id (with step)")
    step = serializers.IntegerField(required=False, help_text="the step of one of the run's checkpoints")
    messages = PlaygroundMessageSerializer(many=True, required=False,
                                 help_text="this target's own conversation (else the session's messages)")


class PlaygroundSettingsSerializer(serializers.Serializer):
    temperature = serializers.FloatField(required=False, min_value=0.0, max_value=2.0)
    top_p = serializers.FloatField(required=False, max_value=1.0)
    top_k = serializers.IntegerField(required=False, min_value=-1, max_value=1000)
    max_new_tokens = serializers.IntegerField(required=False, min_value=1, max_value=512)
    seed = serializers.IntegerField(required=False, allow_null=True, min_value=0)
    tools = serializers.BooleanField(required=False)
    max_turns = serializers.IntegerField(required=False, min_value=1, max_value=8)


class SessionCreateSerializer(serializers.Serializer):
    """The request body (checked in full by `services.clean_request`; this is its documented shape)."""

    targets = PlaygroundTargetSerializer(many=True, help_text="one target, or two side by side")
    messages = PlaygroundMessageSerializer(many=True, required=False,
                                 help_text="the conversation, ending with the user's message")
    settings = PlaygroundSettingsSerializer(required=False)


class SessionSerializer(serializers.ModelSerializer):
    owner = serializers.CharField(source="owner.username", read_only=True)
    ws_url = serializers.SerializerMethodField()

    class Meta:
        model = PlaygroundSession
        fields = ["id", "owner", "targets", "messages", "settings", "status", "stop_reason", "error", "results",
                  "ws_url", "created", "started", "finished"]

    def get_ws_url(self, obj) -> str:
        """The websocket path that streams the answers (same host as the API)."""
        return f"/ws/playground/{obj.pk}/"
