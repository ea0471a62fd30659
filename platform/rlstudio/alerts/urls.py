"""URLs of the alerts page and its form POSTs (mounted at /alerts/)."""
from django.urls import path

from . import views

app_name = "alerts"

urlpatterns = [
    path("", views.alerts_page, name="page"),
    path("rules/add/", views.rule_add, name="rule_add"),
    path("rules/recommended/", views.rules_recommended, name="rules_recommended"),
    path("rules/<int:rule_id>/delete/", views.rule_remove, name="rule_delete"),
    path("rules/<int:rule_id>/toggle/", views.rule_toggle, name="rule_toggle"),
    path("settings/", views.settings_save, name="settings"),
    path("notifications/read/", views.notifications_read, name="read"),
]
