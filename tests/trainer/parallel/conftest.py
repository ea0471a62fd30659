"""A real local Ray for the parallel tests: 3 CPUs (2 workers + slack), no dashboard, its own temp
folder, never port 6379 (Redis holds it); shut down after the session."""
from __future__ import annotations

import tempfile

import pytest


@pytest.fixture(scope="session")
def local_ray():
    import ray  # a pinned requirement: missing, the parallel tests must fail, not be skipped
    if ray.is_initialized():
        yield ray
        return
    tmp = tempfile.mkdtemp(prefix="rl_ray_")
    ray.init(num_cpus=3, include_dashboard=False, _temp_dir=tmp, log_to_driver=False,
             configure_logging=False)
    try:
        yield ray
    finally:
        ray.shutdown()
