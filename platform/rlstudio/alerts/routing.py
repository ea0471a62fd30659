"""WebSocket routes of alerts (added to the ASGI router next to telemetry's)."""
from django.urls import path

from .consumers import NotificationConsumer

websocket_urlpatterns = [
    path("ws/notifications/", NotificationConsumer.as_asgi()),
]
