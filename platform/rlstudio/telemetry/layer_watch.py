"""Layer watch: tells this process's websocket consumers when the channel layer stops delivering.

The channel layer is channels_redis's pub/sub layer (settings: CHANNEL_LAYERS), which delivers at
most once: while its subscriber connection to Redis is down (a Redis restart) group messages are
lost, and although its receive task reconnects and resubscribes, it tells no consumer
(`on_disconnect` / `on_reconnect` are accepted and never called in channels_redis 4.3). A viewer
whose socket stayed open would miss those events without knowing.

So, while at least one consumer is registered, one task per event loop (one per server process)
sends a probe through the layer to a channel of its own every `interval` seconds and expects it
back within `timeout`. When a probe fails (the send or the subscribe raises, or nothing comes back)
every registered callback runs once and the registry is emptied: RunConsumer closes its socket and
the browser reconnects with resume_after, which replays from the database what the layer lost.
Probing goes on while consumers are registered (new ones, once Redis is back) and stops when none is.

An outage shorter than the probe interval can pass unnoticed here; the run page also reconnects when
it sees a seq gap (static/js/run_live.js). Cost: one publish and one delivery per interval per
process, whatever the number of viewers.
"""
from __future__ import annotations

import asyncio
import logging
import weakref
from typing import Callable

log = logging.getLogger(__name__)

PROBE_INTERVAL_S = 2.0
# Generous: a false alarm closes every socket of the process at once (each then reconnects and
# replays), and a server loaded enough to hold a probe that long must not be made busier. A stopped
# Redis is seen sooner anyway: the probe's publish fails at once.
PROBE_TIMEOUT_S = 10.0
PROBE_TYPE = "layer.probe"

_watches: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LayerWatch]" = weakref.WeakKeyDictionary()


def layer_watch(layer) -> "LayerWatch":
    """The watch of `layer` for the running event loop (made on first use)."""
    loop = asyncio.get_running_loop()
    watch = _watches.get(loop)
    if watch is None or watch.layer is not layer:
        watch = _watches[loop] = LayerWatch(layer)
    return watch


class LayerWatch:
    """The probe task of one event loop and the callbacks to run when the layer is lost."""

    def __init__(self, layer, *, interval: float = PROBE_INTERVAL_S, timeout: float = PROBE_TIMEOUT_S):
        self.layer = layer
        self.interval, self.timeout = interval, timeout
        self._callbacks: set[Callable[[], None]] = set()
        self._task: asyncio.Task | None = None
        self._expect: tuple[int, asyncio.Future] | None = None  # the probe in flight: (n, its arrival)

    def add(self, callback: Callable[[], None]) -> None:
        """Call `callback()` (once) when the layer is found lost; starts probing if it was not."""
        self._callbacks.add(callback)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def discard(self, callback: Callable[[], None]) -> None:
        """Forget `callback` (a consumer that went away); probing stops with the last one."""
        self._callbacks.discard(callback)

    def _lost(self, reason: str) -> None:
        callbacks, self._callbacks = list(self._callbacks), set()
        log.warning("channel layer lost (%s): closing %d websocket(s) so they resume", reason, len(callbacks))
        for callback in callbacks:
            try:
                callback()
            except Exception:
                log.exception("layer watch: a callback failed")

    async def _receive(self, channel: str) -> None:
        while True:
            message = await self.layer.receive(channel)
            if self._expect is not None and message.get("n") == self._expect[0] and not self._expect[1].done():
                self._expect[1].set_result(None)

    async def _probe(self, channel: str, n: int) -> None:
        arrived = asyncio.get_running_loop().create_future()
        self._expect = (n, arrived)
        await self.layer.send(channel, {"type": PROBE_TYPE, "n": n})
        await arrived

    async def _run(self) -> None:
        channel, receiver, n = None, None, 0
        try:
            while True:
                await asyncio.sleep(self.interval)
                if not self._callbacks:
                    self._task = None  # no await since the check: a later add() starts a new task
                    return
                n += 1
                try:
                    if channel is None:
                        channel = await asyncio.wait_for(self.layer.new_channel("layerwatch."), self.timeout)
                        receiver = asyncio.get_running_loop().create_task(self._receive(channel))
                    await asyncio.wait_for(self._probe(channel, n), self.timeout)
                except asyncio.TimeoutError:
                    self._lost(f"probe {n} not back within {self.timeout:g} s")
                except Exception as exc:  # the layer's connection errors: Redis is unreachable
                    self._lost(f"probe {n}: {type(exc).__name__}: {exc}")
                if receiver is not None and receiver.done():  # its receive failed: subscribe again
                    if not receiver.cancelled() and receiver.exception() is not None:
                        log.warning("layer watch: receive failed: %r", receiver.exception())
                    channel, receiver = None, None
        finally:
            self._expect = None
            if self._task is asyncio.current_task():
                self._task = None
            if receiver is not None:
                receiver.cancel()  # the layer unsubscribes the channel
