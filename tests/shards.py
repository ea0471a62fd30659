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
shard passes; a shard that the arguments leave without a test counts as passed; an interrupted run
(Ctrl-C, SIGTERM) stops its shards and exits 130. Each shard also has a state folder of its own
(RLSTUDIO_STATE_DIR: run folders and uploads are named by database ids) and dies with the runner.
`pytest` alone still runs every test in one process.
"""
from __future__ import annotations

import ctypes
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
USAGE = 4  # pytest's exit status for a usage error
INTERRUPTED = 130
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


def _child_setup(nice: int):
    """In each shard's process before pytest starts: die with this runner (Linux's PR_SET_PDEATHSIG:
    SIGTERM when the runner is killed, even by SIGKILL), then take the shard's CPU priority."""

    def setup() -> None:
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass  # not Linux: an interrupted runner still stops its shards (stop_all)
        if nice:
            os.nice(nice)

    return setup


def start(shard: Shard, args: list[str], folder: Path) -> None:
    """Start the shard's pytest with its own test database and state folder (the rollouts, uploads and
    run folders, keyed by database ids, which every shard's database starts again from 1)."""
    state = folder / f"{shard.name}-state"
    state.mkdir(exist_ok=True)
    env = dict(os.environ, RLSTUDIO_TEST_DATABASE_NAME=database_name(shard.name), RLSTUDIO_STATE_DIR=str(state))
    shard.started = time.monotonic()
    with open(shard.log, "wb") as out:
        shard.proc = subprocess.Popen(shard_argv(shard.name, args), stdout=out, stderr=subprocess.STDOUT,
                                      cwd=REPO, env=env, start_new_session=True,
                                      preexec_fn=_child_setup(NICE.get(shard.name, 0)))


def _killpg(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass  # it has ended meanwhile


def stop_all(shards: list[Shard]) -> None:
    """SIGINT to each shard still running (pytest stops and tears its services down), SIGKILL after 60 s;
    a second Ctrl-C or SIGTERM meanwhile is ignored, so that no shard is left behind."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    for s in shards:
        if s.returncode is None:
            _killpg(s.proc, signal.SIGINT)
    deadline = time.monotonic() + 60
    for s in shards:
        try:
            s.proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _killpg(s.proc, signal.SIGKILL)
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


def report(shards: list[Shard], *, not_run: tuple[str, ...] = (), interrupted: bool = False) -> int:
    """Print each shard's log (the failed ones last) and a line per shard; the exit status: 0 when every
    shard passed, 1 when one failed, 5 (pytest's "no tests") when none had a test, 130 when the run was
    interrupted (whatever the shards that ran said)."""
    for s in sorted(shards, key=lambda s: not s.passed()):
        print(f"\n{'=' * 30} shard {s.name} (exit {s.returncode}) {'=' * 30}", flush=True)
        sys.stdout.buffer.write(s.log.read_bytes())
        sys.stdout.flush()
    print()
    for s in shards:
        outcome = "passed" if s.returncode == 0 else ("no tests" if s.returncode == NO_TESTS else "FAILED")
        print(f"[shards] {s.name}: {outcome} (exit {s.returncode}) in {(s.ended or time.monotonic()) - s.started:.0f} s")
    for name in not_run:
        print(f"[shards] {name}: not run")
    if interrupted:
        print("[shards] interrupted")
        return INTERRUPTED
    if shards and all(s.returncode == NO_TESTS for s in shards):
        return NO_TESTS
    return 0 if all(s.passed() for s in shards) else 1


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main(args: list[str]) -> int:
    if any(a == "--shard" or a.startswith("--shard=") for a in args):
        print("[shards] --shard picks one shard of a plain pytest run (pytest --shard=NAME); tests/shards.py "
              "runs them all", file=sys.stderr)
        return USAGE
    signal.signal(signal.SIGTERM, _interrupt)  # a CI's timeout: stop the shards, never orphan them
    folder = Path(tempfile.mkdtemp(prefix="rls-shards-"))
    print(f"[shards] {' then '.join(' and '.join(phase) for phase in PHASES)}; logs in {folder}", flush=True)
    t0, started, interrupted = time.monotonic(), [], False
    try:
        for phase in PHASES:
            shards = [Shard(name, folder / f"{name}.log") for name in phase]
            for s in shards:
                started.append(s)
                start(s, args, folder)
            wait(shards, t0=t0)
    except KeyboardInterrupt:
        interrupted = True
        stop_all([s for s in started if s.proc is not None])
    ran = [s for s in started if s.proc is not None]
    not_run = tuple(name for phase in PHASES for name in phase if name not in {s.name for s in ran})
    return report(ran, not_run=not_run, interrupted=interrupted)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
