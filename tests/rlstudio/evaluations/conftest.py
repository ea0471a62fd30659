"""Fixtures of the evaluations tests: a ready dataset of alice's, the cluster's free GPUs as the queue pass
reads them, and an operator-registered reward function."""
import hashlib

import pytest


@pytest.fixture
def data(alice, make_dataset):
    return make_dataset(alice, "eval-data", status="ready")


@pytest.fixture
def free_gpus(monkeypatch):
    """The cluster's free GPUs, as every pass (the reconcile's and a launch's) reads them (set `.value`;
    none to start with)."""
    class Free:
        value = 0.0

    monkeypatch.setattr("rlstudio.runs.services.cluster._cluster_free_gpus", lambda *, needed: Free.value)
    return Free


@pytest.fixture
def registered_reward(settings, tmp_path):
    """A ready operator-registered reward function `three_quarters` (a file under the test's reward root,
    recorded as a passed check leaves it: its real path and SHA-256); returns its file's real path."""
    from rlstudio.registry.models import RewardFunction

    root = tmp_path / "rewards"
    root.mkdir()
    path = root / "three_quarters.py"
    path.write_text("def compute_score(*a, **k):\n    return 0.75\n", encoding="utf-8")
    settings.RLSTUDIO_REWARD_ROOTS = [str(root)]
    RewardFunction.objects.create(name="three_quarters", kind="file", path=str(path.resolve()), status="ready",
                                  function="compute_score",
                                  checked_sha256=hashlib.sha256(path.read_bytes()).hexdigest())
    return path.resolve()
