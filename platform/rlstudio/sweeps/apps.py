"""Django app config of `rlstudio.sweeps`: a grid of runs over a few config keys from one base config,
launched together and read side by side."""
from django.apps import AppConfig


class SweepsConfig(AppConfig):
    name = "rlstudio.sweeps"
    label = "sweeps"
    verbose_name = "Sweeps"
    default_auto_field = "django.db.models.BigAutoField"
