"""Daphne's HTTP request with the request gate between its headers and its body.

Twisted's HTTPChannel calls `Request.gotLength(length)` once a request's headers are parsed and
before any byte of its body is handled; Daphne's WebRequest then spools the body and runs the ASGI
application only when all of it is in. `GatedWebRequest` decides at `gotLength` (policy in
rlstudio.config.request_gate): refuse at once, hold the socket while an upload's credentials are
checked, or read the body under the minimum-rate clock. Imported only inside a Daphne server (by
`install_daphne_gate`, called by rlstudio.config.asgi), where Twisted's asyncio reactor runs the event loop.

Twisted internals used (pinned: Twisted and daphne in requirements.txt; tests/rlstudio/
test_hardening.py drives a real Daphne through each case): `HTTPChannel._command` / `_path` (the
request line, set before `gotLength`), `HTTPChannel._send100Continue`, `LineReceiver.paused`
(stops parsing what is buffered) and the transport's pause/resume.
"""
from __future__ import annotations

import asyncio
import logging
import sys
import time

from channels.db import database_sync_to_async
from daphne.http_protocol import HTTPFactory, WebRequest
from twisted.internet import reactor

from .request_gate import (LINGER_S, BodyClock, Refusal, check_declared, credentials_refusal,
                           is_upload, over_limit, request_target)

logger = logging.getLogger(__name__)


class GatedWebRequest(WebRequest):
    """Daphne's WebRequest that answers 401 / 408 / 411 / 413 without reading (or keeping) the body."""

    _gate_method = ""
    _gate_path = ""
    _gate_received = 0
    _gate_clock: BodyClock | None = None
    _gate_timer = None
    _gate_linger = None
    _gate_refused = False
    _gate_holding = False
    _gate_expect = False
    _gate_done = False
    _gate_lost = False

    # -- Twisted's hooks -------------------------------------------------------------------------
    def gotLength(self, length):
        super().gotLength(length)
        if length == 0:
            return  # no body: nothing to guard
        self._gate_method = self.channel._command.decode("latin-1")
        self._gate_path = request_target(self.channel._path)
        refusal = check_declared(method=self._gate_method, path=self._gate_path, length=length)
        if refusal is not None or is_upload(self._gate_method, self._gate_path):
            # Twisted answers `Expect: 100-continue` right after this hook: not before the verdict.
            self._gate_expect = self.requestHeaders.hasHeader(b"expect")
            self.requestHeaders.removeHeader(b"expect")
        if refusal is not None:
            self._gate_refuse(refusal)
        elif is_upload(self._gate_method, self._gate_path):
            self._gate_hold()
        else:
            self._gate_start_clock()

    def handleContentChunk(self, data):
        if self._gate_refused:
            return  # read and dropped while the refusal lingers
        self._gate_received += len(data)
        if self._gate_clock is not None:
            self._gate_clock.add(len(data))
        if self._gate_method:
            refusal = over_limit(method=self._gate_method, path=self._gate_path, received=self._gate_received)
            if refusal is not None:
                self._gate_refuse(refusal)
                return
        super().handleContentChunk(data)

    def requestReceived(self, command, path, version):
        self._gate_done = True
        self._gate_cancel_timer()
        if self._gate_refused:
            return  # answered already; the linger closes the connection
        super().requestReceived(command, path, version)

    def connectionLost(self, reason):
        self._gate_lost = True
        self._gate_cancel_timer()
        if self._gate_linger is not None and self._gate_linger.active():
            self._gate_linger.cancel()
        super().connectionLost(reason)

    # -- the gate --------------------------------------------------------------------------------
    def _gate_client(self) -> str:
        return getattr(self.getClientAddress(), "host", "") or ""  # "" on a unix socket

    def _gate_hold(self) -> None:
        """Stop reading and check the upload's credentials in a thread (they need the database)."""
        channel = self.channel
        channel.paused = True  # LineReceiver: what is already buffered waits too
        channel.transport.pauseProducing()
        self._gate_holding = True
        headers = self.requestHeaders
        cookie = b"; ".join(headers.getRawHeaders(b"cookie") or []).decode("latin-1")
        authorization = (headers.getRawHeaders(b"authorization") or [b""])[0].decode("latin-1")
        check = database_sync_to_async(credentials_refusal)(
            cookie=cookie, authorization=authorization, client_ip=self._gate_client(),
            path=self._gate_path)
        asyncio.ensure_future(check).add_done_callback(self._gate_checked)

    def _gate_checked(self, future: asyncio.Future) -> None:
        if self._gate_lost:
            return
        try:
            refusal = future.result()
        except Exception:  # noqa: BLE001 — the database is down: say so rather than hang
            logger.exception("checking an upload's credentials failed")
            refusal = Refusal(503, "unavailable", "could not check the credentials; try again")
        if refusal is not None:
            self._gate_refuse(refusal)
            return
        if self._gate_expect:
            self.channel._send100Continue()
        self._gate_release()
        self._gate_start_clock()

    def _gate_release(self) -> None:
        """Read again, starting with what was buffered while held."""
        if not self._gate_holding:
            return
        self._gate_holding = False
        channel = self.channel
        channel.paused = False
        channel.transport.resumeProducing()
        channel.dataReceived(b"")

    def _gate_start_clock(self) -> None:
        self._gate_clock = BodyClock()
        self._gate_arm()

    def _gate_arm(self) -> None:
        delay = max(0.0, self._gate_clock.deadline() - time.monotonic())
        self._gate_timer = reactor.callLater(delay, self._gate_tick)

    def _gate_tick(self) -> None:
        self._gate_timer = None
        if self._gate_refused or self._gate_done or self._gate_lost:
            return
        if time.monotonic() >= self._gate_clock.deadline():
            self._gate_refuse(self._gate_clock.refusal())
        else:
            self._gate_arm()  # bytes came in since: the deadline moved on

    def _gate_cancel_timer(self) -> None:
        if self._gate_timer is not None and self._gate_timer.active():
            self._gate_timer.cancel()
        self._gate_timer = None

    def _gate_refuse(self, refusal: Refusal) -> None:
        """Answer now, stop keeping the body, drop what still comes for LINGER_S, then close."""
        self._gate_refused = True
        self._gate_cancel_timer()
        transport = self.channel.transport
        logger.info("request gate: %s %s from %s refused %s (%s)", self._gate_method, self._gate_path,
                    self._gate_client(), refusal.status, refusal.code)
        transport.write(refusal.http_response())
        try:
            transport.loseWriteConnection()  # FIN after the answer; keep reading to drop the rest
        except (AttributeError, NotImplementedError):
            pass
        self._gate_release()
        self._gate_linger = reactor.callLater(LINGER_S, self._gate_close)

    def _gate_close(self) -> None:
        self._gate_linger = None
        transport = self.channel.transport if self.channel is not None else None
        if transport is not None:
            transport.loseConnection()


class GatedHTTPFactory(HTTPFactory):
    """Daphne's HTTP factory whose connections build `GatedWebRequest`s."""

    def buildProtocol(self, addr):
        protocol = super().buildProtocol(addr)
        if protocol is not None:
            protocol.requestFactory = GatedWebRequest
        return protocol


def install_daphne_gate() -> bool:
    """Make the Daphne server of this process build gated requests; False when this process is
    not a Daphne server (daphne.server not imported: its import would install Twisted's reactor).

    Replaces `daphne.server.HTTPFactory` (the name `Server.run()` builds its factory from) by a
    subclass whose protocols use `rlstudio.config.daphne_gate.GatedWebRequest`. Idempotent."""
    server = sys.modules.get("daphne.server")
    if server is None:
        return False
    if server.HTTPFactory is not GatedHTTPFactory:
        server.HTTPFactory = GatedHTTPFactory
    return True
