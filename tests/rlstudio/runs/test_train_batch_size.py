"""A training batch larger than the training set is refused at launch (400 on the key), not after
submission by the trainer's "fewer than one batch"; evaluations, which draw no training batches, are not."""
import pytest

from rlstudio.runs import preview
from rlstudio.runs.gate.bounds import GateRefused
from rlstudio.runs.gate.sizes import check_train_size
from rlstudio.runs.launch import build_config
from rlstudio.runs.models import Run

pytestmark = pytest.mark.django_db

DYNAMIC = {"algorithm.filter_groups.enable": True, "algorithm.filter_groups.metric": "acc"}


@pytest.fixture
def small(ready):
    ds = ready["dataset"]
    ds.num_rows = 8
    ds.save(update_fields=["num_rows"])
    return ready


def _body(ready, overrides):
    return {"name": "r1", "dataset": ready["dataset"].pk, "model": ready["model"].pk, "preset": "cpu_smoke",
            "overrides": overrides}


def test_a_batch_larger_than_the_dataset_is_a_400_with_both_numbers(api, small):
    resp = api.post("/api/v1/runs/", _body(small, {"data.train_batch_size": 16}), format="json")
    assert resp.status_code == 400, resp.content
    err = resp.json()["error"]
    assert err["field"] == "data.train_batch_size", err
    assert "data.train_batch_size = 16 prompts" in err["message"] and "8 rows" in err["message"], err
    assert Run.objects.count() == 0
    checked = preview.check_all(preset="cpu_smoke", overrides={"data.train_batch_size": 16}, dataset=small["dataset"],
                                model=small["model"])
    assert [e.field for e in checked.errors] == ["data.train_batch_size"]
    resp = api.post("/api/v1/runs/", _body(small, {"data.train_batch_size": 8}), format="json")
    assert resp.status_code == 201, resp.content  # a batch of the whole set fits


def test_dynamic_sampling_draws_generation_batches(api, small):
    """With dynamic sampling the loader draws data.gen_batch_size prompts at a time (trainer/loop.py): that
    is what must fit, and a train_batch_size above the set is filled from several draws."""
    resp = api.post("/api/v1/runs/", _body(small, {**DYNAMIC, "data.gen_batch_size": 16}), format="json")
    assert resp.status_code == 400 and resp.json()["error"]["field"] == "data.gen_batch_size", resp.content
    fits = {**DYNAMIC, "data.gen_batch_size": 4, "data.train_batch_size": 16,
            "actor_rollout_ref.actor.ppo_mini_batch_size": 16}
    resp = api.post("/api/v1/runs/", _body(small, fits), format="json")
    assert resp.status_code == 201, resp.content


def test_an_evaluation_config_is_not_held_to_a_training_batch(small):
    cfg = build_config(preset="cpu_smoke", dataset=small["dataset"], model=small["model"],
                       overrides={"data.train_batch_size": 16}, checkpoints=False)
    assert cfg["data"]["train_batch_size"] == 16


def test_check_train_size_unknown_rows_refuses_nothing():
    cfg = {"data": {"train_batch_size": 512}}
    check_train_size(cfg, None)
    check_train_size(cfg, 512)
    with pytest.raises(GateRefused) as info:
        check_train_size(cfg, 511)
    assert info.value.key == "data.train_batch_size" and "511 rows" in str(info.value)
