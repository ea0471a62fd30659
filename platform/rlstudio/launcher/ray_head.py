"""A local Ray head as a supervised child: `ray start --head --block`, loopback only, every port
chosen by the launcher (none of Ray's defaults, so two instances and Redis on 6379 never clash),
and a short temp dir (unix socket paths are limited to ~107 bytes).

`--block` keeps the command in the foreground; on SIGTERM it stops the processes it started
(gcs, raylet, dashboard, …) at once: Ray's drain before that is turned off (DRAIN_ENV=0). The
launcher then sweeps anything left that carries its mark.
RAY_ADDRESS for jobs is the dashboard's HTTP address (the Jobs API).
"""
from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .layout import PortAllocator
from .supervisor import Supervisor

WORKER_PORTS = 48  # one per worker process; a local head seldom runs more than a few dozen
DRAIN_ENV = "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"


@dataclass(frozen=True)
class RayPorts:
    gcs: int
    dashboard: int
    client: int
    node_manager: int
    object_manager: int
    metrics: int
    agent_listen: int
    agent_grpc: int
    runtime_env: int
    workers: tuple[int, ...]

    @classmethod
    def allocate(cls, alloc: PortAllocator) -> "RayPorts":
        names = [n for n in cls.__dataclass_fields__ if n != "workers"]
        fixed = dict(zip(names, alloc.take_many(len(names))))
        return cls(**fixed, workers=tuple(alloc.take_many(WORKER_PORTS)))


def argv(*, ports: RayPorts, temp_dir: Path, num_cpus: int, object_store_bytes: int) -> list[str]:
    ray_exe = Path(sys.executable).with_name("ray")
    return [
        str(ray_exe), "start", "--head", "--block",
        "--node-ip-address=127.0.0.1", "--dashboard-host=127.0.0.1",
        f"--port={ports.gcs}", f"--dashboard-port={ports.dashboard}",
        f"--ray-client-server-port={ports.client}",
        f"--node-manager-port={ports.node_manager}",
        f"--object-manager-port={ports.object_manager}",
        f"--metrics-export-port={ports.metrics}",
        f"--dashboard-agent-listen-port={ports.agent_listen}",
        f"--dashboard-agent-grpc-port={ports.agent_grpc}",
        f"--runtime-env-agent-port={ports.runtime_env}",
        "--worker-port-list=" + ",".join(str(p) for p in ports.workers),
        f"--num-cpus={num_cpus}", "--num-gpus=0" if not _has_gpu() else "",
        f"--object-store-memory={object_store_bytes}",
        f"--temp-dir={temp_dir}", "--include-dashboard=true", "--disable-usage-stats",
        "--log-style=record", "--log-color=false",
    ]


def _has_gpu() -> bool:
    return Path("/dev/nvidia0").exists() or bool(os.environ.get("CUDA_VISIBLE_DEVICES"))


def start(sup: Supervisor, *, ports: RayPorts, temp_dir: Path, env: dict[str, str],
          num_cpus: int, object_store_bytes: int) -> str:
    """Spawn the head; readiness is awaited separately (it takes ~10 s) by `wait_ready`."""
    temp_dir.mkdir(parents=True, exist_ok=True)
    ray_env = {k: v for k, v in env.items() if not k.startswith("RAY_ADDRESS")}
    ray_env["RAY_USAGE_STATS_ENABLED"] = "0"
    # No drain on SIGTERM (Ray >= 2.5x waits up to 30 s for the node to go idle, which a running job
    # never does): the shutdown's stop of the runs already came first, so a job still running at this
    # point (a second Ctrl-C, a step past the wait) would only hold the whole stop for 30 s, and race
    # the supervisor's 30 s grace. The operator's own RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S wins.
    ray_env.setdefault(DRAIN_ENV, "0")
    args = [a for a in argv(ports=ports, temp_dir=temp_dir, num_cpus=num_cpus,
                            object_store_bytes=object_store_bytes) if a]
    sup.spawn("ray", args, env=ray_env, cwd=temp_dir, grace=30.0)
    return f"http://127.0.0.1:{ports.dashboard}"


def wait_ready(address: str, *, timeout: float, should_stop: Callable[[], bool], alive: Callable[[], bool]) -> None:
    """Wait until the Jobs API answers (the dashboard comes up last)."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if should_stop():
            raise InterruptedError("stop requested while Ray started")
        if not alive():
            raise RuntimeError("the Ray head exited during start; see logs/ray.log")
        try:
            with urllib.request.urlopen(f"{address}/api/version", timeout=2) as resp:
                json.loads(resp.read())
            with urllib.request.urlopen(f"{address}/api/jobs/", timeout=2) as resp:
                if resp.status == 200:
                    return
        except (OSError, ValueError) as exc:
            last = str(exc)
        time.sleep(0.5)
    raise TimeoutError(f"Ray's Jobs API at {address} did not answer within {timeout:.0f} s ({last})")
