"""trainer/flops.py and perf/mfu/actor: verl's FLOP count against hand-computed numbers, verl's peak
table by device name, and one training step that reports the metric only with a known peak.

Qwen2-shaped toy (GQA): hidden 64, 2 layers, 4 heads of dim 16, 2 KV heads, MLP 128, vocab 100.
Per layer: attention projections 64 x (64 + 32 + 32 + 64) = 12,288, MLP 64 x 128 x 3 = 24,576;
2 layers + embedding and LM head 2 x 100 x 64 = 12,800: N = 86,528.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from trainer import flops

QWEN2_TOY = dict(
    model_type="qwen2",
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=128,
    vocab_size=100,
)


def test_qwen2_shaped_config_by_hand():
    from transformers import Qwen2Config

    shape = flops.shape_for(Qwen2Config(**QWEN2_TOY))
    assert shape == flops.ModelShape(
        hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, ffn=128, vocab=100
    )
    assert flops.verl_params(shape) == 86_528
    # Sequences of 10 and 6 tokens: dense 6 x 86,528 x 16 = 8,306,688; attention
    # 6 x (100 + 36) x head_dim 16 x heads 4 x layers 2 = 104,448.
    assert flops.verl_flops(shape, [10, 6]) == 8_306_688 + 104_448
    # x 2 epochs / 0.5 s / 1 GFLOP/s / 4 ranks.
    assert flops.verl_mfu(shape, [10, 6], 0.5, 1e9, ppo_epochs=2, world=4) == pytest.approx(
        0.008411136
    )


def test_head_dim_from_the_config_when_it_has_one():
    # Qwen3-style: head_dim is its own field (here 32, not 64 / 4): q and o are 4 x 32 = 128 wide.
    cfg = SimpleNamespace(**{**QWEN2_TOY, "model_type": "qwen3", "head_dim": 32})
    shape = flops.shape_for(cfg)
    assert shape.head_dim == 32
    per_layer = 64 * (128 + 64 + 64 + 128) + 64 * 128 * 3
    assert flops.verl_params(shape) == 2 * per_layer + 12_800
    assert flops.verl_flops(shape, [3]) == 6 * flops.verl_params(shape) * 3 + 6 * 9 * 32 * 4 * 2


def test_moe_family_counts_the_experts_a_token_reaches():
    # qwen3_moe: 8 experts of MLP width 32, 2 per token: 64 x 32 x 3 x 2 + router 64 x 8 = 12,800 per
    # layer, + the attention projections 12,288; 2 layers + 12,800.
    cfg = SimpleNamespace(
        **{
            **QWEN2_TOY,
            "model_type": "qwen3_moe",
            "moe_intermediate_size": 32,
            "num_experts": 8,
            "num_experts_per_tok": 2,
        }
    )
    shape = flops.shape_for(cfg)
    assert (shape.ffn, shape.experts, shape.experts_per_token) == (32, 8, 2)
    assert flops.verl_params(shape) == 2 * (12_800 + 12_288) + 12_800


def test_families_without_verls_count_have_none():
    assert flops.shape_for(SimpleNamespace(**{**QWEN2_TOY, "model_type": "gemma3_text"})) is None
    assert (
        flops.shape_for(
            SimpleNamespace(**{k: v for k, v in QWEN2_TOY.items() if k != "model_type"})
        )
        is None
    )
    assert flops.shape_for(None) is None


def test_qwen25_05b_count():
    # Qwen2.5-0.5B: 24 layers, hidden 896, 14 heads (64 dims), 2 KV heads, MLP 4864, vocab 151,936.
    qwen = flops.ModelShape(
        hidden=896, layers=24, heads=14, kv_heads=2, head_dim=64, ffn=4864, vocab=151_936
    )
    n = 24 * (896 * 4864 * 3 + 896 * (896 + 128 + 128 + 896)) + 2 * 151_936 * 896
    assert n == flops.verl_params(qwen) == 630_095_872  # the tied embedding counted twice, as verl
    assert flops.verl_flops(qwen, [1000]) == 6 * n * 1000 + 6 * 1000**2 * 64 * 14 * 24


@pytest.mark.parametrize(
    "name, peak",
    [
        ("NVIDIA H100 80GB HBM3", 989e12),
        ("NVIDIA H200", 989e12),
        ("NVIDIA A100-SXM4-80GB", 312e12),
        ("NVIDIA H20", 148e12),  # not H200's
        ("NVIDIA L40S", 362.05e12),  # not L40's
        ("NVIDIA GeForce RTX 4090", None),  # not in verl's table
        ("cpu", None),
    ],
)
def test_peak_by_device_name(name, peak):
    assert flops.verl_peak_flops(name) == peak


def test_no_peak_on_the_cpu():
    import torch

    assert flops.device_peak_flops(torch.device("cpu")) is None


def _one_step(tmp_path, tiny_model_dir, demo_data_dir) -> dict[str, float]:
    from trainer.config import apply_overrides
    from trainer.loop import Trainer
    from trainer.recipes import get_recipe
    from trainer.sinks import Emitter

    cfg = apply_overrides(
        get_recipe("cpu_smoke"),
        {
            "data.train_files": str(demo_data_dir / "train.jsonl"),
            "actor_rollout_ref.model.path": str(tiny_model_dir),
            "trainer.default_local_dir": str(tmp_path / "out"),
            "trainer.logger": [],
            "trainer.total_training_steps": 1,
            "trainer.save_freq": -1,
            "trainer.launcher": "local",
            "data.train_batch_size": 2,
            "actor_rollout_ref.rollout.n": 2,
            "actor_rollout_ref.actor.ppo_mini_batch_size": 2,
            "actor_rollout_ref.actor.ppo_epochs": 2,
            "actor_rollout_ref.rollout.response_length": 8,
            "data.max_response_length": 8,
        },
    )
    trainer = Trainer(cfg, emitter=Emitter([]))
    try:
        trainer.setup()
        return trainer.train_step(1)
    finally:
        trainer.close()


def test_a_step_reports_verls_mfu_only_with_a_known_peak(
    tmp_path, tiny_model_dir, demo_data_dir, monkeypatch
):
    import json

    # On the CPU there is no peak: no metric.
    m = _one_step(tmp_path / "cpu", tiny_model_dir, demo_data_dir)
    assert "perf/mfu/actor" not in m and m["timing_s/update_actor"] > 0

    # A faked peak (the device lookup patched): the metric is verl's formula on the step's sequences.
    calls = []
    real_mfu = flops.verl_mfu

    def spy(shape, seqlens, seconds, peak, **kw):
        calls.append((shape, list(seqlens), seconds, peak, kw))
        return real_mfu(shape, seqlens, seconds, peak, **kw)

    monkeypatch.setattr(flops, "device_peak_flops", lambda device: 5e9)
    monkeypatch.setattr(flops, "verl_mfu", spy)
    m = _one_step(tmp_path / "faked", tiny_model_dir, demo_data_dir)
    assert len(calls) == 1
    shape, seqlens, seconds, peak, kw = calls[0]
    cfg = json.loads((tiny_model_dir / "config.json").read_text())
    assert shape == flops.ModelShape(
        hidden=cfg["hidden_size"],
        layers=cfg["num_hidden_layers"],
        heads=cfg["num_attention_heads"],
        kv_heads=cfg["num_key_value_heads"],
        head_dim=cfg["hidden_size"] // cfg["num_attention_heads"],
        ffn=cfg["intermediate_size"],
        vocab=cfg["vocab_size"],
    )
    assert peak == 5e9 and kw == {"ppo_epochs": 2, "world": 1}
    assert (
        len(seqlens) == 4 and sum(seqlens) == m["perf/total_num_tokens"]
    )  # the whole step's sequences
    assert (
        0 < seconds <= m["timing_s/update_actor"]
    )  # the update itself, within the driver's timing
    expected = flops.verl_flops(shape, seqlens) * 2 / seconds / 5e9
    assert m["perf/mfu/actor"] == pytest.approx(expected, rel=1e-12)
    assert m["perf/mfu/actor"] > 0


def test_every_rank_gets_the_whole_steps_sequence_lengths():
    # verl's global_token_num: each rank counts the whole batch against its own update time and the
    # world size divides, so the driver hands every rank all the lengths, not its own rows'.
    from trainer.parallel.group import WorkerGroup
    from trainer.workers.experience import make_batch

    class Recording(WorkerGroup):
        world_size = 2

        def __init__(self):
            self.calls = []

        def call(self, method, *, per_rank=None, **common):
            self.calls += [{**common, **kw} for kw in per_rank]
            return [{"metrics": {}} for _ in per_rank]

        def shutdown(self):
            pass

    resp = [6, 1, 2, 3]
    b = make_batch(
        [[1] * 5, [1] * 9, [1] * 3, [1] * 7],
        [[2] * r for r in resp],
        [[1] * r for r in resp],
        uids=["a", "a", "b", "b"],
    )
    group = Recording()
    group.update_policy(b, [[0, 3], [1, 2]], mini_batch_size=4, seed=0, capture=False, step=1)
    assert [len(c["batch"]) for c in group.calls] == [2, 2]
    assert [c["seqlens"] for c in group.calls] == [
        [11, 10, 5, 10]
    ] * 2  # prompt + response, all rows
