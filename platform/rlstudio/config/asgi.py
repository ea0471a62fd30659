"""The ASGI application: Django for HTTP, Channels for WebSockets.

Serve it: `daphne -b 127.0.0.1 -p 8000 rlstudio.config.asgi:application` (with platform/ on the
path, or after `pip install -e .`). Loading it inside Daphne also installs the request gate
(rlstudio.config.request_gate): request bodies are checked (size, an upload's credentials, a
minimum rate) between their headers and their first byte.
"""
import os
import sys

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rlstudio.config.settings.local")
# Django must be set up before anything imports models (the consumers and the auth middleware do).
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from rlstudio.accounts.ws_auth import ApiTokenQueryAuthMiddleware, SameOriginValidator  # noqa: E402
from rlstudio.config.request_gate import RequestGateMiddleware  # noqa: E402
from rlstudio.config.ws_fallback import fallback_route  # noqa: E402
from rlstudio.alerts.routing import websocket_urlpatterns as alert_routes  # noqa: E402
from rlstudio.playground.routing import websocket_urlpatterns as playground_routes  # noqa: E402
from rlstudio.telemetry.routing import websocket_urlpatterns  # noqa: E402

if "daphne.server" in sys.modules:  # only under the daphne command: daphne_gate loads Twisted's reactor
    from rlstudio.config.daphne_gate import install_daphne_gate  # noqa: E402

    install_daphne_gate()

application = ProtocolTypeRouter(
    {
        "http": RequestGateMiddleware(django_asgi_app),
        "websocket": SameOriginValidator(
            AuthMiddlewareStack(ApiTokenQueryAuthMiddleware(URLRouter(
                websocket_urlpatterns + alert_routes + playground_routes + [fallback_route]
            )))
        ),
    }
)
