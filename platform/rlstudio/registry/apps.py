"""Django app config of `rlstudio.registry`."""
from django.apps import AppConfig


class RegistryConfig(AppConfig):
    name = "rlstudio.registry"
    label = "registry"
    verbose_name = "Operator registries"
    default_auto_field = "django.db.models.BigAutoField"
