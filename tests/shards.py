"""The whole suite in its three shards, each a pytest process of its own (`make test` runs this).

    python tests/shards.py [pytest arguments...]

- cluster: the tests that start a Ray cluster of their own (the `make run` launcher's, the trainer's
  multi-worker runs): CPU-bound, they run first and alone;
- services: the tests that use the session's Ray head, Celery worker, beat and Daphne, and the browser
  tests, in the bands of tests/conftest.py;
- plain: every other test (unit, Django, the trainer's maths and one-process runs).

Then services and plain run at once: most of the services shard's time is spent waiting on real
services, most of the plain shard's on the CPU, so side by side they finish well before the two would
one after the other (docs/contributing.md gives the figures). The plain shard runs at a lower priority
(nice 19) so that the services' runs and pages keep the CPU they wait on. Each shard has its own test
database (RLSTUDIO_TEST_DATABASE_NAME, suffixed with the shard's name); its Celery queue and
channel-layer prefix are its own already (settings/test.py), so the shards share the Redis server.

Each shard writes to a log of its own; a progress line comes every minute, then the logs are printed
whole (a failed shard's last, so its summary ends the output). The exit status is 0 only when every
shard passes; a shard that the arguments leave without a test counts as passed. `pytest` alone still
runs every test in one process.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PHASES = (("cluster",), ("services", "plain"))  # the shards of a phase run at once, the phases in turn
NICE = {"plain": 19}
NO_TESTS = 5  # pytest's exit status when nothing was collected
PROGRESS_EVERY_S = 60.0
_PERCENT = re.compile(rb"\[\s*(\d+)%\]")


@dataclass
class Shard:
    """One shard's pytest process and its log."""

    name: str
    log: Path
    proc: subprocess.Popen | None = None
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None
    last_seen: str = ""

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def progress(self) -> str:
        """The last percentage pytest printed, from the log's tail ("" before the first; the one seen
        before while the tail holds none, e.g. during the failures' report)."""
        try:
            with open(self.log, "rb") as f:
                f.seek(max(0, self.log.stat().st_size - 4096))
                found = _PERCENT.findall(f.read())
        except OSError:
            found = []
        if found:
            self.last_seen = f"{int(found[-1])}%"
        return self.last_seen

    def passed(self) -> bool:
        return self.returncode in (0, NO_TESTS)


def database_name(shard: str, environ=os.environ) -> str:
    """The shard's test database: RLSTUDIO_TEST_DATABASE_NAME (else test_rlstudio) and the shard's name."""
    return f"{environ.get('RLSTUDIO_TEST_DATABASE_NAME') or 'test_rlstudio'}_{shard}"


def shard_argv(shard: str, args: list[str]) -> list[str]:
    return [sys.executable, "-m", "pytest", f"--shard={shard}", *args]


def start(shard: Shard, args: list[str]) -> None:
    env = dict(os.environ, RLSTUDIO_TEST_DATABASE_NAME=database_name(shard.name))
    nice = NICE.get(shard.name, 0)
    shard.started = time.monotonic()
    with open(shard.log, "wb") as out:
        shard.proc = subprocess.Popen(shard_argv(shard.name, args), stdout=out, stderr=subprocess.STDOUT,
                                      cwd=REPO, env=env, start_new_session=True,
                                      preexec_fn=(lambda: os.nice(nice)) if nice else None)


def stop_all(shards: list[Shard]) -> None:
    """SIGINT to each shard still running (pytest stops and tears its services down), SIGKILL after 60 s."""
    for s in shards:
        if s.returncode is None:
            os.killpg(s.proc.pid, signal.SIGINT)
    deadline = time.monotonic() + 60
    for s in shards:
        try:
            s.proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(s.proc.pid, signal.SIGKILL)
            s.proc.wait()


def wait(shards: list[Shard], *, t0: float) -> None:
    last = time.monotonic()
    while any(s.returncode is None for s in shards):
        time.sleep(1.0)
        now = time.monotonic()
        for s in shards:
            if s.ended is None and s.returncode is not None:
                s.ended = now
        if now - last >= PROGRESS_EVERY_S:
            last = now
            states = [f"{s.name} {s.progress() or 'starting'}" if s.returncode is None else
                      f"{s.name} {'passed' if s.passed() else 'FAILED'}" for s in shards]
            print(f"[shards] {int(now - t0) // 60} min: {', '.join(states)}", flush=True)
    for s in shards:
        s.ended = s.ended or time.monotonic()


def report(shards: list[Shard]) -> int:
    """Print each shard's log (the failed ones last) and a line per shard; the exit status."""
    for s in sorted(shards, key=lambda s: not s.passed()):
        print(f"\n{'=' * 30} shard {s.name} (exit {s.returncode}) {'=' * 30}", flush=True)
        sys.stdout.buffer.write(s.log.read_bytes())
        sys.stdout.flush()
    print()
    for s in shards:
        outcome = "passed" if s.returncode == 0 else ("no tests" if s.returncode == NO_TESTS else "FAILED")
        print(f"[shards] {s.name}: {outcome} (exit {s.returncode}) in {(s.ended or time.monotonic()) - s.started:.0f} s")
    if all(s.returncode == NO_TESTS for s in shards):
        return NO_TESTS
    return 0 if all(s.passed() for s in shards) else 1


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main(args: list[str]) -> int:
    signal.signal(signal.SIGTERM, _interrupt)  # a CI's timeout: stop the shards, never orphan them
    folder = Path(tempfile.mkdtemp(prefix="rls-shards-"))
    print(f"[shards] {' then '.join(' and '.join(phase) for phase in PHASES)}; logs in {folder}", flush=True)
    t0, started = time.monotonic(), []
    try:
        for phase in PHASES:
            shards = [Shard(name, folder / f"{name}.log") for name in phase]
            for s in shards:
                start(s, args)
                started.append(s)
            wait(shards, t0=t0)
    except KeyboardInterrupt:
        stop_all([s for s in started if s.proc is not None])
        print("[shards] interrupted", flush=True)
    return report(started)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
