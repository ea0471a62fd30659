"""trainer.export.export_checkpoint on real checkpoints: the non-final (step 1 of 2) checkpoint of two
CPU workers under a real local Ray (FSDP2 shards, one .distcp per rank) and of a LoRA run. Each export
loads with transformers and generates the same greedy tokens as the checkpoint loaded back by the
trainer's own worker (a one-worker group reading the shards); the LoRA export's adapter folder loads
with peft on the base and generates the same too."""
from __future__ import annotations

import json

import pytest
import torch

from tests.trainer.parallel.test_lora_fsdp import cfg_dict as lora_cfg_dict
from tests.trainer.parallel.test_lora_fsdp import step
from tests.trainer.parallel.test_parallel_workers import cfg_dict
from trainer import checkpoint as ckpt
from trainer.export import export_checkpoint

PROMPT = [[11, 12, 13, 14, 15, 16]]


def train_two_steps(group, root, d):
    """Steps 1 and 2, each followed by a committed checkpoint written by every rank of `group`."""
    for n in (1, 2):
        step(group, n)
        ckpt.save_checkpoint(root, n, write_actor=lambda p: group.call("save", path=str(p)),
                             loader_state={}, trainer_state={}, config=d)


def greedy(model, n=10) -> list[int]:
    with torch.no_grad():
        out = model.eval().generate(input_ids=torch.tensor(PROMPT), max_new_tokens=n, do_sample=False,
                                    pad_token_id=0)
    return out[0].tolist()[len(PROMPT[0]):]


def trainer_loaded_tokens(d, step_path) -> list[int]:
    """The checkpoint as the trainer resumes it: a one-worker group loading the step's actor folder."""
    from trainer.parallel.group import LocalWorkerGroup

    group = LocalWorkerGroup(d)
    try:
        group.call("load", path=str(step_path / "actor"))
        return greedy(group.worker.actor.model)
    finally:
        group.shutdown()


@pytest.fixture(scope="module")
def sharded(local_ray, tiny_model_dir, demo_data_dir, tmp_path_factory):
    from trainer.parallel.group import RayWorkerGroup

    d = cfg_dict(tiny_model_dir, demo_data_dir / "train.jsonl")
    d["actor_rollout_ref"]["actor"]["optim"]["lr"] = 1e-2  # steps far enough apart to tell them apart
    root = tmp_path_factory.mktemp("sharded")
    group = RayWorkerGroup(d, world_size=2, device_type="cpu")
    try:
        train_two_steps(group, root, d)
    finally:
        group.shutdown()
    return d, root


def test_non_final_checkpoint_of_two_workers_exports_merged(sharded, tmp_path, tiny_model_dir):
    from transformers import AutoModelForCausalLM

    d, root = sharded
    step1 = ckpt.step_dir(root, 1)
    assert len(list((step1 / "actor").glob("*.distcp"))) == 2 and ckpt.latest_step(root) == 2
    info = export_checkpoint(d, step1, tmp_path / "out")
    assert info["lora"] is False
    assert {"huggingface/config.json", "huggingface/model.safetensors", "huggingface/tokenizer.json",
            "huggingface/generation_config.json"} <= set(info["files"])
    assert not (tmp_path / "out.tmp").exists()
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "out" / "huggingface")
    want, later = ckpt.read_actor_model(step1), ckpt.read_actor_model(ckpt.step_dir(root, 2))
    for n, p in exported.named_parameters():
        assert torch.equal(p.detach(), want[n]), n
    assert max((want[k] - later[k]).abs().max().item() for k in want) > 1e-4  # step 1, not the last one
    assert greedy(exported) == trainer_loaded_tokens(d, step1)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert max((p - base.state_dict()[n]).abs().max().item() for n, p in exported.named_parameters()) > 1e-4
    gen = json.loads((tmp_path / "out" / "huggingface" / "generation_config.json").read_text())
    assert gen["eos_token_id"] == json.loads((tiny_model_dir / "generation_config.json").read_text())["eos_token_id"]


def test_lora_checkpoint_exports_adapter_and_merged(tmp_path, tiny_model_dir, demo_data_dir):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from trainer.parallel.group import LocalWorkerGroup

    d = lora_cfg_dict(tiny_model_dir, demo_data_dir / "train.jsonl")
    root = tmp_path / "lora"
    group = LocalWorkerGroup(d)
    try:
        train_two_steps(group, root, d)
    finally:
        group.shutdown()
    step1 = ckpt.step_dir(root, 1)
    assert all(".lora_" in k for k in ckpt.read_actor_model(step1))
    info = export_checkpoint(d, step1, tmp_path / "out", base_model_name="tiny base")
    assert info["lora"] is True
    assert {"lora_adapter/adapter_config.json", "lora_adapter/adapter_model.safetensors",
            "huggingface/model.safetensors"} <= set(info["files"])
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "out" / "huggingface")
    names = [n for n, _ in merged.named_parameters()]
    assert not any("lora_" in n or "base_layer" in n for n in names)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert max((p - base.state_dict()[n]).abs().max().item() for n, p in merged.named_parameters()) > 1e-4
    adapter = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                                        tmp_path / "out" / "lora_adapter")
    tokens = trainer_loaded_tokens(d, step1)
    assert greedy(merged) == tokens == greedy(adapter)
    # No file names a path of this machine (peft's README.md and adapter config would name the base's).
    adapter_cfg = json.loads((tmp_path / "out" / "lora_adapter" / "adapter_config.json").read_text())
    assert adapter_cfg["base_model_name_or_path"] == "tiny base" and adapter_cfg["r"] == 4
    for f in (tmp_path / "out").rglob("*"):
        if f.is_file() and f.suffix != ".safetensors":
            assert str(tiny_model_dir) not in f.read_text() and str(tmp_path) not in f.read_text(), f


def test_a_checkpoint_that_does_not_fit_the_config_is_refused(sharded, tmp_path):
    d, root = sharded
    lora = json.loads(json.dumps(d))
    lora["actor_rollout_ref"]["model"]["lora_rank"] = 4
    with pytest.raises(ValueError, match="no adapter weights"):
        export_checkpoint(lora, ckpt.step_dir(root, 1), tmp_path / "out")  # full weights, LoRA config
    with pytest.raises(FileNotFoundError):
        export_checkpoint(d, root / "global_step_9", tmp_path / "out")
    assert not (tmp_path / "out").exists()
