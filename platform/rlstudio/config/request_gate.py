"""Request bodies checked before they are read: size, the uploader's credentials, a minimum rate.

Daphne (Twisted underneath) reads a request's whole body into a temporary file before it calls the
ASGI application, so no ASGI middleware can refuse a 2 GB upload before it has been written to disk.
The gate therefore sits inside Daphne, between a request's headers and its body:
`daphne_gate.install_daphne_gate()` (called by rlstudio.config.asgi when the application is loaded,
which the `daphne` command does before it builds its HTTP factory) makes Daphne's requests consult it:

- every request with a body: a declared Content-Length over the limit answers 413 at once
  (uploads: RLSTUDIO_MAX_UPLOAD_BYTES + 1 MiB of multipart envelope; anything else:
  RLSTUDIO_MAX_REQUEST_BYTES); a chunked body is counted as it arrives and cut off there;
- an upload (POST /api/v1/datasets/): without a Content-Length 411; the socket is paused while its
  session cookie or API token is checked (in a thread), and without a valid one it answers 401;
- a body must arrive within RLSTUDIO_BODY_TIMEOUT_S plus one second per RLSTUDIO_BODY_MIN_RATE
  bytes received, else 408 (Twisted's own idle timeout is twelve hours).

A refusal is a complete HTTP/1.1 response in the API's error shape with `Connection: close`; the
connection then reads and drops what the client still sends for a moment (so that it reads the
answer rather than a reset) and closes. Django's own checks (catalog.api.check_request_size, CSRF,
DRF authentication) still run on what passes. `RequestGateMiddleware` applies the same rules as ASGI
middleware for servers that stream a body to the application (config/asgi.py wraps Django in it).
"""
from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from dataclasses import dataclass
from http import HTTPStatus
from urllib.parse import unquote, urlsplit

from django.conf import settings

logger = logging.getLogger(__name__)

MULTIPART_SLACK = 1 << 20  # the multipart envelope around the file (catalog.api.check_request_size)
LINGER_S = 2.0  # after a refusal, how long the rest of a body is read and dropped before closing
UPLOAD_ROUTES = (("POST", re.compile(r"^/api/v1/datasets/?$")),)


@dataclass(frozen=True)
class Refusal:
    """An answer given instead of reading the body."""

    status: int
    code: str
    message: str
    field: str | None = None
    www_authenticate: str | None = None

    def http_response(self) -> bytes:
        """The whole response on the wire: status line, headers, the API's error body."""
        body = json.dumps({"error": {"code": self.code, "message": self.message, "field": self.field,
                                     "line": None}}).encode()
        head = [f"HTTP/1.1 {self.status} {HTTPStatus(self.status).phrase}",
                "Content-Type: application/json", f"Content-Length: {len(body)}", "Connection: close"]
        if self.www_authenticate:
            head.append(f"WWW-Authenticate: {self.www_authenticate}")
        return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


def is_upload(method: str, path: str) -> bool:
    return any(method == m and pattern.match(path) for m, pattern in UPLOAD_ROUTES)


def body_limit(method: str, path: str) -> int:
    """The most bytes a request's body may have."""
    if is_upload(method, path):
        return settings.RLSTUDIO_MAX_UPLOAD_BYTES + MULTIPART_SLACK
    return settings.RLSTUDIO_MAX_REQUEST_BYTES


def check_declared(*, method: str, path: str, length: int | None) -> Refusal | None:
    """The headers' verdict on a request with a body: `length` None means no Content-Length
    (chunked). None: go on reading."""
    limit = body_limit(method, path)
    upload = is_upload(method, path)
    if length is None:
        if upload:
            return Refusal(411, "length_required", "an upload must declare its Content-Length")
        return None
    if length > limit:
        what = ("the upload", "RLSTUDIO_MAX_UPLOAD_BYTES") if upload else ("the request body",
                                                                           "RLSTUDIO_MAX_REQUEST_BYTES")
        return Refusal(413, "too_large", f"{what[0]} is {length} bytes, over the limit of {limit} "
                       f"bytes ({what[1]})", field="file" if upload else None)
    return None


def over_limit(*, method: str, path: str, received: int) -> Refusal | None:
    """A body (chunked, or longer than declared) that has grown past its limit."""
    limit = body_limit(method, path)
    if received > limit:
        return Refusal(413, "too_large", f"the request body is over the limit of {limit} bytes")
    return None


class BodyClock:
    """The minimum rate of a body: it must be complete by
    start + RLSTUDIO_BODY_TIMEOUT_S + received / RLSTUDIO_BODY_MIN_RATE."""

    def __init__(self, *, now: float | None = None) -> None:
        self.start = time.monotonic() if now is None else now
        self.received = 0
        self.timeout_s = float(settings.RLSTUDIO_BODY_TIMEOUT_S)
        self.min_rate = max(1, int(settings.RLSTUDIO_BODY_MIN_RATE))

    def add(self, nbytes: int) -> None:
        self.received += nbytes

    def deadline(self) -> float:
        return self.start + self.timeout_s + self.received / self.min_rate

    def refusal(self) -> Refusal:
        return Refusal(408, "body_timeout",
                       f"the request body arrived too slowly ({self.received} bytes in "
                       f"{time.monotonic() - self.start:.0f} s; at least {self.min_rate} bytes/s after "
                       f"the first {self.timeout_s:g} s: RLSTUDIO_BODY_TIMEOUT_S, RLSTUDIO_BODY_MIN_RATE)")


def credentials_refusal(*, cookie: str | None, authorization: str | None, client_ip: str,
                        path: str) -> Refusal | None:
    """None when the headers carry a valid session or API token; else the 401 (or the 429 of a
    locked-out address). Synchronous: touches the database (run it in a thread)."""
    from django.contrib.auth import get_user
    from django.http import HttpRequest, parse_cookie

    from rlstudio.accounts.throttle import api_token_throttled, cooloff_minutes, lockout_message

    unauthenticated = Refusal(401, "not_authenticated", "log in or send 'Authorization: Token <key>' "
                              "before uploading", www_authenticate="Token")
    parts = (authorization or "").split()
    if parts and parts[0].lower() == "token":
        request = HttpRequest()
        request.META.update(REMOTE_ADDR=client_ip, PATH_INFO=path)
        key = parts[1] if len(parts) == 2 else ""
        token, locked = api_token_throttled(request=request, key=key)
        if token is not None:
            return None
        if locked:
            return Refusal(429, "throttled", lockout_message(request, what="failed API tokens") +
                           f" Expected available in {cooloff_minutes(request) * 60} seconds.")
        return unauthenticated
    session_key = parse_cookie(cookie or "").get(settings.SESSION_COOKIE_NAME)
    if session_key:
        from importlib import import_module

        request = HttpRequest()
        request.session = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
        if get_user(request).is_authenticated:
            return None
    return unauthenticated


async def _answer(send, refusal: Refusal) -> None:
    head, _, body = refusal.http_response().partition(b"\r\n\r\n")
    headers = [tuple(part.strip().lower() if i == 0 else part.strip() for i, part in
                     enumerate(line.split(b":", 1))) for line in head.split(b"\r\n")[1:]]
    await send({"type": "http.response.start", "status": refusal.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class RequestGateMiddleware:
    """The same gate as ASGI middleware, in front of Django, for servers that hand a body to the
    application as it arrives (uvicorn, hypercorn): the declared size, an upload's credentials and
    the minimum rate are checked before Django's handler reads the body. Under Daphne the body is in
    before the application runs (the Daphne gate checked it), so these checks pass at once."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.lower(): v for k, v in scope.get("headers", ())}
        chunked = b"chunked" in headers.get(b"transfer-encoding", b"").lower()
        raw_length = headers.get(b"content-length")
        if raw_length is None and not chunked:
            return await self.app(scope, receive, send)  # no body
        method, path = scope["method"], scope["path"]
        try:
            length = None if chunked else int(raw_length)
        except ValueError:
            return await _answer(send, Refusal(400, "invalid", "Content-Length is not a number"))
        if length == 0:
            return await self.app(scope, receive, send)
        refusal = check_declared(method=method, path=path, length=length)
        if refusal is None and is_upload(method, path):
            from channels.db import database_sync_to_async

            refusal = await database_sync_to_async(credentials_refusal)(
                cookie=headers.get(b"cookie", b"").decode("latin-1"),
                authorization=headers.get(b"authorization", b"").decode("latin-1"),
                client_ip=(scope.get("client") or ("",))[0], path=path)
        if refusal is not None:
            return await _answer(send, refusal)
        return await self.app(scope, self._gated_receive(receive, send, method, path), send)

    @staticmethod
    def _gated_receive(receive, send, method: str, path: str):
        clock = BodyClock()
        done = False

        async def gated():
            nonlocal done
            if done:
                return await receive()  # the body is in: waiting for a disconnect is not timed
            try:
                message = await asyncio.wait_for(receive(), max(0.001, clock.deadline() - time.monotonic()))
            except asyncio.TimeoutError:
                refusal = clock.refusal()
            else:
                if message["type"] != "http.request":
                    return message
                clock.add(len(message.get("body", b"")))
                refusal = over_limit(method=method, path=path, received=clock.received)
                if refusal is None:
                    done = not message.get("more_body", False)
                    return message
            done = True
            await _answer(send, refusal)
            return {"type": "http.disconnect"}  # Django's handler stops reading and answers nothing

        return gated


def request_target(raw: bytes) -> str:
    """The unquoted path of a request line's target (as Daphne puts it in the ASGI scope)."""
    return unquote(urlsplit(raw.decode("latin-1")).path)
