"""`rlstudio_cli.live.RunStream` against a scripted websocket server (a thread on a local socket): what a
broken or hostile server does to the watch. Whatever the server sends, `wait(seconds)` returns within
about `seconds` (False, or True on a run's report) or raises `StreamClosed`, and the constructor gives
up on a handshake after its `timeout`: the watch never hangs, and falls back to polling.

No database: these talk to the scripted server only."""
from __future__ import annotations

import base64
import hashlib
import json
import socket
import struct
import threading
import time

import pytest

from rlstudio_cli import live

pytestmark = pytest.mark.timeout(60)


def frame(opcode: int, payload: bytes = b"", *, fin: bool = True, mask: bytes | None = None) -> bytes:
    """One server frame (unmasked unless `mask`), with the 7-bit, 16-bit or 64-bit length form."""
    head = bytes([(0x80 if fin else 0) | opcode])
    mbit = 0x80 if mask else 0
    n = len(payload)
    if n < 126:
        head += bytes([mbit | n])
    elif n < 1 << 16:
        head += bytes([mbit | 126]) + struct.pack("!H", n)
    else:
        head += bytes([mbit | 127]) + struct.pack("!Q", n)
    if mask:
        payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        head += mask
    return head + payload


def text(obj) -> bytes:
    return frame(0x1, json.dumps(obj).encode())


METRICS = {"type": "batch", "events": [{"type": "metrics", "step": 1}]}


class Server:
    """Accepts one connection, answers the handshake (unless `handshake` says otherwise), then runs
    `script(conn)`; what the client sent after the handshake is kept in `received`."""

    def __init__(self, script, *, handshake=None):
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(1)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.script, self.handshake = script, handshake
        self.received = b""
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        conn, _ = self.listener.accept()
        with conn:
            request = b""
            while b"\r\n\r\n" not in request:
                request += conn.recv(4096)
            self.request = request.decode("latin-1")
            key = next(line.split(":", 1)[1].strip() for line in self.request.split("\r\n")
                       if line.lower().startswith("sec-websocket-key:"))
            accept = base64.b64encode(hashlib.sha1((key + live.GUID).encode()).digest()).decode()
            answer = (f"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                      f"Sec-WebSocket-Accept: {accept}\r\n\r\n").encode()
            try:
                if self.handshake is not None:
                    self.handshake(conn, answer, self)
                    return
                conn.sendall(answer)
                conn.settimeout(0.05)
                self.script(conn, self)
            except OSError:
                pass

    def idle(self, conn, seconds):
        """Sleep `seconds`, keeping what the client sends."""
        end = time.monotonic() + seconds
        while time.monotonic() < end and not self.stop.is_set():
            try:
                chunk = conn.recv(4096)
            except socket.timeout:
                continue
            if not chunk:
                return
            self.received += chunk

    def close(self):
        self.stop.set()
        self.listener.close()


def open_and_wait(server, seconds=1.0):
    """A stream on `server` (1 s socket timeout), one timed_wait of `seconds`, the stream closed."""
    stream = live.RunStream(server.url, "rls_key", 7, timeout=1.0)
    try:
        return timed_wait(stream, seconds)
    finally:
        stream.close()


def timed_wait(stream, seconds):
    """(what wait() returned or raised, seconds it took), run on a thread so that a hang fails the test."""
    box = {}

    def target():
        t0 = time.monotonic()
        try:
            box["value"] = stream.wait(seconds)
        except live.StreamClosed as exc:
            box["value"] = exc
        box["took"] = time.monotonic() - t0

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds + 8)
    assert not thread.is_alive(), f"wait({seconds}) did not return"
    return box["value"], box["took"]


@pytest.fixture
def serve():
    servers = []

    def make(script, **kwargs):
        server = Server(script, **kwargs)
        servers.append(server)
        return server

    yield make
    for s in servers:
        s.close()


def test_a_ping_then_quiet_keeps_the_stream(serve):
    """Daphne pings an idle socket every 20 s. The ping is answered and the stream stays open through the
    quiet after it (it used to wait for another frame within the socket's timeout, then give up)."""
    def script(conn, server):
        conn.sendall(frame(0x9, b"hi"))
        server.idle(conn, 2.5)
        conn.sendall(text(METRICS))
        server.idle(conn, 5)

    server = serve(script)
    stream = live.RunStream(server.url, "rls_key", 7, timeout=1.0)
    try:
        value, took = timed_wait(stream, 2.0)
        assert value is False and took < 3.0
        value, _ = timed_wait(stream, 5.0)
        assert value is True
    finally:
        stream.close()
    # The pong: masked, with the ping's payload.
    assert server.received[:2] == bytes([0x8A, 0x80 | 2])
    mask = server.received[2:6]
    assert bytes(b ^ mask[i % 4] for i, b in enumerate(server.received[6:8])) == b"hi"


def test_endless_pings_do_not_hold_the_watch(serve):
    def script(conn, server):
        while not server.stop.is_set():
            conn.sendall(frame(0x9))
            server.idle(conn, 0.01)

    server = serve(script)
    value, took = open_and_wait(server)
    assert value is False and took < 3.0


def test_endless_empty_fragments_do_not_hold_the_watch_nor_grow(serve):
    def script(conn, server):
        conn.sendall(frame(0x1, b"[", fin=False))
        while not server.stop.is_set():
            conn.sendall(frame(0x0, fin=False) * 1000)

    server = serve(script)
    value, took = open_and_wait(server)
    assert (value is False or isinstance(value, live.StreamClosed)) and took < 3.0


def test_a_trickled_frame_does_not_hold_the_watch(serve):
    """A frame announced at 1,000 bytes, then one byte every 0.2 s (each within the socket's timeout):
    wait() returns at its time, the frame's bytes kept for the next wait()."""
    def script(conn, server):
        payload = json.dumps(METRICS).encode().ljust(1000)
        data = frame(0x1, payload)
        for i in range(len(data)):
            if server.stop.is_set():
                return
            conn.sendall(data[i:i + 1])
            server.idle(conn, 0.2)

    server = serve(script)
    value, took = open_and_wait(server)
    assert value is False and took < 3.0


def test_a_trickled_handshake_gives_up_after_the_timeout(serve):
    def handshake(conn, answer, server):
        for i in range(len(answer)):
            if server.stop.is_set():
                return
            conn.sendall(answer[i:i + 1])
            time.sleep(0.3)

    server = serve(None, handshake=handshake)
    box = {}

    def target():
        t0 = time.monotonic()
        try:
            box["value"] = live.RunStream(server.url, "rls_key", 7, timeout=1.0)
        except live.StreamClosed as exc:
            box["value"] = exc
        box["took"] = time.monotonic() - t0

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive(), "the handshake did not give up"
    assert isinstance(box["value"], live.StreamClosed) and box["took"] < 4.0
    assert "in time" in str(box["value"])


def test_fragments_with_a_ping_between_and_a_64_bit_length(serve):
    """A text message in three fragments with a ping between two of them, then one whose length takes
    the 64-bit form: both read whole (the first wakes the watch), the ping answered."""
    body = json.dumps(METRICS).encode()

    def script(conn, server):
        conn.sendall(frame(0x1, body[:5], fin=False) + frame(0x0, body[5:9], fin=False) + frame(0x9, b"p")
                     + frame(0x0, body[9:]))
        big = json.dumps({"type": "batch", "events": [{"type": "status", "x": "y" * 70000}]}).encode()
        server.idle(conn, 0.5)
        conn.sendall(frame(0x1, big))
        server.idle(conn, 5)

    server = serve(script)
    stream = live.RunStream(server.url, "rls_key", 7, timeout=2.0)
    try:
        assert timed_wait(stream, 5.0)[0] is True
        assert timed_wait(stream, 5.0)[0] is True
    finally:
        stream.close()
    assert server.received[:1] == bytes([0x8A])


@pytest.mark.parametrize("data, why", [
    (frame(0x1, b"{}", mask=b"abcd"), "masked"),
    (bytes([0x81, 127]) + struct.pack("!Q", 1 << 63), "too large"),
    (frame(0x0, b"x"), "framing"),
    (frame(0x9, b"x" * 126), "framing"),
])
def test_a_broken_frame_closes_the_stream_with_a_reason(serve, data, why):
    def script(conn, server):
        conn.sendall(data)
        server.idle(conn, 5)

    server = serve(script)
    stream = live.RunStream(server.url, "rls_key", 7, timeout=1.0)
    try:
        value, took = timed_wait(stream, 3.0)
        assert isinstance(value, live.StreamClosed) and why in str(value), value
    finally:
        stream.close()


def test_a_close_frame_says_its_code(serve):
    def script(conn, server):
        conn.sendall(frame(0x8, struct.pack("!H", 4403) + b"no"))
        server.idle(conn, 2)

    server = serve(script)
    stream = live.RunStream(server.url, "rls_key", 7, timeout=1.0)
    try:
        value, _ = timed_wait(stream, 3.0)
        assert "4403" in str(value)
    finally:
        stream.close()


def test_the_token_goes_in_the_header_only(serve):
    server = serve(lambda conn, server: server.idle(conn, 1))
    stream = live.RunStream(server.url + "/prefix", "rls_secret", 7, timeout=1.0)
    stream.close()
    first = server.request.split("\r\n")[0]
    assert first == "GET /prefix/ws/runs/7/?batch=1 HTTP/1.1" and "rls_secret" not in first
    assert "Authorization: Token rls_secret\r\n" in server.request


@pytest.mark.parametrize("url", ["http://127.0.0.1:{port}/pr\u00e9fix", "http://127.0.0.1:{port}/a b"])
def test_an_address_that_cannot_be_sent_is_a_note_not_a_traceback(serve, url):
    server = serve(lambda conn, server: server.idle(conn, 1))
    port = server.url.rsplit(":", 1)[1]
    try:
        live.RunStream(url.format(port=port), "rls_key", 7, timeout=1.0).close()
    except live.StreamClosed:
        pass


@pytest.mark.parametrize("body", [
    b"[" * 200_000 + b"]" * 200_000,  # deeper than json's recursion
    json.dumps({"type": "batch", "events": 5}).encode(),
    json.dumps({"type": "batch", "events": "metrics"}).encode(),
])
def test_a_message_that_is_no_event_wakes_nothing_and_breaks_nothing(serve, body):
    def script(conn, server):
        conn.sendall(frame(0x1, body))
        server.idle(conn, 0.3)
        conn.sendall(text(METRICS))
        server.idle(conn, 5)

    server = serve(script)
    stream = live.RunStream(server.url, "rls_key", 7, timeout=1.0)
    try:
        assert timed_wait(stream, 5.0)[0] is True  # the metrics after it, not a traceback
    finally:
        stream.close()
