"""The ASGI application: Django for HTTP, Channels for WebSockets.

Serve it: `daphne -b 127.0.0.1 -p 8000 rlstudio.config.asgi:application` (with platform/ on the
path, or after `pip install -e .`).
"""
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rlstudio.config.settings.local")
# Django must be set up before anything imports models (the consumers and the auth middleware do).
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from rlstudio.accounts.ws_auth import ApiTokenQueryAuthMiddleware  # noqa: E402
from rlstudio.telemetry.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(ApiTokenQueryAuthMiddleware(URLRouter(websocket_urlpatterns)))
        ),
    }
)
