"""WebSocket handshakes: the Origin check (host AND port) and authentication by an API token.

`SameOriginValidator` wraps everything: a handshake from another origin is refused with 403.
`ApiTokenQueryAuthMiddleware` sits inside Channels' AuthMiddlewareStack, for scripts that hold no
session cookie: a token in the handshake's `Authorization: Token <key>` header (as the REST API takes
it; what the `rlstudio` client sends, so the key is in no URL a proxy or access log records) or, for
clients that cannot set headers, in the query string (`?token=`), when present, decides the user (an
invalid one leaves the connection anonymous, so the consumer closes it with 4401; the header wins
when both are given; two Authorization headers are refused alike). Its failures are throttled as the
API's `Authorization: Token` header's are (`throttle.api_token_throttled`, per client address and
per key prefix): while locked out, even the right key leaves the connection anonymous.
"""
from urllib.parse import parse_qs, urlsplit

from channels.db import database_sync_to_async
from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.http import HttpRequest
from django.http.request import validate_host

from .throttle import api_token_throttled


# The scope key of a token socket's ApiToken id (header or ?token=): its re-check asks whether the token still exists
# (accounts.sockets), where a session socket asks whether its session still signs the user in.
TOKEN_ID_SCOPE_KEY = "rlstudio.api_token_id"


@database_sync_to_async
def _token_for_key(key: str, *, client_ip: str, path: str):
    """The ApiToken of `key` (its user loaded), or None (invalid, or this address / prefix locked out)."""
    request = HttpRequest()
    request.META.update(REMOTE_ADDR=client_ip, PATH_INFO=path)
    token, _locked = api_token_throttled(request=request, key=key)
    return token


def _handshake_key(scope) -> str | None:
    """The API key a handshake carries: `Authorization: Token <key>`, else `?token=<key>`; None when neither.
    Two Authorization headers are ambiguous (the REST API answers them 401): "", a key of nobody."""
    headers = [value for name, value in scope.get("headers", ()) if name.lower() == b"authorization"]
    if len(headers) > 1:
        return ""
    header = headers[0].decode("latin-1") if headers else None
    if header is not None:
        scheme, _, key = header.strip().partition(" ")
        if scheme.lower() == "token":
            return key.strip()
    keys = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token")
    return keys[0] if keys else None


class ApiTokenQueryAuthMiddleware:
    """ASGI middleware: sets scope["user"] from the handshake's API token (`_handshake_key`) when it
    has one, and scope[TOKEN_ID_SCOPE_KEY] to the token's id (None for a key that signs nobody in)."""

    def __init__(self, inner):
        self.inner = inner

    async def __call__(self, scope, receive, send):
        key = _handshake_key(scope)
        if key is not None:
            client = scope.get("client") or ("", 0)  # Daphne --proxy-headers puts X-Forwarded-For here
            token = (await _token_for_key(key, client_ip=str(client[0] or ""), path=scope.get("path", ""))
                     if key else None)
            scope = dict(scope, user=token.user if token is not None else AnonymousUser(),
                         **{TOKEN_ID_SCOPE_KEY: token.pk if token is not None else None})
        return await self.inner(scope, receive, send)


_DEFAULT_PORTS = {"http": 80, "ws": 80, "https": 443, "wss": 443}


def _header(scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def _host_port(netloc: str) -> tuple[str, int | None] | None:
    """("host", port or None) of a Host header / origin netloc; None when it does not parse."""
    try:
        parts = urlsplit("//" + netloc)
        return (parts.hostname or "").lower(), parts.port
    except ValueError:
        return None


def origin_allowed(*, origin: str | None, host: str | None, allowed_hosts: list[str],
                   trusted_origins: list[str]) -> bool:
    """True when a WebSocket handshake's Origin is this site: same host AND port as the Host header
    the client connected to (a missing port is the scheme's default), the host among ALLOWED_HOSTS;
    or exactly one of CSRF_TRUSTED_ORIGINS. No Origin (or "null") is refused, as Channels does.
    """
    if not origin or origin == "null" or not host:
        return False
    try:
        parts = urlsplit(origin)
        origin_port = parts.port
    except ValueError:
        return False
    scheme, origin_host = parts.scheme.lower(), (parts.hostname or "").lower()
    if scheme not in _DEFAULT_PORTS or not origin_host:
        return False
    if origin_port is None:
        origin_port = _DEFAULT_PORTS[scheme]
    if any(origin.rstrip("/").lower() == trusted.rstrip("/").lower() for trusted in trusted_origins):
        return True
    target = _host_port(host)
    if target is None:
        return False
    host_name, host_port = target
    if host_port is None:
        host_port = _DEFAULT_PORTS[scheme]
    if (origin_host, origin_port) != (host_name, host_port):
        return False
    return validate_host(origin_host, allowed_hosts)


class SameOriginValidator:
    """ASGI middleware for WebSockets: a handshake whose Origin is not this site (host and port,
    see `origin_allowed`) is refused with 403 before it reaches authentication or a consumer.

    Replaces Channels' AllowedHostsOriginValidator, which compares host names only: a page served by
    another program on the same host (another port) could otherwise open a socket with the user's
    cookies."""

    def __init__(self, application):
        self.application = application

    async def __call__(self, scope, receive, send):
        if scope["type"] == "websocket":
            allowed_hosts = list(settings.ALLOWED_HOSTS)
            if settings.DEBUG and not allowed_hosts:
                allowed_hosts = ["localhost", "127.0.0.1", "[::1]"]
            if not origin_allowed(origin=_header(scope, b"origin"), host=_header(scope, b"host"),
                                  allowed_hosts=allowed_hosts,
                                  trusted_origins=list(settings.CSRF_TRUSTED_ORIGINS)):
                return await WebsocketDenier()(scope, receive, send)
        return await self.application(scope, receive, send)
