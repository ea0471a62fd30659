"""WebSocket authentication by `?token=<api token>` for scripts that hold no session cookie.

Sits inside Channels' AuthMiddlewareStack: a token in the query string, when present, decides the
user (an invalid one leaves the connection anonymous, so the consumer closes it with 4401).
"""
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from django.contrib.auth.models import AnonymousUser

from .services import api_token_authenticate


@database_sync_to_async
def _user_for_key(key: str):
    token = api_token_authenticate(key=key)
    return token.user if token is not None else AnonymousUser()


class ApiTokenQueryAuthMiddleware:
    """ASGI middleware: sets scope["user"] from `?token=` when the query string has one."""

    def __init__(self, inner):
        self.inner = inner

    async def __call__(self, scope, receive, send):
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        keys = query.get("token")
        if keys:
            scope = dict(scope, user=await _user_for_key(keys[0]))
        return await self.inner(scope, receive, send)
