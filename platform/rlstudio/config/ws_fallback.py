"""The WebSocket router's last route: a path no consumer serves is refused at the handshake.

Without it Channels' URLRouter raises `ValueError: No route found` for an unknown path, which the
server answers with HTTP 500 and a traceback in the log on every such request. This consumer closes
before accepting instead, which the server sends as HTTP 403 (the ASGI rule for a refused handshake),
the same answer as a refused Origin, with nothing logged.
"""
from channels.generic.websocket import AsyncWebsocketConsumer
from django.urls import re_path


class UnknownPathConsumer(AsyncWebsocketConsumer):
    """Refuses every handshake: the path names no socket of RL Studio."""

    async def connect(self):
        await self.close()


# Matches any path; goes last in the router, after every real route.
fallback_route = re_path(r"", UnknownPathConsumer.as_asgi())
