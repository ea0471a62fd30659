"""A step's and a validation batch's shapes (platform/rlstudio/runs/shapes.py), and the two readers of
them: the launch gate's bounds and the memory estimate."""
import dataclasses

import pytest

from rlstudio.runs.gate.bounds import GateRefused
from rlstudio.runs.gate.sizes import StepLimits, check_step_size, check_validation_size
from rlstudio.runs.memory_estimate import GIB, estimate, shape_from_config
from rlstudio.runs.shapes import ShapeUnknown, StepShapes, reported
from trainer.config import Config, apply_overrides


def _shapes(overrides=None, val_rows=None) -> StepShapes:
    return StepShapes.of(apply_overrides(Config(), overrides or {}).to_dict(), val_rows)


def test_a_missing_key_is_the_schemas_default():
    s = StepShapes.of({})
    assert (s.train_prompts, s.prompts, s.n, s.prompt_length, s.response_length) == (1024, 1024, 1, 512, 512)
    assert (s.prompts_key, s.response_key) == ("data.train_batch_size", "data.max_response_length")
    assert (s.trajectories, s.sequence_length, s.tokens) == (1024, 1024, 1024 * 1024)
    assert not s.validates and s.val_prompts == 0 and s.val_trajectories == 0


def test_dynamic_sampling_counts_the_larger_generation_batch():
    dapo = {"data.train_batch_size": 512, "actor_rollout_ref.rollout.n": 16, "algorithm.filter_groups.enable": True,
            "data.gen_batch_size": 1536}
    s = _shapes(dapo)
    assert (s.prompts, s.prompts_key, s.trajectories) == (1536, "data.gen_batch_size", 1536 * 16)
    assert s.train_trajectories == 512 * 16  # the update trains on train_batch_size groups
    # smaller generation batches: the step still holds train_batch_size groups at once
    assert _shapes({**dapo, "data.gen_batch_size": 256}).prompts_key == "data.train_batch_size"
    # without dynamic sampling data.gen_batch_size is not read
    assert _shapes({**dapo, "algorithm.filter_groups.enable": False}).prompts == 512
    assert _shapes({**dapo, "data.gen_batch_size": None}).prompts == 512


def test_the_response_length_that_applies_and_multi_turn_shares_it():
    s = _shapes({"data.max_response_length": 1024})
    assert (s.response_length, s.response_key) == (1024, "data.max_response_length")
    s = _shapes({"data.max_response_length": 1024, "actor_rollout_ref.rollout.response_length": 2048})
    assert (s.response_length, s.response_key) == (2048, "actor_rollout_ref.rollout.response_length")
    tools = {"actor_rollout_ref.rollout.multi_turn.enable": True, "actor_rollout_ref.rollout.multi_turn.max_turns": 8,
             "data.max_response_length": 1024}
    assert _shapes(tools).sequence_length == 512 + 1024  # every turn and tool reply inside the one budget


def test_a_validation_batch():
    val = {"data.val_files": "/v.jsonl", "actor_rollout_ref.rollout.val_kwargs.n": 4}
    whole = _shapes(val, 300)
    assert (whole.val_prompts, whole.val_trajectories) == (300, 1200)
    assert whole.val_tokens == 1200 * 1024
    assert _shapes({**val, "data.val_batch_size": 2}, 300).val_trajectories == 8
    assert _shapes({**val, "data.val_batch_size": 4096}, 3).val_prompts == 3  # a batch larger than the set
    assert _shapes({**val, "data.val_batch_size": 64}, None).val_prompts == 64  # rows unknown: the batch
    unknown = _shapes(val, None)
    assert unknown.val_prompts is None and unknown.val_trajectories is None and unknown.val_tokens is None
    assert _shapes(val, 0).val_trajectories == 0  # an empty set is not validated
    none = _shapes({"actor_rollout_ref.rollout.val_kwargs.n": 4}, 300)  # no data.val_files
    assert (none.validates, none.val_prompts, none.val_trajectories, none.val_reported(-1)) == (False, 0, 0, 0)


def test_report_budgets_report_whole_groups():
    assert reported(0, 100, 4) == 0
    assert reported(-1, 100, 4) == 100 and reported(-1, None, 4) is None
    assert reported(8, 100, 4) == 8 and reported(2, 100, 4) == 4  # at least one whole group
    assert reported(500, 100, 4) == 100 and reported(500, None, 4) == 500
    s = _shapes({"data.train_batch_size": 16, "actor_rollout_ref.rollout.n": 1024})
    assert s.step_reported(8) == 1024 and s.step_reported(-1) == 16 * 1024
    v = _shapes({"data.val_files": "/v.jsonl", "actor_rollout_ref.rollout.val_kwargs.n": 2}, 1319)
    assert v.val_reported(-1) == 2638 and v.val_reported(7) == 7


def test_a_mistyped_batch_size_has_no_shape_and_the_gate_leaves_it_to_the_schema():
    with pytest.raises(ShapeUnknown) as err:
        StepShapes.of({"data": {"train_batch_size": "many"}})
    assert err.value.key == "data.train_batch_size"
    with pytest.raises(ShapeUnknown):
        StepShapes.of({"actor_rollout_ref": {"rollout": {"n": True}}})
    tiny = StepLimits(trajectories=1, tokens=1, reported_samples=1)
    check_step_size({"data": {"train_batch_size": "many"}}, tiny)
    check_validation_size({"data": {"train_batch_size": "many", "val_files": "/v"}}, tiny, 10)


# trainer.models.tiny's "smoke" preset (test_memory_estimate's SMOKE)
SMOKE = {"model_type": "qwen2", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "intermediate_size": 256, "vocab_size": 837, "tie_word_embeddings": True}


def test_the_gate_and_the_memory_estimate_read_the_same_shapes(monkeypatch):
    """Change the shapes' rule and both follow: the gate's refusal and the estimate's KV cache lines."""
    cfg = apply_overrides(Config(), {"data.train_batch_size": 4, "actor_rollout_ref.rollout.n": 2,
                                     "data.max_prompt_length": 100, "data.max_response_length": 28,
                                     "data.val_files": "/v.jsonl", "actor_rollout_ref.rollout.val_kwargs.n": 4,
                                     "data.val_batch_size": 2, "actor_rollout_ref.rollout.name": "hf",
                                     "actor_rollout_ref.model.dtype": "float32"}).to_dict()
    model = shape_from_config(SMOKE)
    kv_token = 2 * 2 * 2 * 16 * 4  # 2 (k, v) x layers x kv heads x head dim x 4 bytes (the shared float32 module)
    limits = StepLimits(trajectories=20, tokens=10**9, reported_samples=10**6)

    def kv_lines():
        lines = {x.name: x.bytes for x in estimate(model, cfg, gpus=0, capacity_bytes=GIB, val_rows=300).lines}
        return lines["rollout KV cache"], lines["validation KV cache"]

    assert kv_lines() == (8 * 128 * kv_token, 8 * 128 * kv_token)
    check_step_size(cfg, limits)
    check_validation_size(cfg, limits, 300)

    real = StepShapes.of.__func__

    def bigger(cls, config, val_rows=None):
        return dataclasses.replace(real(cls, config, val_rows), prompts=12, response_length=60, val_batch_size=3)

    monkeypatch.setattr(StepShapes, "of", classmethod(bigger))
    assert kv_lines() == (24 * 160 * kv_token, 12 * 160 * kv_token)
    with pytest.raises(GateRefused) as err:
        check_step_size(cfg, limits)
    assert "= 12 x 2 = 24 trajectories per step" in err.value.message
    with pytest.raises(GateRefused) as err:
        check_validation_size(cfg, dataclasses.replace(limits, tokens=12 * 160 - 1), 300)
    assert "a validation batch of 12 trajectories x 160 tokens" in err.value.message
