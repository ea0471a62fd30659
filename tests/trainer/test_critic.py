"""PPO with a critic (algorithm.adv_estimator=gae, trainer.workers.critic) on the tiny model, one
in-process worker: the value model is the base's body with a zero scalar head; 3 steps through the
command line train it (verl's critic metrics, trainer.critic_warmup holding the actor back), a run
resumed from step 1 gives the same steps 2-3 and the same critic; a checkpoint without a critic is
refused; with LoRA the actor keeps its adapter and the critic trains in full; the critic's config
errors. Two workers: tests/trainer/parallel/test_critic_parallel.py."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
import torch

from trainer.cli import main
from trainer.config import ConfigError, apply_overrides, resolve, validate
from trainer.recipes import get_recipe

REWARD = ("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
          "    return (len(solution_str) % 7) / 7.0\n")
GAE = ["algorithm.adv_estimator=gae", "algorithm.gamma=0.99", "algorithm.lam=0.95", "critic.optim.lr=1e-3",
       "actor_rollout_ref.actor.optim.lr=1e-2"]
CRITIC_METRICS = ["critic/vf_loss", "critic/vf_clipfrac", "critic/vpred_mean", "critic/vf_explained_var",
                  "critic/grad_norm", "critic/lr", "critic/values/mean", "critic/values/max", "critic/values/min",
                  "critic/returns/mean", "critic/returns/max", "critic/returns/min", "timing_s/values",
                  "timing_s/update_critic", "timing_per_token_ms/values", "timing_per_token_ms/update_critic"]


def read_model(step_path: Path, role: str) -> dict[str, torch.Tensor]:
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    with tempfile.TemporaryDirectory() as tmp:
        dcp_to_torch_save(step_path / role, Path(tmp) / "full.pt")
        return torch.load(Path(tmp) / "full.pt", weights_only=False)["model"]


def events(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]


def metrics(out: Path) -> dict[int, dict]:
    ev = events(out)
    assert [e["data"]["state"] for e in ev if e["type"] == "status"][-1] == "succeeded"
    return {e["data"]["step"]: e["data"]["metrics"] for e in ev if e["type"] == "metrics"}


def test_value_model_is_the_base_body_with_a_zero_head_and_keeps_a_trained_one(tmp_path, tiny_model_dir):
    from transformers import AutoModelForCausalLM

    from trainer.workers.critic import load_value_model

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()
    vm = load_value_model(str(tiny_model_dir), dtype=torch.float32)
    state = vm.state_dict()
    assert state["score.weight"].shape == (1, vm.config.hidden_size)
    assert state["score.weight"].abs().max() == 0 and state["score.bias"].abs().max() == 0
    body = {k: v for k, v in state.items() if k.startswith("model.")}
    assert body and all(torch.equal(v, base[k]) for k, v in body.items())
    assert vm.dropout.p == 0.0
    # A folder that has a head (a trained critic) keeps it.
    with torch.no_grad():
        vm.score.weight.fill_(0.25)
    vm.save_pretrained(tmp_path / "critic")
    again = load_value_model(str(tmp_path / "critic"), dtype=torch.float32)
    assert torch.equal(again.score.weight, torch.full_like(again.score.weight, 0.25))


def test_shared_prompt_values_equal_the_padded_forward_with_the_same_gradient(tiny_model_dir):
    from trainer.config import Config
    from trainer.workers.critic import CriticWorker, load_value_model
    from trainer.workers.experience import make_batch

    vm = load_value_model(str(tiny_model_dir), dtype=torch.float32)
    with torch.no_grad():  # a head that is not zero, so the values depend on the body
        vm.score.weight.copy_(torch.randn(vm.score.weight.shape, generator=torch.Generator().manual_seed(0)))
    cfg = resolve(apply_overrides(Config(), {"algorithm.adv_estimator": "gae"})).critic
    worker = CriticWorker(model=vm, cfg=cfg, device=torch.device("cpu"), dtype=torch.float32, total_steps=1,
                          pad_token_id=0)
    assert worker.share_prompts
    g = torch.Generator().manual_seed(1)
    p0, p1 = torch.randint(10, 200, (6,), generator=g).tolist(), torch.randint(10, 200, (3,), generator=g).tolist()
    responses = [torch.randint(10, 200, (n,), generator=g).tolist() for n in (5, 2, 7, 1)]
    b = make_batch([p0, p0, p1, p1], responses, [[1] * len(r) for r in responses], uids=["a", "a", "b", "b"])
    out = {}
    for shared in (True, False):
        worker.share_prompts = shared
        vm.zero_grad(set_to_none=True)
        v, r = worker._values(b, [0, 1, 2, 3])
        (v * b.response_mask[:, :r]).sum().backward()
        out[shared] = (v.detach() * b.response_mask[:, :r], {n: p.grad.clone() for n, p in vm.named_parameters()})
    assert torch.allclose(out[True][0], out[False][0], atol=1e-5) and out[True][0].abs().max() > 0
    for n, grad in out[False][1].items():
        # float32 sums in another order: the tolerance scales with the gradient's largest entry (~1e2 here)
        scale = max(1.0, float(grad.abs().max()))
        assert torch.allclose(out[True][1][n], grad, atol=1e-5 * scale, rtol=1e-4), n


def test_gae_trains_the_critic_with_warmup_and_resumes_exactly(tmp_path, tiny_model_dir, demo_data_dir):
    reward = tmp_path / "reward.py"
    reward.write_text(REWARD)
    common = [f"data.train_files={demo_data_dir / 'train.jsonl'}", f"actor_rollout_ref.model.path={tiny_model_dir}",
              f"custom_reward_function.path={reward}", "trainer.logger=[jsonl]", "trainer.total_training_steps=3",
              "trainer.save_freq=1", "trainer.critic_warmup=2", *GAE]
    a = tmp_path / "a"
    assert main(["run", "--recipe", "cpu_smoke", *common, "--output", str(a)]) == 0
    b = tmp_path / "b"
    assert main(["run", "--recipe", "cpu_smoke", *common, "trainer.resume_mode=resume_path",
                 f"trainer.resume_from_path={a / 'global_step_1'}", "--output", str(b)]) == 0
    ma, mb = metrics(a), metrics(b)
    assert sorted(ma) == [1, 2, 3] and sorted(mb) == [2, 3]
    resumed = [e["data"]["message"] for e in events(b) if e["type"] == "log" and "resumed" in e["data"]["message"]]
    # the checkpoint named by its step and the key that named it, not its server path
    assert resumed == ["resumed from the checkpoint of step 1 (trainer.resume_from_path; epoch 0, "
                       "loader position 1/32)"]
    for step, m in ma.items():
        missing = [k for k in CRITIC_METRICS if k not in m]
        assert not missing, (step, missing)
        assert m["critic/vf_loss"] > 0 and m["critic/grad_norm"] > 0 and m["critic/lr"] == pytest.approx(1e-3)
        assert -1e6 < m["critic/vf_explained_var"] <= 1.0
    # The head starts at zero: step 1's values are 0, its returns are the rewards (gamma^k discounted).
    assert ma[1]["critic/values/mean"] == 0 and ma[1]["critic/values/max"] == 0
    assert ma[2]["critic/values/max"] != 0  # the critic trained at step 1
    # critic_warmup=2: the actor does not update at step 1 (verl's `critic_warmup <= step`), then does.
    assert "actor/pg_loss" not in ma[1] and "actor/pg_loss" in ma[2] and "actor/pg_loss" in ma[3]
    w0 = read_model(a / "global_step_1", "actor")
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()
    assert all(torch.equal(w0[k], base[k]) for k in w0 if k in base)
    for step in (2, 3):
        for k in ("critic/score/mean", "critic/vf_loss", "critic/grad_norm", "critic/values/mean",
                  "critic/advantages/max", "actor/pg_loss", "actor/grad_norm", "response_length/mean"):
            assert ma[step][k] == pytest.approx(mb[step][k], rel=1e-6, abs=1e-9), (step, k)
    for role in ("actor", "critic"):
        wa, wb = read_model(a / "global_step_3", role), read_model(b / "global_step_3", role)
        assert set(wa) == set(wb) and all(torch.equal(wa[k], wb[k]) for k in wa), role
    assert (a / "global_step_3" / "critic" / "scheduler.pt").exists()
    ca, c1 = read_model(a / "global_step_3", "critic"), read_model(a / "global_step_1", "critic")
    assert max((ca[k] - c1[k]).abs().max().item() for k in ca) > 0


def test_resuming_gae_from_a_checkpoint_without_a_critic_is_refused(tmp_path, tiny_model_dir, demo_data_dir):
    common = [f"data.train_files={demo_data_dir / 'train.jsonl'}", f"actor_rollout_ref.model.path={tiny_model_dir}",
              "trainer.logger=[jsonl]", "trainer.total_training_steps=2"]
    a = tmp_path / "a"
    assert main(["run", "--recipe", "cpu_smoke", *common, "trainer.total_training_steps=1", "--output", str(a)]) == 0
    b = tmp_path / "b"
    assert main(["run", "--recipe", "cpu_smoke", *common, *GAE, "trainer.resume_mode=resume_path",
                 f"trainer.resume_from_path={a / 'global_step_1'}", "--output", str(b)]) != 0
    failed = [e for e in events(b) if e["type"] == "status" and e["data"]["state"] == "failed"]
    assert failed and "has no critic" in json.dumps(failed[-1]["data"])


def test_gae_with_lora_trains_a_full_critic_beside_the_adapter(tmp_path, tiny_model_dir, demo_data_dir):
    reward = tmp_path / "reward.py"
    reward.write_text(REWARD)
    out = tmp_path / "lora"
    assert main(["run", "--recipe", "cpu_smoke", f"data.train_files={demo_data_dir / 'train.jsonl'}",
                 f"actor_rollout_ref.model.path={tiny_model_dir}", f"custom_reward_function.path={reward}",
                 "trainer.logger=[jsonl]", "trainer.total_training_steps=2", "actor_rollout_ref.model.lora_rank=4",
                 "actor_rollout_ref.model.lora_alpha=8", *GAE, "--output", str(out)]) == 0
    m = metrics(out)
    assert m[1]["critic/vf_loss"] > 0 and m[2]["critic/values/max"] != 0 and m[1]["actor/grad_norm"] > 0
    actor, critic = read_model(out / "global_step_2", "actor"), read_model(out / "global_step_2", "critic")
    assert actor and all(".lora_A." in k or ".lora_B." in k for k in actor)  # the actor: the adapter alone
    assert "score.weight" in critic and any(k.startswith("model.layers.") for k in critic)  # the critic: all of it


def _cfg(**over):
    return apply_overrides(get_recipe("cpu_smoke"), {"algorithm.adv_estimator": "gae", **over})


@pytest.mark.parametrize("over, key", [
    ({"critic.optim.lr": 0.0}, "critic.optim.lr"),
    ({"critic.cliprange_value": 0.0}, "critic.cliprange_value"),
    ({"critic.grad_clip": -1.0}, "critic.grad_clip"),
    ({"critic.ppo_epochs": 0}, "critic.ppo_epochs"),
    ({"critic.ppo_mini_batch_size": 3}, "critic.ppo_mini_batch_size"),  # cpu_smoke: train_batch_size 2
    ({"critic.ppo_micro_batch_size_per_gpu": 3}, "critic.ppo_micro_batch_size_per_gpu"),
    ({"algorithm.lam": 1.5}, "algorithm.lam"),
    ({"critic.optim.betas": [0.9]}, "critic.optim.betas"),
])
def test_critic_config_errors_name_the_key(over, key):
    with pytest.raises(ConfigError) as exc:
        validate(_cfg(**over), require_paths=False)
    assert exc.value.key == key


def test_unset_critic_keys_take_the_actors():
    cfg = resolve(_cfg(**{"actor_rollout_ref.model.path": "/models/m", "actor_rollout_ref.actor.ppo_epochs": 2,
                          "actor_rollout_ref.actor.loss_agg_mode": "seq-mean-token-mean",
                          "critic.ppo_micro_batch_size_per_gpu": 2}))
    c, actor = cfg.critic, cfg.actor_rollout_ref.actor
    assert c.model.path == "/models/m" and c.ppo_epochs == 2 and c.loss_agg_mode == "seq-mean-token-mean"
    assert c.ppo_mini_batch_size == actor.ppo_mini_batch_size and c.forward_micro_batch_size_per_gpu == 2
    assert c.optim.lr == 1e-5 and c.cliprange_value == 0.5 and c.grad_clip == 1.0  # verl's defaults
    kept = resolve(_cfg(**{"actor_rollout_ref.model.path": "/models/m", "critic.model.path": "/models/v",
                           "critic.ppo_epochs": 3}))
    assert kept.critic.model.path == "/models/v" and kept.critic.ppo_epochs == 3
