"""Fixtures of the sweeps tests: alice's ready dataset and model, and a sweep's inputs on them."""
import pytest

from rlstudio.sweeps.services import SweepInputs


@pytest.fixture
def ready(alice, make_dataset, make_model):
    return {"dataset": make_dataset(alice, status="ready"), "model": make_model(alice)}


@pytest.fixture
def inputs(ready):
    return SweepInputs(dataset=ready["dataset"], model=ready["model"], preset="cpu_smoke")


LR = "actor_rollout_ref.actor.optim.lr"
N = "actor_rollout_ref.rollout.n"
