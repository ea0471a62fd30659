"""Real checkpoints on disk (issue 16, item 5), on folders in the families' real formats
(tests/fixtures/families.py): sharded safetensors, bf16 weights loaded in the configured dtype,
generation_config.json (stop ids, sampling defaults only where the config left them unset), tied
embeddings through load, checkpoint and export, and tokenizer folders with only tokenizer.json or
only the slow files."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.fixtures import families
from trainer.config import apply_overrides
from trainer.models.hf_folder import (
    GenerationDefaults, fill_sampling_defaults, load_tokenizer, read_generation_config, weight_files,
)
from trainer.recipes import get_recipe


class ListSink:
    def __init__(self):
        self.events = []

    def write(self, event):
        self.events.append(event)

    def close(self):
        pass


def rows_file(tmp_path: Path) -> Path:
    from trainer.tasks import arith

    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in arith.make_rl_rows("train", 8, seed=0)))
    return path


# A reward that varies between samples, so advantages and gradients are not all zero.
REWARD = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return sum(c.isdigit() or c == " " for c in solution_str) / max(1, len(solution_str))
"""


def config(tmp_path: Path, model: Path, **over):
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "reward.py").write_text(REWARD)
    ov = {"data.train_files": str(rows_file(tmp_path)), "actor_rollout_ref.model.path": str(model),
          "custom_reward_function.path": str(tmp_path / "reward.py"),
          "trainer.default_local_dir": str(tmp_path / "out"), "trainer.logger": ["jsonl"],
          "trainer.total_training_steps": 1, "report.memory_interval_s": 0}
    ov.update(over)
    return apply_overrides(get_recipe("cpu_smoke"), ov)


def trainer_for(cfg):
    from trainer.loop import Trainer
    from trainer.sinks import Emitter

    sink = ListSink()
    t = Trainer(cfg, emitter=Emitter([sink]))
    t.setup()
    return t, sink


def file_weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    out = {}
    for f in weight_files(folder):
        out.update(load_file(str(f)))
    return out


# ---------------------------------------------------------------------------------------- pure


def test_read_generation_config(tmp_path):
    d = families.build("llama3", tmp_path / "l")
    g = read_generation_config(d)
    assert g == GenerationDefaults(eos_token_ids=(128001, 128008, 128009), bos_token_id=128000, pad_token_id=None,
                                   temperature=0.6, top_p=0.9, top_k=None)
    (d / "generation_config.json").write_text(json.dumps({"eos_token_id": 7, "top_k": 0, "temperature": 1}))
    assert read_generation_config(d) == GenerationDefaults(eos_token_ids=(7,), bos_token_id=128000,
                                                           temperature=1.0, top_k=-1)
    (d / "generation_config.json").unlink()  # transformers then takes config.json's ids
    g = read_generation_config(d)
    assert g.eos_token_ids == (128001, 128008, 128009) and g.temperature is None


def test_fill_sampling_defaults_only_where_unset():
    cfg = apply_overrides(get_recipe("cpu_smoke"), {"actor_rollout_ref.rollout.temperature": None,
                                                    "actor_rollout_ref.rollout.top_p": None})
    gen = GenerationDefaults(temperature=0.7, top_p=None, top_k=20)
    new, filled = fill_sampling_defaults(cfg, gen)
    r = new.actor_rollout_ref.rollout
    assert (r.temperature, r.top_p, r.top_k) == (0.7, 1.0, 20)
    assert filled == {"temperature": (0.7, "generation_config.json"), "top_p": (1.0, "default"),
                      "top_k": (20, "generation_config.json")}
    set_by_user = apply_overrides(cfg, {"actor_rollout_ref.rollout.temperature": 1.0,
                                        "actor_rollout_ref.rollout.top_p": 0.5,
                                        "actor_rollout_ref.rollout.top_k": -1})
    assert fill_sampling_defaults(set_by_user, gen) == (set_by_user, {})


@pytest.mark.parametrize("family,files", [("qwen2.5", "slow"), ("qwen3", "tokenizer.json"),
                                          ("llama3", "tokenizer.json"), ("chatml", "slow")])
def test_tokenizer_only_json_or_slow_files(tmp_path, family, files):
    bare = families.build(family, tmp_path / "bare", files=files)
    full = families.build(family, tmp_path / "full")
    tok, ref = load_tokenizer(bare), load_tokenizer(full)
    eos = {"qwen2.5": "<|im_end|>", "qwen3": "<|im_end|>", "chatml": "<|im_end|>",
           "llama3": "<|end_of_text|>"}[family]  # Llama: generation_config's first eos id (128001)
    assert tok.eos_token == eos and tok.pad_token is not None
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2? <think>"},
            {"role": "assistant", "content": "4"}]
    text = tok.apply_chat_template(msgs, tokenize=False)
    assert text == ref.apply_chat_template(msgs, tokenize=False)  # Llama's bos_token filled from config.json
    assert tok.encode(text, add_special_tokens=False) == ref.encode(text, add_special_tokens=False)


# ------------------------------------------------------------------------------- the trainer


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_sharded_bf16_checkpoint_in_configured_dtype(tmp_path, dtype):
    model = families.build("qwen2.5", tmp_path / "m", shards=3, dtype="bfloat16", tie=False)
    assert len(weight_files(model)) == 3
    on_disk = file_weights(model)
    assert {t.dtype for t in on_disk.values()} == {torch.bfloat16}
    t, _ = trainer_for(config(tmp_path, model, **{"actor_rollout_ref.model.dtype": dtype}))
    try:
        want = getattr(torch, dtype)
        actor = dict(t.actor.model.named_parameters())
        ref = dict(t.ref.model.named_parameters())
        assert set(actor) == set(on_disk)  # every shard's tensors, the untied head included
        assert {p.dtype for p in actor.values()} == {torch.float32}  # trainable master weights
        assert {p.dtype for p in ref.values()} == {want}  # the frozen reference in the configured dtype
        for name, w in on_disk.items():
            assert torch.equal(actor[name].detach(), w.float()), name
            assert torch.equal(ref[name].detach(), w.to(want)), name
        if dtype == "float32":
            metrics = t.train_step(1)
            assert metrics["actor/grad_norm"] > 0 and metrics["actor/grad_norm"] == metrics["actor/grad_norm"]
    finally:
        t.close()


def test_generation_config_stop_ids_and_sampling_defaults(tmp_path):
    model = families.build("qwen2.5", tmp_path / "m")
    unset = {f"actor_rollout_ref.rollout.{k}": None for k in ("temperature", "top_p", "top_k")}
    t, sink = trainer_for(config(tmp_path / "a", model, **unset))
    try:
        r = t.cfg.actor_rollout_ref.rollout
        assert (r.temperature, r.top_p, r.top_k) == (0.7, 0.8, 20)  # the model's generation_config.json
        sp = t.sampling(1)
        assert (sp.temperature, sp.top_p, sp.top_k) == (0.7, 0.8, 20)
        assert t.actor.temperature == 0.7  # log-probs use the temperature the rollout sampled with
        assert {151645, 151643} <= set(t.stop_ids)
        logs = [e["data"]["message"] for e in sink.events if e["type"] == "log"]
        assert any("actor_rollout_ref.rollout.temperature=0.7 (generation_config.json)" in m for m in logs)
    finally:
        t.close()
    # A value the user set wins; the rest still come from the model.
    t, _ = trainer_for(config(tmp_path / "b", model, **{**unset, "actor_rollout_ref.rollout.temperature": 1.0}))
    try:
        r = t.cfg.actor_rollout_ref.rollout
        assert (r.temperature, r.top_p, r.top_k) == (1.0, 0.8, 20)
    finally:
        t.close()


def test_generation_config_eos_list_joins_stop_ids(tmp_path):
    """A tokenizer.json-only Llama folder declares no EOS at all: the stop ids come from
    generation_config.json's list (end of text, end of message, end of turn) and one step trains."""
    model = families.build("llama3", tmp_path / "m", files="tokenizer.json")
    t, _ = trainer_for(config(tmp_path, model, **{"actor_rollout_ref.rollout.multi_turn.enable": False}))
    try:
        assert {128001, 128008, 128009} <= set(t.stop_ids)
        assert t.tokenizer.pad_token_id is not None
        assert t.train_step(1)["actor/grad_norm"] > 0
    finally:
        t.close()


def _tied(model) -> bool:
    return model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()


@pytest.mark.parametrize("tie", [True, False])
def test_tied_embeddings_through_load_checkpoint_resume_and_export(tmp_path, tie):
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    from trainer import checkpoint as ckpt
    from trainer.run import run

    model = families.build("qwen3", tmp_path / "m", tie=tie)
    cfg = config(tmp_path, model, **{"trainer.save_freq": 1, "trainer.export_hf": True,
                                     "actor_rollout_ref.actor.optim.lr": 1e-2})
    assert run(cfg) == 0
    out = tmp_path / "out"
    saved = ckpt.read_actor_model(ckpt.step_dir(out, 1))
    export = out / "huggingface"
    with safe_open(str(weight_files(export)[0]), "pt") as f:
        assert ("lm_head.weight" in set(f.keys())) is not tie  # a tied head is not stored twice
    reloaded = AutoModelForCausalLM.from_pretrained(export)
    assert reloaded.config.tie_word_embeddings is tie and _tied(reloaded) is tie
    assert json.loads((export / "generation_config.json").read_text())["eos_token_id"] == [151645, 151643]
    embed = saved["model.embed_tokens.weight"]
    trained = not torch.equal(embed, file_weights(model)["model.embed_tokens.weight"])
    assert trained  # lr 1e-2: the step moved the embedding

    # Resume into a fresh trainer: the checkpoint's weights, and the tie as the model declares it.
    t, _ = trainer_for(apply_overrides(cfg, {"trainer.total_training_steps": 2}))
    try:
        t.maybe_resume()
        m = t.actor.model
        assert t.global_step == 1 and _tied(m) is tie
        assert torch.equal(m.get_input_embeddings().weight.detach(), embed)
        if not tie:
            assert torch.equal(m.get_output_embeddings().weight.detach(), saved["lm_head.weight"])
        t.train_step(2)
        assert _tied(m) is tie  # the optimizer updates one shared tensor, not two copies
    finally:
        t.close()
