"""Processes the fault tests start, kill and start again on their own (never the session's).

The session fixtures of tests/conftest.py (Daphne, the Celery worker, the shared Redis at 6379) serve
every other test, so a test that kills a server starts a private one here:

- `RedisServer`: a `redis-server` on a free loopback port, no persistence (a restart loses every
  key, as a crashed Redis without a volume does: channel groups and queued messages included);
- `DaphneServer`: the platform's ASGI app on a fixed port, killable and restartable on that port;
- `CeleryWorker`: a Celery worker (solo pool) on a queue and broker of the test's choosing.

Each `start()` waits until the process answers; `kill()` is SIGKILL of its whole process group.
Imported by tests as `tests.e2e.fault_procs` (the repository root is on pytest's pythonpath).
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import REPO, VENV_BIN, _service_env, free_port, stop_process_group, wait_until


def _kill_group(proc: subprocess.Popen | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    proc.wait(timeout=30)


def _spawn(args: list[str], *, log: Path, env: dict[str, str], cwd: Path) -> subprocess.Popen:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, env=env,
                                start_new_session=True)


@dataclass
class RedisServer:
    folder: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def ping(self) -> bool:
        with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        args = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", str(self.folder)]
        log = self.folder / "redis.log"
        self.proc = _spawn(args, log=log, env=dict(os.environ), cwd=self.folder)
        wait_until(self.ping, timeout=20, what="private redis-server", proc=self.proc, log=log)

    def kill(self) -> None:
        _kill_group(self.proc)
        self.proc = None


@dataclass
class DaphneServer:
    """The platform's ASGI app (`daphne`) with `env` added to the session's service environment."""

    folder: Path
    env: dict[str, str]
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.folder / "daphne.log"

    def start(self) -> None:
        args = [str(VENV_BIN / "daphne"), "-b", "127.0.0.1", "-p", str(self.port),
                "rlstudio.config.asgi:application"]
        self.proc = _spawn(args, log=self.log, env=_service_env(**self.env), cwd=REPO)

        def ready():
            with urllib.request.urlopen(self.base + "/healthz", timeout=2) as r:
                return r.status in (200, 503)

        wait_until(ready, timeout=60, what="private Daphne", proc=self.proc, log=self.log)

    def kill(self) -> None:
        _kill_group(self.proc)
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            stop_process_group(self.proc, grace=10)
            self.proc = None


@dataclass
class CeleryWorker:
    """`celery -A rlstudio worker --pool solo` on `queue`, with `env` added (broker, database, Ray)."""

    folder: Path
    env: dict[str, str]
    queue: str
    name: str
    argv_prefix: list[str] = field(default_factory=list)  # e.g. a wrapper script before "-A ..."
    proc: subprocess.Popen | None = None

    @property
    def log(self) -> Path:
        return self.folder / f"{self.name}.log"

    def start(self) -> None:
        base = self.argv_prefix or [str(VENV_BIN / "celery")]
        args = [*base, "-A", "rlstudio", "worker", "--pool", "solo", "--loglevel", "INFO",
                "--without-gossip", "--without-mingle", "--without-heartbeat", "-Q", self.queue,
                "-n", f"{self.name}-{os.getpid()}@%h"]
        self.proc = _spawn(args, log=self.log, env=_service_env(RLSTUDIO_CELERY_QUEUE=self.queue, **self.env),
                           cwd=REPO)
        wait_until(lambda: b"ready." in self.log.read_bytes(), timeout=90, what=f"Celery worker {self.name}",
                   proc=self.proc, log=self.log, interval=0.5)

    def kill(self) -> None:
        _kill_group(self.proc)
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            stop_process_group(self.proc, grace=20)
            self.proc = None
