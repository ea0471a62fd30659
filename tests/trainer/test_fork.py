"""A fork (trainer.resume_fork): everything a resume restores, then the new config's fork-changeable keys.

The optimizer's moments and step count stay the parent checkpoint's while its lr becomes the fork's;
the LR schedule follows the new settings at the restored step; a changed KL coefficient replaces the
restored controller value; the step and the loader position continue; a fork with the parent's own
config reproduces the parent's next step exactly.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from trainer import checkpoint as ckpt
from trainer.config import ConfigError, apply_overrides, validate
from trainer.config.fork import FORK_CHANGEABLE, not_changeable
from trainer.run import run
from trainer.workers.optim import lr_lambda_factory, retune_optimizer

from trainer.recipes import get_recipe

# A reward that varies between samples, so advantages and gradients are not all zero.
REWARD = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return sum(c.isdigit() or c == " " for c in solution_str) / max(1, len(solution_str))
"""


def smoke_cfg(root: Path, model: Path, train: Path, **over):
    reward = root / "reward.py"
    reward.write_text(REWARD)
    return apply_overrides(get_recipe("cpu_smoke"), {
        "data.train_files": str(train), "actor_rollout_ref.model.path": str(model),
        "trainer.default_local_dir": str(root / "out"), "custom_reward_function.path": str(reward),
        "trainer.logger": ["jsonl"], **over})


def events(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]


class _ListSink:
    def __init__(self):
        self.events = []

    def write(self, event):
        self.events.append(event)

    def close(self):
        pass


def trainer_for(cfg):
    from trainer.loop import Trainer
    from trainer.sinks import Emitter

    t = Trainer(cfg, emitter=Emitter([_ListSink()]))
    t.setup()
    return t, None


class _Optim:
    def __init__(self, lr, weight_decay=0.0):
        self.lr, self.weight_decay = lr, weight_decay


def _adam(lr, *, warmup, total, style="cosine"):
    torch.manual_seed(0)
    layer = torch.nn.Linear(4, 3)
    opt = torch.optim.AdamW(layer.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lr_lambda_factory(warmup_steps=warmup, total_steps=total, style=style, min_lr_ratio=0.1))
    return layer, opt, sched


def _train(layer, opt, sched, steps):
    for i in range(steps):
        loss = layer(torch.full((2, 4), float(i + 1))).pow(2).mean()
        loss.backward()
        opt.step()
        sched.step()
        opt.zero_grad()


def test_retune_keeps_adams_moments_and_takes_the_new_lr_on_the_new_schedule():
    layer, opt, sched = _adam(1e-3, warmup=2, total=10)
    _train(layer, opt, sched, 3)
    saved_opt, saved_sched = opt.state_dict(), sched.state_dict()
    saved_lr = opt.param_groups[0]["lr"]

    # The parent's own settings: every value as it was (the exact resume).
    _, same, same_sched = _adam(1e-3, warmup=2, total=10)
    same.load_state_dict(saved_opt)
    same_sched.load_state_dict(saved_sched)
    assert retune_optimizer(same, same_sched, _Optim(1e-3, 0.01)) == saved_lr

    # A fork with lr 5e-4 over 20 steps: moments and count kept, lr = 5e-4 x the new schedule at step 3.
    _, fork, fork_sched = _adam(1e-3, warmup=2, total=20)
    fork.load_state_dict(saved_opt)
    fork_sched.load_state_dict(saved_sched)
    assert fork.param_groups[0]["lr"] == saved_lr  # loading alone keeps the parent's lr
    new = retune_optimizer(fork, fork_sched, _Optim(5e-4, 0.05))
    expected = 5e-4 * lr_lambda_factory(warmup_steps=2, total_steps=20, style="cosine", min_lr_ratio=0.1)(3)
    assert new == pytest.approx(expected, rel=1e-12) and new != saved_lr
    for group in fork.param_groups:
        assert group["lr"] == new and group["initial_lr"] == 5e-4 and group["weight_decay"] == 0.05
    assert fork_sched.base_lrs == [5e-4] and fork_sched.last_epoch == 3
    for p_saved, p_fork in zip(opt.state.values(), fork.state.values()):
        assert torch.equal(p_saved["exp_avg"], p_fork["exp_avg"])
        assert torch.equal(p_saved["exp_avg_sq"], p_fork["exp_avg_sq"])
        assert float(p_saved["step"]) == float(p_fork["step"]) == 3
    # The next scheduler step follows the new schedule from the new base.
    fork_sched.step()
    assert fork.param_groups[0]["lr"] == pytest.approx(
        5e-4 * lr_lambda_factory(warmup_steps=2, total_steps=20, style="cosine", min_lr_ratio=0.1)(4), rel=1e-12)


def test_a_fork_needs_resume_path():
    from trainer.config import Config

    cfg = apply_overrides(Config(), {"trainer.resume_fork": True})
    with pytest.raises(ConfigError) as err:
        validate(cfg, require_paths=False)
    assert err.value.key == "trainer.resume_fork"


def test_the_changeable_list_names_schema_keys_with_a_reason():
    from trainer.config import Config
    from trainer.config.fork import dotted

    whole = Config().to_dict()
    missing = object()
    assert [k for k in FORK_CHANGEABLE if dotted(whole, k, missing) is missing] == []
    assert all(len(reason) > 20 for reason in FORK_CHANGEABLE.values())
    assert not_changeable(["actor_rollout_ref.actor.optim.lr", "data.train_batch_size",
                           "actor_rollout_ref.rollout.n"]) == ["data.train_batch_size", "actor_rollout_ref.rollout.n"]


@pytest.fixture(scope="module")
def parent(tmp_path_factory, tiny_model_dir, demo_data_dir):
    """cpu_smoke for 2 steps, a checkpoint at each (global_step_1, global_step_2)."""
    root = tmp_path_factory.mktemp("parent")
    cfg = smoke_cfg(root, tiny_model_dir, demo_data_dir / "train.jsonl", **{"trainer.save_freq": 1})
    assert run(cfg) == 0
    return {"root": root, "cfg": cfg, "out": root / "out"}


def _fork_cfg(parent, root: Path, step: int, **changes):
    root.mkdir(parents=True, exist_ok=True)
    return apply_overrides(parent["cfg"], {
        "trainer.default_local_dir": str(root / "out"), "trainer.resume_mode": "resume_path",
        "trainer.resume_from_path": str(ckpt.step_dir(parent["out"], step)), "trainer.resume_fork": True,
        **changes})


def _train_metrics(out: Path) -> dict[int, dict]:
    return {e["data"]["step"]: e["data"]["metrics"] for e in events(out)
            if e["type"] == "metrics" and "actor/pg_loss" in e["data"]["metrics"]}


def test_a_fork_with_the_parents_config_reproduces_its_next_step(parent, tmp_path):
    cfg = _fork_cfg(parent, tmp_path / "same", 1)
    assert run(cfg) == 0
    out = tmp_path / "same" / "out"
    said = [e["data"]["message"] for e in events(out) if e["type"] == "log"]
    assert "changed from the checkpoint's config: nothing" in said
    assert any(m.startswith("forked from the checkpoint of step 1 (trainer.resume_from_path") for m in said)
    mp, mf = _train_metrics(parent["out"]), _train_metrics(out)
    assert sorted(mf) == [2]  # the step continues from the checkpoint's
    for k in ("critic/score/mean", "actor/pg_loss", "actor/grad_norm", "actor/kl_loss", "actor/lr",
              "response_length/mean"):
        assert mf[2][k] == pytest.approx(mp[2][k], abs=1e-6), k
    wp = ckpt.read_actor_model(parent["out"] / "global_step_2")
    wf = ckpt.read_actor_model(out / "global_step_2")
    assert max((wp[k] - wf[k]).abs().max().item() for k in wp) < 1e-6


def test_a_fork_with_a_new_lr_keeps_the_optimizer_state_and_continues(parent, tmp_path):
    resumed_cfg = _fork_cfg(parent, tmp_path / "resume", 1, **{"trainer.resume_fork": False,
                                                               "trainer.total_training_steps": 3})
    fork_cfg = _fork_cfg(parent, tmp_path / "fork", 1, **{"actor_rollout_ref.actor.optim.lr": 3e-5,
                                                          "algorithm.kl_ctrl.kl_coef": 0.02,
                                                          "trainer.total_training_steps": 3})
    r, _ = trainer_for(resumed_cfg)
    f, _ = trainer_for(fork_cfg)
    try:
        r.maybe_resume()
        f.maybe_resume()
        ro, fo = r.actor.optimizer, f.actor.optimizer
        assert [g["lr"] for g in ro.param_groups] == [1e-4] * len(ro.param_groups)  # a resume: the parent's
        assert [g["lr"] for g in fo.param_groups] == [3e-5] * len(fo.param_groups)  # the fork: its own
        assert f.actor.scheduler.base_lrs == [3e-5] * len(fo.param_groups)
        assert f.actor.scheduler.last_epoch == r.actor.scheduler.last_epoch == 1
        states_r, states_f = list(ro.state.values()), list(fo.state.values())
        assert len(states_r) == len(states_f) > 0
        for sr, sf in zip(states_r, states_f):
            assert torch.equal(sr["exp_avg"], sf["exp_avg"]) and torch.equal(sr["exp_avg_sq"], sf["exp_avg_sq"])
            assert float(sf["step"]) == 1
        assert f.global_step == r.global_step == 1
        assert (f.epoch, f.loader.position) == (r.epoch, r.loader.position) and f.loader.position == 1
        # the KL controller: restored on a resume, the fork's changed kl_coef on a fork
        saved = json.loads((parent["out"] / "global_step_1" / "trainer_state.json").read_text())["kl_coef"]
        assert r.kl_ctrl.value == saved and f.kl_ctrl.value == 0.02
    finally:
        r.close()
        f.close()
    # The whole fork runs to its new end: steps 2 and 3 at the new lr.
    assert run(fork_cfg) == 0
    mf = _train_metrics(tmp_path / "fork" / "out")
    assert sorted(mf) == [2, 3] and mf[2]["actor/lr"] == pytest.approx(3e-5) == mf[3]["actor/lr"]
    said = [e["data"]["message"] for e in events(tmp_path / "fork" / "out") if e["type"] == "log"]
    assert ("changed from the checkpoint's config: actor_rollout_ref.actor.optim.lr, algorithm.kl_ctrl.kl_coef, "
            "trainer.total_training_steps") in said
