"""A run's live stream for `runs watch`: the platform's read-only websocket `/ws/runs/<id>/`, with the
client's API token in the handshake's `Authorization` header (never in the URL, which proxies and
access logs record), spoken with the standard library only (RFC 6455: the opening handshake,
unmasked server frames, masked control replies).

`RunStream.wait(seconds)` returns as soon as the run reports metrics or a status change (or after
`seconds`), so the watch fetches the new steps at once instead of at its next poll. The stream only
wakes the watch: what it prints still comes from the REST API, so a lost frame costs latency, never a
step. Anything that stops the stream (a proxy without websockets, a refusal code, a dropped
connection) raises `StreamClosed`, and the watch goes on polling.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import select
import socket
import ssl
import struct
import time
import urllib.parse
from typing import Any

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455's constant for Sec-WebSocket-Accept
MAX_HEADER_BYTES = 16 * 1024
MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # a replay chunk of 1,000 events fits many times over
WAKE_TYPES = frozenset({"metrics", "status"})  # what makes the watch fetch: new steps, an ended run
CLOSE_REASONS = {4401: "the token was refused", 4403: "the run is not yours to read (or is gone)",
                 4503: "the server's channel layer stopped delivering", 1001: "the server is going away"}


class StreamClosed(Exception):
    """The stream cannot be opened or has ended; `str()` says why, in a few words."""


def _origin(parts: urllib.parse.SplitResult) -> str:
    return f"{parts.scheme}://{parts.netloc}"


def _mask(payload: bytes) -> tuple[bytes, bytes]:
    key = os.urandom(4)
    return key, bytes(b ^ key[i % 4] for i, b in enumerate(payload))


class RunStream:
    """One open websocket on a run's events (see the module docstring)."""

    def __init__(self, base_url: str, token: str, run_id: int, *, timeout: float = 10.0):
        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise StreamClosed(f"not an http(s) address: {base_url}")
        self._buffer = b""
        self._sock = self._connect(parts, timeout)
        try:
            self._handshake(parts, token, run_id)
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _connect(parts: urllib.parse.SplitResult, timeout: float) -> socket.socket:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            sock = socket.create_connection((parts.hostname, port), timeout=timeout)
            if parts.scheme == "https":
                sock = ssl.create_default_context().wrap_socket(sock, server_hostname=parts.hostname)
        except (OSError, ssl.SSLError) as exc:
            raise StreamClosed(f"cannot connect ({exc})") from None
        return sock

    def _handshake(self, parts: urllib.parse.SplitResult, token: str, run_id: int) -> None:
        key = base64.b64encode(os.urandom(16)).decode()
        if any(c in token for c in "\r\n"):
            raise StreamClosed("the token holds a line break")
        path = f"{parts.path.rstrip('/')}/ws/runs/{int(run_id)}/?batch=1"
        request = (f"GET {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nUpgrade: websocket\r\n"
                   f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                   f"Origin: {_origin(parts)}\r\nAuthorization: Token {token}\r\n"
                   f"User-Agent: rlstudio-cli\r\n\r\n")
        self._send_raw(request.encode("ascii"))
        while b"\r\n\r\n" not in self._buffer:
            if len(self._buffer) > MAX_HEADER_BYTES:
                raise StreamClosed("the handshake's answer is too long")
            self._fill()
        head, self._buffer = self._buffer.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = lines[0].split(" ", 2)
        if len(status) < 2 or status[1] != "101":
            raise StreamClosed(f"the server answered {' '.join(status[1:]) or 'nothing'} to the websocket handshake")
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        accept = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
        if headers.get("sec-websocket-accept") != accept:
            raise StreamClosed("the server's handshake answer is not a websocket's")

    def _send_raw(self, data: bytes) -> None:
        try:
            self._sock.sendall(data)
        except OSError as exc:
            raise StreamClosed(f"the connection broke ({exc})") from None

    def _fill(self) -> None:
        try:
            chunk = self._sock.recv(65536)
        except socket.timeout:
            raise StreamClosed("the server did not answer in time") from None
        except OSError as exc:
            raise StreamClosed(f"the connection broke ({exc})") from None
        if not chunk:
            raise StreamClosed("the server closed the connection")
        self._buffer += chunk

    def _take(self, n: int) -> bytes:
        while len(self._buffer) < n:
            self._fill()
        data, self._buffer = self._buffer[:n], self._buffer[n:]
        return data

    def _send_frame(self, opcode: int, payload: bytes = b"") -> None:
        """A client frame: FIN set, masked (RFC 6455 §5.3), payload under 126 bytes (control frames)."""
        key, masked = _mask(payload[:125])
        self._send_raw(bytes([0x80 | opcode, 0x80 | len(masked)]) + key + masked)

    def _read_message(self) -> str:
        """The next text message (fragments joined); pings answered, close frames raise StreamClosed."""
        parts: list[bytes] = []
        while True:
            first, second = self._take(2)
            opcode, length = first & 0x0F, second & 0x7F
            if length == 126:
                length = struct.unpack("!H", self._take(2))[0]
            elif length == 127:
                length = struct.unpack("!Q", self._take(8))[0]
            mask = self._take(4) if second & 0x80 else b""
            if length > MAX_MESSAGE_BYTES or sum(map(len, parts)) + length > MAX_MESSAGE_BYTES:
                raise StreamClosed("a message is too large")
            payload = self._take(length)
            if mask:
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            if opcode == 0x8:  # close: echo it, then say why
                code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005
                try:
                    self._send_frame(0x8, payload[:2])
                except StreamClosed:
                    pass
                raise StreamClosed(f"closed by the server ({code}: {CLOSE_REASONS.get(code, 'no reason given')})")
            if opcode == 0x9:  # ping: pong with its payload
                self._send_frame(0xA, payload)
                continue
            if opcode == 0xA:
                continue
            parts.append(payload)
            if first & 0x80:
                return b"".join(parts).decode("utf-8", errors="replace")

    def _ready(self, seconds: float) -> bool:
        if self._buffer:
            return True
        pending = getattr(self._sock, "pending", None)  # TLS: bytes decrypted but not read yet
        if pending is not None and pending():
            return True
        readable, _, _ = select.select([self._sock], [], [], max(0.0, seconds))
        return bool(readable)

    def wait(self, seconds: float) -> bool:
        """Wait up to `seconds` for the run to report metrics or a status; True when it did."""
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self._ready(left):
                return False
            if any(ev.get("type") in WAKE_TYPES for ev in _events(self._read_message())):
                return True

    def close(self) -> None:
        try:
            self._send_frame(0x8, struct.pack("!H", 1000))
        except (StreamClosed, OSError):
            pass
        try:
            self._sock.close()
        except OSError:
            pass


def _events(text: str) -> list[dict[str, Any]]:
    """The events of one frame: a batch's list, or the one event (an error frame has none)."""
    try:
        frame = json.loads(text)
    except ValueError:
        return []
    if not isinstance(frame, dict):
        return []
    if frame.get("type") == "batch":
        return [ev for ev in frame.get("events") or [] if isinstance(ev, dict)]
    return [frame]
