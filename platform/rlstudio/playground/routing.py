"""WebSocket routes of the playground (added to the ASGI router next to telemetry's)."""
from django.urls import path

from .consumers import PlaygroundConsumer

websocket_urlpatterns = [
    path("ws/playground/<int:session_id>/", PlaygroundConsumer.as_asgi()),
]
