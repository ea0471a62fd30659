"""The memory estimate against numbers worked by hand (platform/rlstudio/runs/memory_estimate.py)."""
import json

import pytest

from rlstudio.runs.memory_estimate import (
    GIB,
    ModelConfigUnreadable,
    count_parameters,
    estimate,
    read_model_config,
    shape_from_config,
)

# trainer.models.tiny's "smoke" preset as its config.json says (tied embeddings, Qwen2 q/k/v biases).
SMOKE = {"model_type": "qwen2", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "intermediate_size": 256, "vocab_size": 837, "tie_word_embeddings": True}
# Qwen2.5-3B-Instruct's config.json (sizes only).
QWEN25_3B = {"model_type": "qwen2", "hidden_size": 2048, "num_hidden_layers": 36, "num_attention_heads": 16,
             "num_key_value_heads": 2, "intermediate_size": 11008, "vocab_size": 151936, "tie_word_embeddings": True}


def test_parameter_count_by_hand():
    # smoke: embeddings 837*64 = 53,568 (tied: once); per layer q 64*64 + k, v 2*64*32 + o 64*64 = 12,288,
    # biases 64 + 2*32 = 128, MLP 3*64*256 = 49,152, norms 128 -> 61,696; 2 layers 123,392; final norm 64.
    assert shape_from_config(SMOKE).num_parameters == 53_568 + 123_392 + 64 == 177_024
    # Qwen2.5-3B: 151,936*2,048 = 311,164,928; per layer 9,439,744 (attention with biases) + 67,633,152 (MLP)
    # + 4,096 = 77,076,992; x 36 = 2,774,771,712; + 2,048: 3.09 B as published.
    assert shape_from_config(QWEN25_3B).num_parameters == 3_085_938_688
    untied = count_parameters(hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, vocab=837, ffn=256,
                              tied=False, qkv_bias=False)
    assert untied == 177_024 + 53_568 - 2 * 128


def test_the_count_matches_a_real_tiny_model(tmp_path):
    import torch  # noqa: F401 - transformers needs it
    from transformers import AutoModelForCausalLM

    from trainer.models.tiny import make_tiny_model

    folder = make_tiny_model(tmp_path / "tiny", preset="smoke", seed=0)
    shape = shape_from_config(read_model_config(folder))
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert shape.num_parameters == sum(p.numel() for p in model.parameters())
    assert (shape.head_dim, shape.num_kv_heads) == (16, 2)


def _cfg(**over):
    cfg = {
        "data": {"max_prompt_length": 100, "max_response_length": 28, "train_batch_size": 4},
        "actor_rollout_ref": {
            "model": {"dtype": "float32", "enable_gradient_checkpointing": False},
            "rollout": {"name": "hf", "n": 2, "response_length": None, "log_prob_micro_batch_size_per_gpu": None,
                        "gpu_memory_utilization": 0.5, "free_cache_engine": True},
            "actor": {"ppo_mini_batch_size": 4, "ppo_micro_batch_size_per_gpu": 2, "use_kl_loss": True,
                      "use_dynamic_bsz": False},
            "ref": {"fsdp_config": {"param_offload": False}},
        },
        "algorithm": {"use_kl_in_reward": False},
    }
    for dotted, value in over.items():
        *head, last = dotted.split(".")
        node = cfg
        for part in head:
            node = node.setdefault(part, {})
        node[last] = value
    return cfg


def test_cpu_estimate_by_hand():
    shape = shape_from_config(SMOKE)
    est = estimate(shape, _cfg(), gpus=0, capacity_bytes=GIB)
    lines = {x.name: x.bytes for x in est.lines}
    p = 177_024
    assert lines["actor weights"] == lines["actor gradients"] == 4 * p == 708_096
    assert lines["optimizer states"] == 8 * p
    assert lines["reference weights"] == 4 * p  # float32 on the CPU
    assert lines["rollout engine (hf)"] == 0  # one worker: the engine runs on the actor's module
    # 4 prompts x 2 samples = 8 rows x (100 + 28) tokens x (2 x 2 layers x 2 kv heads x 16) x 4 bytes
    assert lines["rollout KV cache"] == 8 * 128 * 128 * 4 == 524_288
    # micro 2 x 128 tokens = 256; per token and layer 6*64 + 2*32 + 4*256 = 1,472 values; 2 layers; 4 bytes
    assert lines["update activations"] == 256 * 2 * 1472 * 4 == 3_014_656
    # 256 * 28 / 128 = 56 response tokens x 837 vocab x (4 + 4) bytes
    assert lines["update logits"] == 56 * 837 * 8 == 374_976
    assert lines["log-prob logits"] == 8 * 28 * 837 * 8 == 1_499_904
    resident = 708_096 + 1_416_192 + 708_096
    assert est.phases == {"rollout": resident + 524_288, "log-prob": resident + 1_499_904,
                          "update": resident + 708_096 + 3_014_656 + 374_976}
    assert est.peak_phase == "update" and est.peak_bytes == 6_930_112
    assert est.fits and est.warning == "" and est.device == "cpu" and est.engine == "hf"
    assert not estimate(shape, _cfg(), gpus=0, capacity_bytes=6_930_111).fits


def test_checkpointing_and_no_kl():
    shape = shape_from_config(SMOKE)
    est = estimate(shape, _cfg(**{"actor_rollout_ref.model.enable_gradient_checkpointing": True,
                                  "actor_rollout_ref.actor.use_kl_loss": False}), gpus=0, capacity_bytes=GIB)
    lines = {x.name: x.bytes for x in est.lines}
    # 256 tokens x (2 layers x 64 kept + 1,472 for the one layer recomputed) x 4 bytes
    assert lines["update activations"] == 256 * (2 * 64 + 1472) * 4 == 1_638_400
    assert lines["reference weights"] == 0


QWEN_GSM8K = {
    "data.max_prompt_length": 1024, "data.max_response_length": 1024, "data.train_batch_size": 256,
    "actor_rollout_ref.model.dtype": "auto", "actor_rollout_ref.model.enable_gradient_checkpointing": True,
    "actor_rollout_ref.rollout.name": "sglang", "actor_rollout_ref.rollout.n": 16,
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": 32,
    "actor_rollout_ref.actor.ppo_mini_batch_size": 256, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 32,
    "actor_rollout_ref.ref.fsdp_config": {"param_offload": True},
}


def test_qwen_3b_gsm8k_fits_on_8_gpus_not_on_one():
    shape = shape_from_config(QWEN25_3B)
    p = 3_085_938_688
    one = estimate(shape, _cfg(**QWEN_GSM8K), gpus=1, capacity_bytes=80 * GIB)
    lines = {x.name: x.bytes for x in one.lines}
    assert lines["reference weights"] == 0  # offloaded to host memory on a GPU
    assert lines["rollout engine (SGLang)"] == 40 * GIB  # gpu_memory_utilization 0.5 x 80 GiB
    # checkpointing: 32 x 2,048 = 65,536 tokens x (36 x 2,048 + 6*2,048 + 2*256 + 4*11,008) x 2 bytes (bf16)
    assert lines["update activations"] == 65_536 * (73_728 + 56_832) * 2 == 17_112_760_320
    # 32,768 response tokens x 151,936 x (2 + 4) bytes
    assert lines["update logits"] == 32_768 * 151_936 * 6 == 29_871_833_088
    assert one.phases["update"] == 12 * p + 4 * p + 17_112_760_320 + 29_871_833_088 == 96_359_612_416
    assert one.phases["rollout"] == 12 * p + 40 * GIB
    assert one.peak_phase == "update" and not one.fits
    assert "89.7 GiB" in one.warning and "80.0 GiB" in one.warning
    eight = estimate(shape, _cfg(**QWEN_GSM8K), gpus=8, capacity_bytes=80 * GIB)
    assert eight.phases["update"] == (12 * p) // 8 + (4 * p) // 8 + 17_112_760_320 + 29_871_833_088
    assert eight.fits and eight.workers == 8


def test_vllm_reserves_its_pool_as_sglang_does():
    shape = shape_from_config(QWEN25_3B)
    sglang = estimate(shape, _cfg(**QWEN_GSM8K), gpus=1, capacity_bytes=80 * GIB)
    vllm = estimate(shape, _cfg(**{**QWEN_GSM8K, "actor_rollout_ref.rollout.name": "vllm",
                                   "actor_rollout_ref.rollout.gpu_memory_utilization": 0.25}),
                    gpus=1, capacity_bytes=80 * GIB)
    lines = {x.name: x.bytes for x in vllm.lines}
    assert lines["rollout engine (vLLM)"] == 20 * GIB and lines["rollout KV cache"] == 0
    assert "rollout engine (SGLang)" not in lines and vllm.engine == "vllm"
    assert vllm.phases["rollout"] == sglang.phases["rollout"] - 20 * GIB
    held = estimate(shape, _cfg(**{**QWEN_GSM8K, "actor_rollout_ref.rollout.name": "vllm",
                                   "actor_rollout_ref.rollout.free_cache_engine": False}),
                    gpus=1, capacity_bytes=80 * GIB)
    assert held.phases["update"] == sglang.phases["update"] + 40 * GIB  # the pool stays through the update
    # auto never resolves to vllm, installed or not
    auto = estimate(shape, _cfg(**{**QWEN_GSM8K, "actor_rollout_ref.rollout.name": "auto"}), gpus=1,
                    capacity_bytes=80 * GIB, sglang_available=False)
    assert auto.engine == "hf"


def test_read_model_config_refuses_what_it_cannot_use(tmp_path):
    with pytest.raises(ModelConfigUnreadable, match="no readable config.json"):
        read_model_config(tmp_path)
    (tmp_path / "config.json").write_text("[1]")
    with pytest.raises(ModelConfigUnreadable, match="not an object"):
        read_model_config(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 8}))
    with pytest.raises(ModelConfigUnreadable, match="num_hidden_layers"):
        shape_from_config(read_model_config(tmp_path))
    (tmp_path / "config.json").write_text(" " * (2 << 20))
    with pytest.raises(ModelConfigUnreadable, match="larger than 1 MiB"):
        read_model_config(tmp_path)


def test_device_capacity_from_settings_and_the_machine(settings):
    import psutil

    from rlstudio.runs.memory_estimate import device_capacity

    settings.RLSTUDIO_GPU_MEMORY_GB = 141
    assert device_capacity(gpus=2) == 141 * GIB
    assert device_capacity(gpus=0) == psutil.virtual_memory().total


def test_lora_parameters_by_hand_and_on_the_real_tiny_model(tmp_path):
    from rlstudio.runs.memory_estimate import lora_parameters

    shape = shape_from_config(SMOKE)
    # per layer r x (in + out): q 64+64, k 64+32, v 64+32, o 64+64, gate/up 64+256, down 256+64 = 1,408
    assert lora_parameters(shape, rank=4) == 4 * 2 * 1408 == 11_264
    assert lora_parameters(shape, rank=4, target_modules=["q_proj", "v_proj"]) == 4 * 2 * (128 + 96)
    assert lora_parameters(shape, rank=4, exclude_modules=["down_proj"]) == 4 * 2 * (1408 - 320)
    assert lora_parameters(shape, rank=4, target_modules=".*proj") == 11_264  # a regex: all, an upper bound
    # Qwen2.5-3B at rank 32: 32 x 36 x 51,968 = 59.9 M adapter parameters (2% of the model)
    assert lora_parameters(shape_from_config(QWEN25_3B), rank=32) == 59_867_136

    import torch  # noqa: F401 - transformers needs it
    from transformers import AutoModelForCausalLM

    from trainer.config import Config
    from trainer.models.tiny import make_tiny_model
    from trainer.workers.lora import wrap

    model = AutoModelForCausalLM.from_pretrained(make_tiny_model(tmp_path / "tiny", preset="smoke", seed=0))
    for over, want in (({}, 11_264), ({"exclude_modules": ["down_proj"]}, 4 * 2 * 1088)):
        m = AutoModelForCausalLM.from_pretrained(model.name_or_path)
        wrap(m, Config.from_dict({"actor_rollout_ref": {"model": {"lora_rank": 4, **over}}}).actor_rollout_ref.model)
        assert sum(p.numel() for p in m.parameters() if p.requires_grad) == want


def test_lora_estimate_by_hand():
    shape = shape_from_config(SMOKE)
    p, a = 177_024, 11_264
    est = estimate(shape, _cfg(**{"actor_rollout_ref.model.lora_rank": 4}), gpus=0, capacity_bytes=GIB)
    lines = {x.name: x.bytes for x in est.lines}
    assert lines["actor weights"] == 4 * (p + a) == 753_152  # the frozen base + the adapter
    assert lines["actor gradients"] == 4 * a and lines["optimizer states"] == 8 * a
    assert lines["reference weights"] == 0  # the base with the adapter disabled
    assert lines["rollout engine (hf)"] == 4 * p  # its own merged copy (float32 on the CPU)
    assert lines["rollout KV cache"] == 524_288
    resident = 753_152 + 8 * a + 4 * p
    assert est.phases["update"] == resident + 4 * a + 3_014_656 + 374_976 == 4_986_048
    full = estimate(shape, _cfg(), gpus=0, capacity_bytes=GIB)
    assert est.peak_bytes < full.peak_bytes == 6_930_112


def test_lora_saving_on_qwen_3b_gsm8k():
    shape = shape_from_config(QWEN25_3B)
    p, a = 3_085_938_688, 59_867_136
    act, logits = 17_112_760_320, 29_871_833_088
    cfg = _cfg(**{**QWEN_GSM8K, "actor_rollout_ref.model.lora_rank": 32, "actor_rollout_ref.rollout.name": "hf"})
    one = estimate(shape, cfg, gpus=1, capacity_bytes=80 * GIB)
    lines = {x.name: x.bytes for x in one.lines}
    assert lines["rollout engine (hf)"] == 2 * p  # a bf16 copy holding the merged weights
    assert one.phases["update"] == 4 * (p + a) + 8 * a + 2 * p + 4 * a + act + logits
    full = estimate(shape, _cfg(**{**QWEN_GSM8K, "actor_rollout_ref.rollout.name": "hf"}), gpus=1,
                    capacity_bytes=80 * GIB)
    # full fine-tuning: 16 P of weights, gradients and moments, the engine on the actor's module
    assert full.phases["update"] == 16 * p + act + logits
    assert full.phases["update"] - one.phases["update"] == 10 * p - 16 * a  # 27.8 GiB less per device


def test_gae_adds_the_critic_by_hand():
    shape = shape_from_config(SMOKE)
    p = 177_024
    plain = estimate(shape, _cfg(), gpus=0, capacity_bytes=GIB)
    cfg = _cfg(**{"algorithm.adv_estimator": "gae"})
    cfg["critic"] = {"ppo_mini_batch_size": None, "ppo_micro_batch_size_per_gpu": 1}
    est = estimate(shape, cfg, gpus=0, capacity_bytes=GIB)
    lines = {x.name: x.bytes for x in est.lines}
    assert lines["critic weights and optimizer"] == 12 * p  # float32 weights + two AdamW moments
    # its update: float32 gradients + micro 1 x 128 tokens x 2 layers x 1,472 values x 4 bytes
    assert lines["critic update"] == 4 * p + 128 * 2 * 1472 * 4 == 2_215_424
    for phase in ("rollout", "log-prob", "update"):
        assert est.phases[phase] == plain.phases[phase] + 12 * p
    assert est.phases["critic update"] == plain.phases["update"] - (4 * p + 3_014_656 + 374_976) + 12 * p + 2_215_424
    assert est.peak_phase == "update" and est.peak_bytes == 6_930_112 + 12 * p
    two = estimate(shape, cfg, gpus=2, capacity_bytes=80 * GIB)
    assert {x.name: x.bytes for x in two.lines}["critic weights and optimizer"] == 12 * p // 2


def test_a_validation_batch_is_its_own_phase_on_the_hf_engine():
    """8 rows per step; a validation set of 300 prompts x val_kwargs.n 4 generated at once is 1,200
    rows: the validation phase is the peak until data.val_batch_size cuts it."""
    shape = shape_from_config(SMOKE)
    kv_row = 128 * 128 * 4  # (100 + 28) tokens x 128 values x 4 bytes, as in test_cpu_estimate_by_hand
    resident = 708_096 + 1_416_192 + 708_096
    val = {"data.val_files": "/v.jsonl", "actor_rollout_ref.rollout.val_kwargs.n": 4}
    whole = estimate(shape, _cfg(**val), gpus=0, capacity_bytes=GIB, val_rows=300)
    lines = {x.name: x.bytes for x in whole.lines}
    assert lines["validation KV cache"] == 1200 * kv_row
    assert whole.phases["validation"] == resident + 1200 * kv_row and whole.peak_phase == "validation"
    cut = estimate(shape, _cfg(**val, **{"data.val_batch_size": 2}), gpus=0, capacity_bytes=GIB, val_rows=300)
    assert {x.name: x.bytes for x in cut.lines}["validation KV cache"] == 8 * kv_row
    assert cut.peak_phase == "update"
    # a batch larger than the set generates the set; no validation set, no validation phase
    big = estimate(shape, _cfg(**val, **{"data.val_batch_size": 4096}), gpus=0, capacity_bytes=GIB, val_rows=3)
    assert {x.name: x.bytes for x in big.lines}["validation KV cache"] == 12 * kv_row
    none = estimate(shape, _cfg(**{"actor_rollout_ref.rollout.val_kwargs.n": 4}), gpus=0, capacity_bytes=GIB,
                    val_rows=300)
    assert "validation" not in none.phases and "validation KV cache" not in {x.name for x in none.lines}


def test_dynamic_sampling_generates_gen_batch_size_prompts_at_once():
    shape = shape_from_config(SMOKE)
    kv_row = 128 * 128 * 4
    dapo = {"algorithm.filter_groups": {"enable": True}, "data.gen_batch_size": 12}
    lines = {x.name: x.bytes for x in estimate(shape, _cfg(**dapo), gpus=0, capacity_bytes=GIB).lines}
    assert lines["rollout KV cache"] == 12 * 2 * kv_row  # 12 prompts x n = 2, not the 4 trained
    off = {**dapo, "algorithm.filter_groups": {"enable": False}}
    assert {x.name: x.bytes for x in estimate(shape, _cfg(**off), gpus=0, capacity_bytes=GIB).lines}[
        "rollout KV cache"] == 8 * kv_row


def test_actor_offload_frees_the_rollout_of_its_weights_and_moments():
    """verl's actor.fsdp_config.param_offload / optimizer_offload on a GPU (trainer/parallel/offload.py):
    the weights (4 P) and AdamW's moments (8 P) wait in host memory while SGLang generates; the moments
    outside the update; the update holds everything as before. Off a GPU nothing moves."""
    shape = shape_from_config(QWEN25_3B)
    p = 3_085_938_688
    base = estimate(shape, _cfg(**QWEN_GSM8K), gpus=1, capacity_bytes=80 * GIB)
    cfg = _cfg(**{**QWEN_GSM8K, "actor_rollout_ref.actor.fsdp_config": {"param_offload": True, "optimizer_offload": True}})
    off = estimate(shape, cfg, gpus=1, capacity_bytes=80 * GIB)
    assert off.phases["rollout"] == base.phases["rollout"] - 12 * p == 40 * GIB
    # the moments (8 P) leave; and with the actor's weights (4 P) away during the reference's pass, that
    # pass (the offloaded reference brought whole, 2 P) no longer outweighs the actor's own
    assert off.phases["log-prob"] == base.phases["log-prob"] - 8 * p - 2 * p
    assert off.phases["update"] == base.phases["update"]
    assert "actor offload" in {x.name for x in off.lines} and "actor offload" not in {x.name for x in base.lines}
    only_optim = estimate(shape, _cfg(**{**QWEN_GSM8K, "actor_rollout_ref.actor.fsdp_config": {"optimizer_offload": True}}),
                          gpus=1, capacity_bytes=80 * GIB)
    assert only_optim.phases["rollout"] == base.phases["rollout"] - 8 * p
    # the one-worker hf engine generates on the actor's own weights: they stay for the rollout
    hf = {**QWEN_GSM8K, "actor_rollout_ref.rollout.name": "hf"}
    hf_base = estimate(shape, _cfg(**hf), gpus=1, capacity_bytes=80 * GIB)
    hf_off = estimate(shape, _cfg(**{**hf, "actor_rollout_ref.actor.fsdp_config": {"param_offload": True}}),
                      gpus=1, capacity_bytes=80 * GIB)
    assert hf_off.phases["rollout"] == hf_base.phases["rollout"]
    cpu = estimate(shape_from_config(SMOKE), cfg, gpus=0, capacity_bytes=16 * GIB)
    assert cpu.phases == estimate(shape_from_config(SMOKE), _cfg(**QWEN_GSM8K), gpus=0, capacity_bytes=16 * GIB).phases


def test_an_offloaded_reference_on_one_gpu_comes_whole_for_its_pass():
    """One worker has no FSDP2 (so no CPUOffloadPolicy): the reference's param_offload keeps it in host
    memory and brings it whole (2 P in bf16) for its log-prob pass; sharded over 8 GPUs, never whole."""
    shape = shape_from_config(QWEN25_3B)
    p = 3_085_938_688
    one = estimate(shape, _cfg(**QWEN_GSM8K), gpus=1, capacity_bytes=80 * GIB)
    kept = estimate(shape, _cfg(**{**QWEN_GSM8K, "actor_rollout_ref.ref.fsdp_config": {"param_offload": False}}),
                    gpus=1, capacity_bytes=80 * GIB)
    assert {x.name: x.bytes for x in one.lines}["reference weights"] == 0
    assert one.phases["log-prob"] == kept.phases["log-prob"]  # resident, or brought whole: the same peak
    assert one.phases["update"] == kept.phases["update"] - 2 * p  # but not held through the update
    away = estimate(shape, _cfg(**{**QWEN_GSM8K, "actor_rollout_ref.actor.fsdp_config": {"param_offload": True}}),
                    gpus=1, capacity_bytes=80 * GIB)
    # the actor's weights away during the reference's pass (12 P - 4 P + 2 P): the actor's own pass is the larger
    assert away.phases["log-prob"] == one.phases["log-prob"] - 2 * p
    eight = estimate(shape, _cfg(**QWEN_GSM8K), gpus=8, capacity_bytes=80 * GIB)
    kept8 = estimate(shape, _cfg(**{**QWEN_GSM8K, "actor_rollout_ref.ref.fsdp_config": {"param_offload": False}}),
                     gpus=8, capacity_bytes=80 * GIB)
    assert eight.phases["log-prob"] == kept8.phases["log-prob"] - 2 * p // 8
