"""Django app config of `rlstudio.demo`: the one-click learning demo."""
from django.apps import AppConfig


class DemoConfig(AppConfig):
    name = "rlstudio.demo"
    label = "demo"
    verbose_name = "Demo"
    default_auto_field = "django.db.models.BigAutoField"
