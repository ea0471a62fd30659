"""WebSocket routes of RL Studio."""
from django.urls import path

from .consumers import RunConsumer

websocket_urlpatterns = [
    path("ws/runs/<int:run_id>/", RunConsumer.as_asgi()),
]
