"""Where a launcher instance keeps its files, and which TCP ports it uses.

One state folder = one instance (`rlstudio.config.env.state_dir_from_env`, the settings' own definition:
RLSTUDIO_STATE_DIR, else <repository>/var): services/{postgres,redis,ray}, logs/, run/ (pid files, lock).
Unix sockets have a ~107-byte path limit, so socket folders move to a short /tmp/rls-<hash>/ when
the state path is long; the hash of the state path keeps two instances apart.
"""
from __future__ import annotations

import hashlib
import socket
from dataclasses import dataclass
from pathlib import Path

# A Ray session puts sockets at <temp>/session_<date>_<time>_<us>_<pid>/sockets/plasma_store,
# about 70 characters below the temp dir; keep the temp dir itself this short or shorter.
_RAY_TEMP_MAX = 30
_SOCKET_PATH_MAX = 100


@dataclass(frozen=True)
class Layout:
    """The folders of one instance, all absolute."""

    state: Path
    services: Path
    postgres: Path
    pgdata: Path
    redis: Path
    logs: Path
    run: Path
    short: Path  # short runtime folder for unix sockets (may equal services)
    endpoints: Path

    @property
    def ray_temp(self) -> Path:
        candidate = self.services / "ray"
        return candidate if len(str(candidate)) <= _RAY_TEMP_MAX else self.short / "ray"

    @property
    def pg_socket_dir(self) -> Path:
        candidate = self.postgres / "sock"
        if len(str(candidate / ".s.PGSQL.65535")) <= _SOCKET_PATH_MAX:
            return candidate
        return self.short / "pg"

    def create(self) -> None:
        for folder in (self.services, self.postgres, self.redis, self.logs, self.run):
            folder.mkdir(parents=True, exist_ok=True)


def layout_for(state: Path) -> Layout:
    services = state / "services"
    digest = hashlib.sha256(str(state).encode()).hexdigest()[:10]
    return Layout(
        state=state,
        services=services,
        postgres=services / "postgres",
        pgdata=services / "postgres" / "data",
        redis=services / "redis",
        logs=state / "logs",
        run=state / "run",
        short=Path("/tmp") / f"rls-{digest}",
        endpoints=services / "endpoints.json",
    )


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when a server could listen on host:port now.

    SO_REUSEADDR as the servers themselves set it, so sockets in TIME_WAIT left by a previous run
    do not count as busy, but a listening socket does.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    # Ray's head binds all interfaces for some ports; be strict about the wildcard too.
    if host != "0.0.0.0":
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("0.0.0.0", port))
            except OSError:
                return False
    return True


class PortAllocator:
    """Hands out free ports counting up from a base, never the same one twice."""

    def __init__(self, base: int, *, limit: int = 65535) -> None:
        self._next = base
        self._limit = limit
        self.taken: list[int] = []

    def take(self) -> int:
        while self._next <= self._limit:
            port = self._next
            self._next += 1
            if port_is_free(port):
                self.taken.append(port)
                return port
        raise RuntimeError(f"no free TCP port left at or above the base (last tried {self._limit})")

    def take_many(self, count: int) -> list[int]:
        return [self.take() for _ in range(count)]
