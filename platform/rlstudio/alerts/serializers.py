"""Serializers of the alerts API: what a rule, a firing, a notification and the settings look like,
and the bodies the API takes (checked again by the services, which name the faulty field)."""
from rest_framework import serializers

from . import rules as R
from .models import CHANNELS, LIFECYCLE_EVENTS, OPS


class AlertRuleSerializer(serializers.Serializer):
    id = serializers.IntegerField(read_only=True)
    run = serializers.IntegerField(source="run_id", read_only=True, allow_null=True,
                                   help_text="The run the rule is for; null: a default for all the owner's runs.")
    kind = serializers.CharField(read_only=True)
    title = serializers.SerializerMethodField()
    metric = serializers.CharField(read_only=True)
    op = serializers.CharField(read_only=True)
    threshold = serializers.FloatField(read_only=True)
    window = serializers.IntegerField(read_only=True)
    enabled = serializers.BooleanField(read_only=True)
    email = serializers.BooleanField(read_only=True)
    webhook = serializers.SerializerMethodField()
    pause = serializers.BooleanField(read_only=True)
    created = serializers.DateTimeField(read_only=True)
    updated = serializers.DateTimeField(read_only=True)

    def get_title(self, rule) -> str:
        return R.CATALOGUE[rule.kind].title

    def get_webhook(self, rule) -> str | None:
        return rule.webhook.name if rule.webhook_id else None


class AlertRuleWriteSerializer(serializers.Serializer):
    """POST (kind required) and PATCH (any subset) of a rule; unset fields take the catalogue's defaults."""

    run = serializers.IntegerField(required=False, allow_null=True,
                                   help_text="POST only: one of your runs; absent or null: a default for all your runs.")
    kind = serializers.ChoiceField(choices=list(R.CATALOGUE), required=False)
    metric = serializers.CharField(required=False, allow_blank=True, max_length=200)
    op = serializers.ChoiceField(choices=[""] + list(OPS), required=False)
    threshold = serializers.FloatField(required=False, allow_null=True)
    window = serializers.IntegerField(required=False, allow_null=True)
    enabled = serializers.BooleanField(required=False)
    email = serializers.BooleanField(required=False)
    webhook = serializers.CharField(required=False, allow_null=True, allow_blank=True,
                                    help_text="The name of an operator's webhook (GET /api/v1/alerts/webhooks/).")
    pause = serializers.BooleanField(required=False)


class CatalogueEntrySerializer(serializers.Serializer):
    kind = serializers.CharField()
    title = serializers.CharField()
    metric = serializers.CharField()
    threshold = serializers.FloatField()
    window = serializers.IntegerField()
    op = serializers.CharField()
    source = serializers.CharField()
    unit = serializers.CharField()
    help = serializers.CharField()
    recommended = serializers.BooleanField()


class FiringSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    rule = serializers.IntegerField(source="rule_id", allow_null=True)
    kind = serializers.CharField()
    metric = serializers.CharField()
    step = serializers.IntegerField(allow_null=True)
    values = serializers.DictField()
    message = serializers.CharField()
    paused = serializers.BooleanField()
    created = serializers.DateTimeField()


class NotificationSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    kind = serializers.CharField()
    event = serializers.CharField()
    level = serializers.CharField()
    title = serializers.CharField()
    body = serializers.CharField()
    run = serializers.IntegerField(source="run_id", allow_null=True)
    firing = serializers.IntegerField(source="firing_id", allow_null=True)
    read = serializers.BooleanField()
    created = serializers.DateTimeField()


class NotificationReadSerializer(serializers.Serializer):
    ids = serializers.ListField(child=serializers.IntegerField(), required=False,
                                help_text="The notifications to mark read; absent: all of yours.")


class SettingsSerializer(serializers.Serializer):
    routes = serializers.DictField(child=serializers.ListField(child=serializers.ChoiceField(choices=list(CHANNELS))),
                                   required=False, help_text=f"{{event: [channel, ...]}}, events "
                                                             f"{', '.join(LIFECYCLE_EVENTS)}; channels {', '.join(CHANNELS)}")
    webhook = serializers.CharField(required=False, allow_null=True, allow_blank=True,
                                    help_text="The operator webhook the events routed to `webhook` go to (by name).")
    email_enabled = serializers.BooleanField(read_only=True)
    email_address = serializers.CharField(read_only=True)


class WebhookSerializer(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField()
