"""Admin pages of alerts. Operators register webhook endpoints here (name, URL, the environment
variable holding the signing secret); users then pick them by name. The delivery log is read-only."""
import os

from django.contrib import admin, messages

from rlstudio.accounts.services import audit_record

from .models import AlertFiring, AlertRule, Notification, WebhookDelivery, WebhookEndpoint


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(admin.ModelAdmin):
    list_display = ("name", "url", "secret_env", "secret_set", "enabled", "created")
    list_filter = ("enabled",)
    search_fields = ("name", "url", "description")
    readonly_fields = ("created_by", "created")

    @admin.display(boolean=True, description="secret set here")
    def secret_set(self, obj) -> bool:
        """Whether this (web) process sees the secret; the Celery workers that deliver need it too."""
        return bool(os.environ.get(obj.secret_env))

    def save_model(self, request, obj, form, change):
        if not change:
            obj.created_by = request.user
        super().save_model(request, obj, form, change)
        audit_record(actor=request.user, action="webhook.change" if change else "webhook.register", obj=obj,
                     data={"name": obj.name, "url": obj.url, "secret_env": obj.secret_env, "enabled": obj.enabled})
        if not os.environ.get(obj.secret_env):
            messages.warning(request, f"{obj.secret_env} is not set in this process's environment: deliveries are "
                                      "refused until it is set for the Celery workers.")

    def delete_model(self, request, obj):
        audit_record(actor=request.user, action="webhook.delete", obj=obj, data={"name": obj.name, "url": obj.url})
        super().delete_model(request, obj)


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(admin.ModelAdmin):
    list_display = ("id", "endpoint", "notification", "status", "attempts", "response_status", "last_attempt")
    list_filter = ("status", "endpoint")
    readonly_fields = [f.name for f in WebhookDelivery._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(AlertRule)
class AlertRuleAdmin(admin.ModelAdmin):
    list_display = ("id", "owner", "run", "kind", "metric", "op", "threshold", "window", "enabled", "pause")
    list_filter = ("kind", "enabled", "pause")
    raw_id_fields = ("owner", "run")


@admin.register(AlertFiring)
class AlertFiringAdmin(admin.ModelAdmin):
    list_display = ("id", "run", "kind", "metric", "step", "paused", "created")
    list_filter = ("kind", "paused")
    raw_id_fields = ("run", "rule")


@admin.register(Notification)
class NotificationAdmin(admin.ModelAdmin):
    list_display = ("id", "user", "kind", "event", "level", "title", "read", "created")
    list_filter = ("kind", "level", "read")
    raw_id_fields = ("user", "run", "firing")
