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


def _mask(payload: bytes) -> tuple[bytes, bytes]:
    key = os.urandom(4)
    return key, bytes(b ^ key[i % 4] for i, b in enumerate(payload))


class RunStream:
    """One open websocket on a run's events (see the module docstring).

    Frames are read from a buffer that keeps what has arrived across `wait` calls, so a frame (or a
    fragmented message) that comes slowly never holds a wait past its time; `timeout` bounds the
    connection, the whole handshake, and each send."""

    def __init__(self, base_url: str, token: str, run_id: int, *, timeout: float = 10.0):
        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise StreamClosed(f"not an http(s) address: {base_url}")
        self._timeout = timeout
        self._buffer = bytearray()
        self._message = bytearray()  # the fragments of a text message so far
        self._in_message = False
        self._sock = self._connect(parts, timeout)
        try:
            self._handshake(parts, token, run_id)
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _connect(parts: urllib.parse.SplitResult, timeout: float) -> socket.socket:
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
            sock = socket.create_connection((parts.hostname, port), timeout=timeout)
            if parts.scheme == "https":
                sock = ssl.create_default_context().wrap_socket(sock, server_hostname=parts.hostname)
        except (OSError, ssl.SSLError, ValueError) as exc:  # ValueError: a bad port; UnicodeError: a bad name
            raise StreamClosed(f"cannot connect ({exc})") from None
        return sock

    def _handshake(self, parts: urllib.parse.SplitResult, token: str, run_id: int) -> None:
        deadline = time.monotonic() + self._timeout
        key = base64.b64encode(os.urandom(16)).decode()
        if any(not (" " <= c <= "~") for c in token):
            raise StreamClosed("the token holds a character a header cannot carry")
        path = urllib.parse.quote(parts.path.rstrip("/"), safe="/%:@!$&'()*+,;=-._~")
        path = f"{path}/ws/runs/{int(run_id)}/?batch=1"
        try:
            host = parts.netloc.encode("idna").decode("ascii") if not parts.netloc.isascii() else parts.netloc
        except UnicodeError:
            raise StreamClosed(f"the host {parts.netloc!r} cannot be named in a handshake") from None
        request = (f"GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\n"
                   f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                   f"Origin: {parts.scheme}://{host}\r\nAuthorization: Token {token}\r\n"
                   f"User-Agent: rlstudio-cli\r\n\r\n")
        self._send_raw(request.encode("ascii"))
        while b"\r\n\r\n" not in self._buffer:
            if len(self._buffer) > MAX_HEADER_BYTES:
                raise StreamClosed("the handshake's answer is too long")
            if not self._recv(deadline):
                raise StreamClosed("the server did not answer the handshake in time")
        head, rest = bytes(self._buffer).split(b"\r\n\r\n", 1)
        self._buffer = bytearray(rest)
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
            self._sock.settimeout(self._timeout)
            self._sock.sendall(data)
        except OSError as exc:
            raise StreamClosed(f"the connection broke ({exc})") from None

    def _recv(self, deadline: float) -> bool:
        """Add what arrives before `deadline` to the buffer; False when nothing did in time."""
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        try:
            self._sock.settimeout(left)
            chunk = self._sock.recv(65536)
        except socket.timeout:
            return False
        except OSError as exc:
            raise StreamClosed(f"the connection broke ({exc})") from None
        if not chunk:
            raise StreamClosed("the server closed the connection")
        self._buffer += chunk
        return True

    def _send_frame(self, opcode: int, payload: bytes = b"") -> None:
        """A client frame: FIN set, masked (RFC 6455 §5.3), payload under 126 bytes (control frames)."""
        key, masked = _mask(payload[:125])
        self._send_raw(bytes([0x80 | opcode, 0x80 | len(masked)]) + key + masked)

    def _next_frame(self) -> tuple[int, bool, bytes] | None:
        """The next whole frame in the buffer, taken out of it: (opcode, FIN, payload); None while it
        has not all arrived. A frame RFC 6455 forbids, or one too large, raises StreamClosed."""
        buf = self._buffer
        if len(buf) < 2:
            return None
        first, second = buf[0], buf[1]
        opcode, fin, length, at = first & 0x0F, bool(first & 0x80), second & 0x7F, 2
        if second & 0x80:
            raise StreamClosed("the server masked a frame (RFC 6455 forbids it)")
        if first & 0x70:
            raise StreamClosed("the server broke the framing (reserved bits set)")
        if opcode & 0x08:
            if opcode not in (0x8, 0x9, 0xA) or not fin or length > 125:
                raise StreamClosed("the server broke the framing (a bad control frame)")
        elif opcode not in (0x0, 0x1, 0x2) or (opcode == 0x0) != self._in_message:
            raise StreamClosed("the server broke the framing (a data frame out of place)")
        if length == 126:
            if len(buf) < 4:
                return None
            length, at = struct.unpack_from("!H", buf, 2)[0], 4
        elif length == 127:
            if len(buf) < 10:
                return None
            length, at = struct.unpack_from("!Q", buf, 2)[0], 10
        if len(self._message) + length > MAX_MESSAGE_BYTES:
            raise StreamClosed("a message is too large")
        if len(buf) < at + length:
            return None
        payload = bytes(buf[at:at + length])
        del buf[:at + length]
        return opcode, fin, payload

    def _message_from(self, opcode: int, fin: bool, payload: bytes) -> str | None:
        """A frame taken in: the whole text message it ends, else None (pings answered, close frames
        raise StreamClosed)."""
        if opcode == 0x8:  # close: echo it, then say why
            code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005
            try:
                self._send_frame(0x8, payload[:2])
            except StreamClosed:
                pass
            raise StreamClosed(f"closed by the server ({code}: {CLOSE_REASONS.get(code, 'no reason given')})")
        if opcode == 0x9:  # ping: pong with its payload
            self._send_frame(0xA, payload)
            return None
        if opcode == 0xA:
            return None
        self._message += payload
        self._in_message = not fin
        if not fin:
            return None
        text = self._message.decode("utf-8", errors="replace")
        self._message = bytearray()
        return text

    def wait(self, seconds: float) -> bool:
        """Wait up to `seconds` for the run to report metrics or a status; True when it did. What
        arrives after that is kept for the next call."""
        deadline = time.monotonic() + seconds
        while True:
            frame = self._next_frame()
            if frame is None:
                if not self._recv(deadline):
                    return False
                continue
            text = self._message_from(*frame)
            if text is not None and any(ev.get("type") in WAKE_TYPES for ev in _events(text)):
                return True
            if time.monotonic() >= deadline:
                return False

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
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
        return []
    if not isinstance(frame, dict):
        return []
    if frame.get("type") == "batch":
        events = frame.get("events")
        return [ev for ev in events if isinstance(ev, dict)] if isinstance(events, list) else []
    return [frame]
