"""Django app config of `rlstudio.quotas`."""
from django.apps import AppConfig


class QuotasConfig(AppConfig):
    name = "rlstudio.quotas"
    label = "quotas"
    verbose_name = "Quotas"
    default_auto_field = "django.db.models.BigAutoField"
