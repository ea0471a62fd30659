"""LoRA on the tiny model (actor_rollout_ref.model.lora_rank > 0, trainer.workers.lora): only the
adapter trains; the reference is the base (adapter disabled, no second model); the rollout engine
holds merged weights after a sync; the checkpoint holds the adapter and resumes exactly; the export
writes a merged HF folder and a peft adapter folder that generate what the checkpoint does; 2 steps
through the command line (trainer.cli.main, in-process)."""
from __future__ import annotations

import copy
import json

import pytest
import torch

from trainer import checkpoint as ckpt
from trainer.cli import main
from trainer.config import ConfigError, apply_overrides, config_warnings, validate
from trainer.recipes import get_recipe
from trainer.workers.experience import make_batch

LORA = {"actor_rollout_ref.model.lora_rank": 4, "actor_rollout_ref.model.lora_alpha": 8}
REWARD = ("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
          "    return (len(solution_str) % 7) / 7.0\n")


def toy_batch():
    g = torch.Generator().manual_seed(0)
    lens_p, lens_r = [5, 9, 3, 7], [6, 2, 8, 4]
    prompts = [torch.randint(10, 200, (n,), generator=g).tolist() for n in lens_p]
    responses = [torch.randint(10, 200, (n,), generator=g).tolist() for n in lens_r]
    masks = [[1] * n for n in lens_r]
    masks[2] = [1, 1, 0, 0, 0, 1, 1, 1]
    b = make_batch(prompts, responses, masks, uids=["a", "a", "b", "b"])
    b.advantages = torch.randn(4, 8, generator=torch.Generator().manual_seed(1)) * b.loss_mask
    return b


@pytest.fixture(scope="module")
def lora_group(tiny_model_dir, demo_data_dir):
    """One in-process worker with LoRA and a KL loss (which needs the reference)."""
    from trainer.parallel.group import LocalWorkerGroup

    cfg = apply_overrides(get_recipe("cpu_smoke"), {
        **LORA, "actor_rollout_ref.model.path": str(tiny_model_dir),
        "data.train_files": str(demo_data_dir / "train.jsonl"),
        "actor_rollout_ref.actor.optim.total_training_steps": 4, "actor_rollout_ref.actor.optim.lr": 1e-2,
        "actor_rollout_ref.rollout.update_weights_bucket_megabytes": 1, "trainer.torch_threads": 1})
    group = LocalWorkerGroup(cfg.to_dict())
    yield group
    group.shutdown()


def test_one_step_trains_only_the_adapter_and_the_engine_gets_merged_weights(lora_group, tiny_model_dir):
    from peft.tuners.lora import LoraLayer

    from trainer.workers.actor import ActorWorker
    from trainer.workers.lora import base_name, is_adapter_param

    w = lora_group.worker
    assert w.ref is None and w.lora is not None  # no second copy of the weights
    assert not lora_group.info[0]["shared_engine"]  # the engine holds merged weights of its own
    assert lora_group.worker.logits_gap([[11, 12, 13, 14, 15]]) == 0.0  # B = 0: merged = base
    trainable = {n for n, p in w.actor.model.named_parameters() if p.requires_grad}
    assert trainable and all(is_adapter_param(n) for n in trainable)
    assert {id(p) for g in w.actor.optimizer.param_groups for p in g["params"]} == \
        {id(p) for n, p in w.actor.model.named_parameters() if n in trainable}
    before = {n: p.detach().clone() for n, p in w.actor.model.named_parameters()}

    b, parts = toy_batch(), [[0, 1, 2, 3]]
    b.old_log_probs, _ = lora_group.compute_log_prob(b, parts, step=1, role="actor", with_entropy=False)
    b.ref_log_probs, _ = lora_group.compute_log_prob(b, parts, step=1, role="ref", with_entropy=False)
    assert torch.equal(b.old_log_probs, b.ref_log_probs)  # B = 0: the adapter adds nothing yet
    metrics, _, _ = lora_group.update_policy(b, parts, mini_batch_size=4, seed=3, capture=False, step=1)
    assert metrics["actor/grad_norm"][0] > 0
    sync = lora_group.sync_weights(step=1)

    after = dict(w.actor.model.named_parameters())
    changed = {n for n in before if not torch.equal(before[n], after[n].detach())}
    assert changed and all(is_adapter_param(n) for n in changed), changed
    assert any(".lora_B." in n for n in changed)

    # The reference is the base model: a plain reference worker on the model folder gives the same.
    base = ActorWorker(model_path=str(tiny_model_dir), device=torch.device("cpu"), dtype=torch.float32,
                       trainable=False, temperature=w.actor.temperature)
    want, _ = base.compute_log_prob(b, with_entropy=False)
    ref, _ = lora_group.compute_log_prob(b, parts, step=2, role="ref", with_entropy=False)
    policy, _ = lora_group.compute_log_prob(b, parts, step=2, role="actor", with_entropy=False)
    assert torch.allclose(ref, want, atol=1e-6, rtol=0)
    assert (policy - ref).abs().max() > 1e-4  # the adapter changed the policy, not the reference

    # The engine: merged weights under the base names, the trained module untouched by the merge.
    assert sync["perf/weight_sync_mb"] > 0
    gap = w.logits_gap([b.prompt_ids[1] + b.response_ids[1]])
    assert gap < 1e-5, gap
    merged = copy.deepcopy(w.lora).merge_and_unload()  # peft's own merge, on a copy
    engine = w.engine.model.state_dict()
    for name, t in merged.state_dict().items():
        assert torch.allclose(engine[name], t, atol=1e-6, rtol=0), name
    assert all(torch.equal(before[n], after[n].detach()) for n in before if not is_adapter_param(n))
    layers = [m for m in w.actor.model.modules() if isinstance(m, LoraLayer)]
    assert layers and not any(m.merged for m in layers)
    assert base_name("model.layers.0.mlp.up_proj.base_layer.weight") == "model.layers.0.mlp.up_proj.weight"


def test_checkpoint_holds_the_adapter_and_resume_is_exact_and_the_export_generates_the_same(
        tmp_path, tiny_model_dir, demo_data_dir):
    reward = tmp_path / "reward.py"
    reward.write_text(REWARD)
    common = [f"data.train_files={demo_data_dir / 'train.jsonl'}", f"actor_rollout_ref.model.path={tiny_model_dir}",
              f"custom_reward_function.path={reward}", "trainer.logger=[jsonl]",
              "actor_rollout_ref.actor.optim.lr=1e-2", "trainer.total_training_steps=3",
              *[f"{k}={v}" for k, v in LORA.items()]]
    # An uninterrupted run of 3 steps through the command line, exporting at the end.
    a = tmp_path / "a"
    assert main(["run", "--recipe", "cpu_smoke", *common, "trainer.export_hf=true", "--output", str(a)]) == 0
    # A run that resumes from a's step-1 checkpoint.
    b = tmp_path / "b"
    assert main(["run", "--recipe", "cpu_smoke", *common, "trainer.resume_mode=resume_path",
                 f"trainer.resume_from_path={a / 'global_step_1'}", "--output", str(b)]) == 0

    def metrics(out):
        ev = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
        assert [e["data"]["state"] for e in ev if e["type"] == "status"][-1] == "succeeded"
        return {e["data"]["step"]: e["data"]["metrics"] for e in ev if e["type"] == "metrics"}

    ma, mb = metrics(a), metrics(b)
    assert sorted(ma) == [1, 2, 3] and sorted(mb) == [2, 3]
    assert ma[1]["actor/grad_norm"] > 0
    for step in (2, 3):
        for k in ("critic/score/mean", "actor/pg_loss", "actor/kl_loss", "actor/grad_norm", "response_length/mean"):
            assert ma[step][k] == pytest.approx(mb[step][k], rel=1e-6, abs=1e-9), (step, k)

    # The checkpoint is the adapter (and its optimizer state), not the base weights.
    saved = ckpt.read_actor_model(a / "global_step_3")
    assert saved and all(".lora_A." in k or ".lora_B." in k for k in saved), list(saved)[:4]
    resumed = ckpt.read_actor_model(b / "global_step_3")
    assert set(saved) == set(resumed) and all(torch.equal(saved[k], resumed[k]) for k in saved)

    # The export: a merged folder transformers loads, and an adapter folder peft loads on the base.
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainer.config import Config
    from trainer.workers.lora import wrap

    assert {"adapter_config.json", "adapter_model.safetensors"} <= {p.name for p in (a / "lora_adapter").iterdir()}
    adapter_cfg = json.loads((a / "lora_adapter" / "adapter_config.json").read_text())
    assert adapter_cfg["r"] == 4
    # No path of this machine in the folder: peft's README.md and its base_model_name_or_path name the base's.
    assert adapter_cfg["base_model_name_or_path"] is None and not (a / "lora_adapter" / "README.md").exists()
    merged = AutoModelForCausalLM.from_pretrained(a / "huggingface").eval()
    tok = AutoTokenizer.from_pretrained(a / "huggingface")
    with_adapter = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir), a / "lora_adapter")
    policy = AutoModelForCausalLM.from_pretrained(tiny_model_dir)  # the checkpoint's adapter on the base
    cfg = Config.from_dict({"actor_rollout_ref": {"model": {"lora_rank": 4, "lora_alpha": 8}}})
    wrap(policy, cfg.actor_rollout_ref.model)
    missing = policy.load_state_dict(saved, strict=False)
    assert not missing.unexpected_keys and not [k for k in missing.missing_keys if "lora_" in k]
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert max((p - base.state_dict()[n]).abs().max().item() for n, p in merged.state_dict().items()) > 1e-4

    ids = tok.apply_chat_template([{"role": "user", "content": "What is 12 + 30?"}], add_generation_prompt=True,
                                  return_tensors="pt", return_dict=True)["input_ids"]
    kw = dict(max_new_tokens=12, do_sample=False, pad_token_id=tok.pad_token_id or 0)
    with torch.no_grad():
        out = [m.eval().generate(input_ids=ids, **kw)[0].tolist() for m in (merged, with_adapter, policy)]
    assert out[0] == out[1] == out[2]

    # An evaluation of the LoRA checkpoint samples what the merged export does (greedy, the same prompts).
    from trainer.evaluate import BASE, Column, evaluate_columns

    from trainer.config import apply_overrides
    from trainer.recipes import get_recipe

    run_cfg = apply_overrides(get_recipe("cpu_smoke"), common).to_dict()  # a's config, as its run had it
    exported = json.loads(json.dumps(run_cfg))
    exported["actor_rollout_ref"]["model"].update({"path": str(a / "huggingface"), "lora_rank": 0})
    rows = [json.loads(line) for line in (demo_data_dir / "test.jsonl").read_text().splitlines()[:3]]
    kw = dict(k=1, temperature=0.0, top_p=1.0, top_k=-1, max_new_tokens=12, seed=0)
    _, from_ckpt = evaluate_columns(run_cfg, [Column(key="3", step=3, path=a / "global_step_3")], rows, **kw)
    _, from_export = evaluate_columns(exported, [Column(key=BASE, step=0)], rows, **kw)
    assert [s.turns for s in from_ckpt] == [s.turns for s in from_export] and len(from_ckpt) == 3


def test_config_checks_and_warnings():
    base = get_recipe("cpu_smoke")
    ok = apply_overrides(base, {**LORA, "actor_rollout_ref.model.target_modules": ["q_proj", "v_proj"]})
    validate(ok, require_paths=False)
    for key, value in (("lora_rank", -1), ("lora_alpha", 0), ("target_modules", []), ("target_modules", " "),
                       ("exclude_modules", [""])):
        bad = apply_overrides(base, {**LORA, f"actor_rollout_ref.model.{key}": value})
        with pytest.raises(ConfigError) as err:
            validate(bad, require_paths=False)
        assert err.value.key == f"actor_rollout_ref.model.{key}"
    low_lr = apply_overrides(base, {**LORA, "actor_rollout_ref.actor.optim.lr": 1e-6})
    assert "actor_rollout_ref.actor.optim.lr" in {w.key for w in config_warnings(low_lr)}
    off = apply_overrides(base, {"actor_rollout_ref.model.target_modules": ["q_proj"]})
    assert "actor_rollout_ref.model.lora_rank" in {w.key for w in config_warnings(off)}
    assert not {w.key for w in config_warnings(base)} & {"actor_rollout_ref.model.lora_rank"}


def test_targets_that_match_nothing_or_are_not_linear_are_refused(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    from trainer.config import Config
    from trainer.workers.lora import wrap

    def model_cfg(**kw):
        return Config.from_dict({"actor_rollout_ref": {"model": {"lora_rank": 2, **kw}}}).actor_rollout_ref.model

    with pytest.raises(ValueError, match="linear layers only"):
        wrap(AutoModelForCausalLM.from_pretrained(tiny_model_dir), model_cfg(target_modules=["embed_tokens"]))
    with pytest.raises(ValueError):  # peft: no module matched
        wrap(AutoModelForCausalLM.from_pretrained(tiny_model_dir), model_cfg(target_modules=["no_such_proj"]))
    m = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    wrap(m, model_cfg(target_modules="all-linear", exclude_modules=["o_proj"]))
    names = [n for n, p in m.named_parameters() if p.requires_grad]
    assert names and not any("o_proj" in n for n in names) and not any("lm_head" in n for n in names)


def test_adapter_gradient_is_the_same_with_gradient_checkpointing_and_shared_prompts(tiny_model_dir):
    """The adapter's gradient through the shared-prompt forward, a plain forward, and gradient
    checkpointing (frozen inputs to every checkpointed layer) is one and the same."""
    from transformers import AutoModelForCausalLM

    from trainer.config import Config
    from trainer.workers.actor import ActorWorker
    from trainer.workers.lora import wrap

    from tests.trainer.actor_probe import actor_cfg

    model_cfg = Config.from_dict({"actor_rollout_ref": {"model": {"lora_rank": 4}}}).actor_rollout_ref.model
    grads = []
    for checkpointing, share in ((False, True), (False, False), (True, False)):
        model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
        torch.manual_seed(0)  # the same A
        wrap(model, model_cfg)
        for name, p in model.named_parameters():
            if ".lora_B." in name:  # B = 0 would leave A without a gradient
                torch.nn.init.normal_(p, std=0.05, generator=torch.Generator().manual_seed(2))
        worker = ActorWorker(model_path="", device=torch.device("cpu"), dtype=torch.float32, actor_cfg=actor_cfg(),
                             model=model, gradient_checkpointing=checkpointing, share_prompts=share)
        assert worker.checkpointing == checkpointing and worker.share_prompts == share
        g: dict[str, torch.Tensor] = {}
        worker.optimizer.step = lambda *a, **k: g.update(
            {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
        worker.update_policy(toy_batch(), mini_batch_size=4)
        grads.append(g)
    assert len(grads[0]) == 28 and max(t.abs().max().item() for t in grads[0].values()) > 0
    for other in grads[1:]:
        assert set(other) == set(grads[0])
        for n, t in grads[0].items():
            assert torch.allclose(other[n], t, atol=1e-6, rtol=1e-5), n
