"""Django app config of `rlstudio.catalog`."""
from django.apps import AppConfig


class CatalogConfig(AppConfig):
    name = "rlstudio.catalog"
    label = "catalog"
    verbose_name = "Catalog"
    default_auto_field = "django.db.models.BigAutoField"
