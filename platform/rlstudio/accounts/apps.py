"""Django app config of `rlstudio.accounts`."""
from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "rlstudio.accounts"
    label = "accounts"
    verbose_name = "Accounts"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import schema  # noqa: F401  (registers the token scheme with drf-spectacular)
        from . import sockets

        sockets.connect()  # a saved user record: their open websockets check them again
