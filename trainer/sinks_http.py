"""The `http` sink: POSTs events to the platform's ingest API (standard library only).

Selected with `trainer.logger=[...,"http"]`; reads RLSTUDIO_INGEST_URL (the run's
`.../api/v1/runs/<id>/events/`) and RLSTUDIO_INGEST_TOKEN_FILE (a file holding the run's own token;
RLSTUDIO_INGEST_TOKEN for a run started by hand) from the environment.

  * `write` only appends to an in-memory queue: a training step never waits on the network;
  * a background thread sends batches of up to `batch_size` events (or `max_batch_bytes`), gzip'd JSON
    `{"events": [...]}` with `Authorization: Bearer <token>`, one POST at a time, adaptively (as
    Nagle's algorithm or Kafka's `linger.ms`): when no POST is in flight, what is queued goes after
    at most `linger` seconds (0.005 by default, counted from the oldest queued event, so that a burst
    written in one go leaves as one batch); while a POST is in flight, events accumulate and leave as
    one batch as soon as it returns. A lone event is on the wire within milliseconds, and under load
    the batch size follows the platform's reply time instead of a fixed period (the live page's
    target, p99 <= 250 ms from emit to browser, left no room for the 0.1 s interval this replaced);
  * a failed send (platform down, 5xx, 408/429) is retried with exponential backoff; meanwhile the
    batch and everything queued after it go to `<out_dir>/http_spool.jsonl`, which is always sent
    before newer events, so the platform receives events in seq order when it comes back (the
    position reached is kept in `http_spool.offset`, so a restarted trainer carries on from it);
  * a refusal the platform will never accept (401/403/404/400/413) is reported on stderr and the batch
    dropped, never retried forever (the events stay in events.jsonl);
  * `close` (the Emitter's, on normal exit and on SIGTERM's graceful path) sends everything left,
    waiting up to `close_timeout` seconds; what is still unsent then stays in the spool.

Exactly-once is the platform's job: it stores each (run, seq) once, so a batch re-sent after a lost
reply is harmless.
"""
from __future__ import annotations

import gzip
import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from pathlib import Path
from typing import Any

from trainer.sink_registry import Sink, register_sink

SPOOL_FILE = "http_spool.jsonl"
SPOOL_OFFSET_FILE = "http_spool.offset"
RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})


class IngestRefused(Exception):
    """The platform answered a status that a retry cannot fix."""


def _token_from_environment() -> str:
    """The run's ingest token: read from RLSTUDIO_INGEST_TOKEN_FILE (how the platform hands it over,
    so that it never shows in the job's environment), else RLSTUDIO_INGEST_TOKEN (a run started by
    hand)."""
    path = os.environ.get("RLSTUDIO_INGEST_TOKEN_FILE", "")
    if path:
        try:
            return Path(path).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise RuntimeError(f"RLSTUDIO_INGEST_TOKEN_FILE: cannot read {path!r}: {exc}") from None
    return os.environ.get("RLSTUDIO_INGEST_TOKEN", "")


class HttpSink(Sink):
    """Batched, gzip'd, retrying, spooling event sink (see the module docstring)."""

    def __init__(
        self,
        *,
        out_dir: Path,
        config: Any = None,
        url: str | None = None,
        token: str | None = None,
        batch_size: int = 500,
        max_batch_bytes: int = 4 << 20,
        linger: float = 0.005,
        timeout: float = 10.0,
        backoff_initial: float = 0.25,
        backoff_max: float = 5.0,
        close_timeout: float | None = None,
    ):
        self.url = url or os.environ.get("RLSTUDIO_INGEST_URL", "")
        self.token = token or _token_from_environment()
        if not self.url or not self.token:
            raise RuntimeError("trainer.logger lists 'http' but RLSTUDIO_INGEST_URL and the token "
                               "(RLSTUDIO_INGEST_TOKEN_FILE or RLSTUDIO_INGEST_TOKEN) are not set (the "
                               "platform sets them when it launches a run)")
        self.batch_size, self.max_batch_bytes = int(batch_size), int(max_batch_bytes)
        self.linger, self.timeout = float(linger), float(timeout)
        self.backoff_initial, self.backoff_max = float(backoff_initial), float(backoff_max)
        self.close_timeout = float(close_timeout if close_timeout is not None
                                   else os.environ.get("RLSTUDIO_INGEST_CLOSE_TIMEOUT", 60))
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        self.spool_path = Path(out_dir) / SPOOL_FILE
        self.offset_path = Path(out_dir) / SPOOL_OFFSET_FILE
        self._drop_torn_spool_tail()
        self._queue: deque[str] = deque()  # encoded events, oldest first
        self._cond = threading.Condition()
        self._closing = False
        self._deadline: float | None = None
        self._flush_now = False
        self._oldest: float | None = None  # monotonic time the oldest queued event was written
        # Counters (read by tests and the bench).
        self.sent = 0
        self.posts = 0
        self.failures = 0
        self.dropped = 0
        self._pending_bytes = 0  # bytes of the spool batch in flight
        self._thread = threading.Thread(target=self._run, name="rlstudio-http-sink", daemon=True)
        self._thread.start()

    # ---------------------------------------------------------------- the trainer's side (fast)
    def write(self, event: dict[str, Any]) -> None:
        line = json.dumps(event, ensure_ascii=False, separators=(",", ":"))
        with self._cond:
            if not self._queue:
                self._oldest = time.monotonic()
                self._cond.notify()  # the sender starts this event's `linger`
            self._queue.append(line)
            if len(self._queue) >= self.batch_size:
                self._cond.notify()

    def flush(self) -> None:
        """Ask the sender to send what is queued now (does not wait for the network)."""
        with self._cond:
            self._flush_now = True
            self._cond.notify()

    def close(self) -> None:
        """Send everything left (spool included), waiting at most close_timeout seconds."""
        with self._cond:
            if self._closing:
                return
            self._closing = True
            self._deadline = time.monotonic() + self.close_timeout
            self._cond.notify()
        self._thread.join(self.close_timeout + self.timeout + 1)
        left = len(self._queue) + self._spool_pending()
        if left:
            print(f"[http sink] {left} events not delivered; kept in {self.spool_path} "
                  f"(sent again when the run resumes)", file=sys.stderr, flush=True)

    # ------------------------------------------------------------------------- the sender thread
    def _run(self) -> None:
        backoff = self.backoff_initial
        while True:
            batch, from_spool = self._next_batch()
            if batch is None:
                return  # closing and nothing left
            if not batch:
                continue
            try:
                self._post(batch)
            except IngestRefused as exc:
                self.dropped += len(batch)
                print(f"[http sink] platform refused {len(batch)} events: {exc}", file=sys.stderr, flush=True)
                self._consumed(batch, from_spool)
                continue
            except (OSError, urllib.error.URLError) as exc:  # down, reset, timeout, 5xx
                self.failures += 1
                if not from_spool:
                    self._spool_append(batch)
                self._spool_queue()  # newer events wait behind the spool, in order
                if self._out_of_time():
                    return
                if self.failures == 1 or self.failures % 20 == 0:
                    print(f"[http sink] ingest unreachable ({exc}); spooling to {self.spool_path}",
                          file=sys.stderr, flush=True)
                self._sleep(backoff)
                backoff = min(backoff * 2, self.backoff_max)
                continue
            backoff = self.backoff_initial
            self.sent += len(batch)
            self._consumed(batch, from_spool)

    def _out_of_time(self) -> bool:
        return self._deadline is not None and time.monotonic() >= self._deadline

    def _sleep(self, seconds: float) -> None:
        """Back off, but never past the close deadline (close() wakes us to recompute it)."""
        end = time.monotonic() + seconds
        with self._cond:
            while True:
                if self._deadline is not None:
                    end = min(end, self._deadline)
                left = end - time.monotonic()
                if left <= 0:
                    return
                self._cond.wait(left)

    def _next_batch(self) -> tuple[list[str] | None, bool]:
        """The next batch: spooled events first, else queued ones.

        Called when no POST is in flight: events queued while the last one was (their oldest has
        waited at least `linger` by then, as a rule) go at once; otherwise the oldest waits up to
        `linger`. Idle, the thread sleeps until write() wakes it (1 s at most, to notice close)."""
        if self._spool_pending():
            if self._out_of_time():
                return None, False
            return self._spool_read(), True
        with self._cond:
            while not self._closing and len(self._queue) < self.batch_size and not self._flush_now:
                if not self._queue:
                    self._cond.wait(1.0)  # idle: write() wakes us
                    if not self._queue:
                        break
                    continue
                left = (self._oldest or 0.0) + self.linger - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            self._flush_now = False
            if not self._queue:
                return (None if self._closing else []), False
            if self._out_of_time():
                self._spool_queue_locked()
                return None, False
            return self._take(self._queue.popleft, lambda: bool(self._queue), lambda: self._queue[0]), False

    def _take(self, pop, has_more, peek) -> list[str]:
        batch, size = [], 0
        while has_more() and len(batch) < self.batch_size:
            nxt = len(peek().encode("utf-8"))
            if batch and size + nxt > self.max_batch_bytes:
                break
            batch.append(pop())
            size += nxt
        return batch

    def _post(self, batch: list[str]) -> None:
        body = gzip.compress(('{"events":[' + ",".join(batch) + "]}").encode("utf-8"), compresslevel=5)
        req = urllib.request.Request(self.url, data=body, method="POST", headers={
            "Content-Type": "application/json", "Content-Encoding": "gzip",
            "Authorization": f"Bearer {self.token}"})
        self.posts += 1
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                answer = json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as exc:
            if exc.code in RETRY_STATUSES:
                raise OSError(f"HTTP {exc.code}") from exc
            detail = exc.read()[:500].decode("utf-8", "replace")
            raise IngestRefused(f"HTTP {exc.code}: {detail}") from exc
        for refusal in (answer.get("refused") or [])[:5]:
            print(f"[http sink] event refused: {refusal.get('reason')}", file=sys.stderr, flush=True)

    # ------------------------------------------------------------------------------- the spool
    def _drop_torn_spool_tail(self) -> None:
        """A process killed mid-append leaves a partial last line: cut it (events.jsonl has it)."""
        try:
            data = self.spool_path.read_bytes()
        except OSError:
            return
        if data and not data.endswith(b"\n"):
            with open(self.spool_path, "r+b") as fh:
                fh.truncate(data.rfind(b"\n") + 1)

    def _spool_offset(self) -> int:
        try:
            return int(self.offset_path.read_text() or 0)
        except (OSError, ValueError):
            return 0

    def _spool_pending(self) -> int:
        """Bytes of the spool not yet delivered."""
        try:
            size = self.spool_path.stat().st_size
        except OSError:
            return 0
        return max(size - self._spool_offset(), 0)

    def _spool_read(self) -> list[str]:
        with open(self.spool_path, "rb") as fh:
            fh.seek(self._spool_offset())
            lines: list[str] = []
            size = 0
            for raw in fh:
                if lines and size + len(raw) > self.max_batch_bytes or len(lines) >= self.batch_size:
                    break
                lines.append(raw.decode("utf-8").rstrip("\n"))
                size += len(raw)
        self._pending_bytes = size
        return lines

    def _consumed(self, batch: list[str], from_spool: bool) -> None:
        if not from_spool:
            return
        offset = self._spool_offset() + self._pending_bytes
        if offset >= self.spool_path.stat().st_size:
            self.spool_path.unlink()  # all delivered: start clean
            self.offset_path.unlink(missing_ok=True)
        else:
            tmp = self.offset_path.with_suffix(".tmp")
            tmp.write_text(str(offset))
            os.replace(tmp, self.offset_path)

    def _spool_append(self, lines: list[str]) -> None:
        if lines:
            with open(self.spool_path, "a", encoding="utf-8") as fh:
                fh.write("\n".join(lines) + "\n")

    def _spool_queue(self) -> None:
        with self._cond:
            self._spool_queue_locked()

    def _spool_queue_locked(self) -> None:
        lines = list(self._queue)
        self._queue.clear()
        self._spool_append(lines)


@register_sink("http")
def _http_sink(*, out_dir: Path, config: Any = None) -> HttpSink:
    return HttpSink(out_dir=out_dir, config=config)
