"""A registered reward function chosen by name trains and scores: the path and function the registry
resolves, and the tool set it writes into the run folder, are what the trainer runs a GRPO step with
(cpu_smoke, a tiny model built locally, one step)."""
import json

import pytest

from rlstudio.registry.services import reward_function_resolve, tool_set_write

# A reward the trainer can only get from this file: its score and extra field are its signature.
REWARD = '''
def grade(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return {"score": 0.625, "graded_by": "registry-test", "turns": extra_info["num_turns"]}
'''


@pytest.fixture(scope="module")
def tiny_and_data(tmp_path_factory):
    from trainer.models.tiny import make_tiny_model
    from trainer.tasks import arith

    root = tmp_path_factory.mktemp("registry_train")
    model = make_tiny_model(root / "tiny", preset="smoke", seed=0)
    train = root / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in arith.make_rl_rows("train", 16, seed=0)))
    return model, train


@pytest.mark.django_db
def test_a_registered_reward_function_trains_and_scores(staff_api, write_reward, tiny_and_data, tmp_path):
    from trainer.config import apply_overrides
    from trainer.recipes import get_recipe
    from trainer.run import run

    resp = staff_api.post("/api/v1/reward-functions/", {"name": "graded", "kind": "file", "function": "grade",
                                                          "path": str(write_reward(REWARD))}, format="json")
    assert resp.status_code == 201 and resp.json()["scores"] == [0.625] * 3, resp.json()
    assert staff_api.post("/api/v1/tool-sets/", {"name": "calc", "config_yaml": "tools:\n  - class_name: calculator\n"},
                          format="json").status_code == 201
    model, train = tiny_and_data
    out = tmp_path / "run"
    resolved = reward_function_resolve(name="graded")
    cfg = apply_overrides(get_recipe("cpu_smoke"), {
        "data.train_files": str(train), "actor_rollout_ref.model.path": str(model),
        "trainer.default_local_dir": str(out), "trainer.logger": ["jsonl"], "trainer.total_training_steps": 1,
        "trainer.torch_threads": 1, "trainer.save_freq": -1,
        "custom_reward_function.path": resolved.path, "custom_reward_function.name": resolved.function,
        "tools.config_path": str(tool_set_write(name="calc", out_dir=out)),
    })
    assert run(cfg) == 0
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    samples = [e["data"] for e in events if e["type"] == "sample"]
    assert samples and all(s["reward"] == 0.625 for s in samples)
    assert all(s["reward_extra"]["graded_by"] == "registry-test" for s in samples)
    step = [e["data"]["metrics"] for e in events if e["type"] == "metrics" and "critic/score/mean" in e["data"]["metrics"]]
    assert step and step[0]["critic/score/mean"] == pytest.approx(0.625)
