"""API routes of alerts, included by rlstudio.api.urls before the runs router (docs/api.md paths)."""
from django.urls import path

from . import api

urlpatterns = [
    path("alerts/rules/", api.AlertRuleListView.as_view(), name="alert-rules"),
    path("alerts/rules/<int:rule_id>/", api.AlertRuleDetailView.as_view(), name="alert-rule"),
    path("alerts/catalogue/", api.AlertCatalogueView.as_view(), name="alert-catalogue"),
    path("alerts/notifications/", api.NotificationListView.as_view(), name="notifications"),
    path("alerts/notifications/read/", api.NotificationReadView.as_view(), name="notifications-read"),
    path("alerts/settings/", api.NotificationSettingsView.as_view(), name="notification-settings"),
    path("alerts/webhooks/", api.WebhookListView.as_view(), name="alert-webhooks"),
    path("runs/<int:run_id>/alerts/", api.RunAlertsView.as_view(), name="run-alerts"),
]
