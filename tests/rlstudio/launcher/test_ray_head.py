"""The launcher's Ray head (rlstudio.launcher.ray_head): the environment `ray start --block` gets."""
from __future__ import annotations

from pathlib import Path

from rlstudio.launcher import ray_head
from rlstudio.launcher.layout import PortAllocator


class _Spawns:
    """A supervisor that records what it was asked to spawn and starts nothing."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def spawn(self, name, argv, *, env, cwd, grace):
        self.calls.append({"name": name, "argv": argv, "env": env, "grace": grace})


def _start(tmp_path: Path, env: dict[str, str]) -> dict:
    sup = _Spawns()
    ray_head.start(sup, ports=ray_head.RayPorts.allocate(PortAllocator(30000)), temp_dir=tmp_path / "ray",
                   env=env, num_cpus=2, object_store_bytes=100 * 2**20)
    (call,) = sup.calls
    return call


def test_the_head_does_not_drain_on_sigterm(tmp_path):
    """Ray >= 2.5x drains for up to 30 s on SIGTERM and a running job never lets the node go idle: a
    second Ctrl-C with a run training took 38 s to stop everything (the head's 30 s drain), against 7 s
    with none. The head is started with the drain off, so the launcher's stop is not held by it."""
    call = _start(tmp_path, {"PATH": "/usr/bin", "RAY_ADDRESS": "http://elsewhere:8265"})
    assert call["env"][ray_head.DRAIN_ENV] == "0"
    assert "RAY_ADDRESS" not in call["env"]
    assert call["grace"] > 0


def test_an_operators_drain_setting_is_kept(tmp_path):
    call = _start(tmp_path, {"PATH": "/usr/bin", ray_head.DRAIN_ENV: "10"})
    assert call["env"][ray_head.DRAIN_ENV] == "10"
