"""One checkpoint's disk, estimated at launch (runs/checkpoint_estimate.py): the formula, measured against
a real tiny CPU run's checkpoint, and a run whose one checkpoint is over the operator's disk budget per
run (RLSTUDIO_RUN_DISK_BUDGET_GB) refused with a 400 naming the key that shrinks it, in the form's
preview too. Real PostgreSQL for the API; the trainer runs in this process on the CPU."""
import json
from pathlib import Path

import pytest

from rlstudio.catalog.models import ModelAsset
from rlstudio.runs import launch, preview
from rlstudio.runs.gate.bounds import GateRefused
from rlstudio.runs.gate.disk import check_checkpoint_size
from rlstudio.runs.checkpoint_estimate import estimate, estimate_for
from rlstudio.runs.memory_estimate import GIB, count_parameters, lora_parameters, shape_from_config
from rlstudio.runs.models import Run
from trainer.config import Config, apply_overrides

LORA = "actor_rollout_ref.model.lora_rank"
# Qwen2.5-7B's sizes (untied LM head): about 7.6e9 parameters, 85 GiB a full fine-tune's checkpoint
SEVEN_B = {"model_type": "qwen2", "hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28,
           "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064,
           "tie_word_embeddings": False}


def _cfg(**over):
    return apply_overrides(Config(), over).to_dict()


# ------------------------------------------------------------------------------------------ the formula
def test_the_formula_by_hand():
    """12 bytes a trained parameter (float32 weights, AdamW's two float32 moments); a tied embedding
    written twice; LoRA: the adapter alone; gae: the critic's body (no LM head) and scalar head too;
    the export 4 bytes a parameter, none with trainer.export_hf off."""
    shape = shape_from_config(SEVEN_B)
    p, emb = shape.num_parameters, 152064 * 3584
    assert p == count_parameters(hidden=3584, layers=28, heads=28, kv_heads=4, head_dim=128, vocab=152064,
                                 ffn=18944, tied=False, qkv_bias=True)
    full = estimate(shape, _cfg(), tied_embeddings=False)
    assert (full.actor_bytes, full.critic_bytes, full.bytes, full.lora) == (12 * p, 0, 12 * p, False)
    assert full.export_bytes == 4 * p and 80 < full.bytes / GIB < 90
    assert estimate(shape, _cfg(), tied_embeddings=True).actor_bytes == 12 * p + 4 * emb
    a = lora_parameters(shape, rank=16)
    lora = estimate(shape, _cfg(**{LORA: 16}), tied_embeddings=False)
    assert (lora.actor_bytes, lora.critic_bytes, lora.export_bytes, lora.lora) == (12 * a, 0, 4 * (p + a), True)
    gae = estimate(shape, _cfg(**{"algorithm.adv_estimator": "gae", "trainer.export_hf": False}),
                   tied_embeddings=False)
    assert gae.critic_bytes == 12 * (p - emb + 3584 + 1) and gae.bytes == 12 * p + gae.critic_bytes
    assert gae.export_bytes == 0


# ------------------------------------------------------------------------- measured against a real run
def _payload(dcp_dir: Path) -> int:
    """Bytes of the tensors a DCP folder holds, from its metadata (what the formula counts)."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    total = 0
    for item in FileSystemReader(str(dcp_dir)).read_metadata().state_dict_metadata.values():
        if isinstance(item, TensorStorageMetadata):
            n = 1
            for d in item.size:
                n *= d
            total += n * item.properties.dtype.itemsize
    return total


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from trainer.models.tiny import make_tiny_model
    from trainer.tasks import arith

    root = tmp_path_factory.mktemp("ckpt")
    model = Path(make_tiny_model(root / "tiny", preset="smoke", seed=0))
    with open(root / "train.jsonl", "w", encoding="utf-8") as fh:
        for row in arith.make_rl_rows("train", 16, seed=0):
            fh.write(json.dumps(row) + "\n")
    return root, model


@pytest.mark.parametrize("over", [{}, {LORA: 4}, {"algorithm.adv_estimator": "gae"}], ids=["full", "lora", "gae"])
def test_the_estimate_matches_a_real_checkpoint(tiny, over):
    """A real one-step CPU run of the tiny model (tied embeddings) checkpoints at its last step: the
    tensors it wrote are the formula's bytes (within 0.1%: AdamW's step counters are not counted), and
    with a full fine-tune the whole step folder is within 15% over it (DCP's per-tensor overhead and
    the small files, a large share only of a model this small)."""
    from trainer import checkpoint as ckpt
    from trainer.recipes import get_recipe
    from trainer.run import run

    root, model = tiny
    out = root / ("out-" + "-".join(f"{k}={v}" for k, v in over.items()))
    cfg = apply_overrides(get_recipe("cpu_smoke"), {
        "data.train_files": str(root / "train.jsonl"), "actor_rollout_ref.model.path": str(model),
        "trainer.default_local_dir": str(out), "trainer.logger": ["jsonl"], "trainer.total_training_steps": 1,
        "trainer.save_freq": -1, **over})
    assert run(cfg) == 0
    step = ckpt.step_dir(out, 1)
    est = estimate_for(model=ModelAsset(path=str(model)), cfg=cfg.to_dict())
    assert json.loads((model / "config.json").read_text())["tie_word_embeddings"] is True
    assert _payload(step / "actor") == pytest.approx(est.actor_bytes, rel=1e-3)
    if over.get("algorithm.adv_estimator") == "gae":
        assert _payload(step / "critic") == pytest.approx(est.critic_bytes, rel=1e-3)
    else:
        assert est.critic_bytes == 0 and not (step / "critic").exists()
    if not over:
        assert est.bytes < ckpt.folder_bytes(step) < 1.15 * est.bytes


# ------------------------------------------------------------------------------------------- the gate
def test_the_gate_refuses_over_the_budget_only():
    shape = shape_from_config(SEVEN_B)
    full = estimate(shape, _cfg(), tied_embeddings=False)
    check_checkpoint_size(_cfg(), full, 200)  # 85 GiB fits 200
    check_checkpoint_size(_cfg(), full, None)  # no budget
    check_checkpoint_size(_cfg(), None, 1)  # no estimate
    with pytest.raises(GateRefused) as exc:
        check_checkpoint_size(_cfg(), full, 50)
    assert exc.value.key == LORA
    assert exc.value.message.startswith(f"one checkpoint of this model is about {full.bytes / GIB:.2f} GB, over "
                                        "this deployment's per-run disk budget of 50 GB (RLSTUDIO_RUN_DISK_BUDGET_GB)")
    assert "train with LoRA" in exc.value.message and "trainer.save_freq" in exc.value.message
    # with LoRA the actor fits; gae's full critic does not: the critic's key is named
    cfg = _cfg(**{LORA: 16, "algorithm.adv_estimator": "gae"})
    with pytest.raises(GateRefused) as exc:
        check_checkpoint_size(cfg, estimate(shape, cfg, tied_embeddings=False), 50)
    assert exc.value.key == "algorithm.adv_estimator" and "the critic of gae" in exc.value.message


# --------------------------------------------------------------------------------------------- the API
@pytest.fixture
def big(alice, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(SEVEN_B))
    return ModelAsset.objects.create(owner=alice, name="seven-b", path=str(tmp_path))


def _body(dataset, model, **extra):
    return {"name": "r1", "dataset": dataset.pk, "model": model.pk, "preset": "cpu_smoke", **extra}


@pytest.mark.django_db
def test_a_run_whose_checkpoint_is_over_the_budget_is_a_400_and_nothing_is_made(api, alice, make_dataset, big,
                                                                                settings):
    dataset = make_dataset(alice, status="ready")
    settings.RLSTUDIO_RUN_DISK_BUDGET_GB = 50
    resp = api.post("/api/v1/runs/", _body(dataset, big), format="json")
    assert resp.status_code == 400, resp.content
    error = resp.json()["error"]
    assert error["field"] == LORA, error
    assert "one checkpoint of this model is about 8" in error["message"]
    assert "over this deployment's per-run disk budget of 50 GB (RLSTUDIO_RUN_DISK_BUDGET_GB)" in error["message"]
    assert str(big.path) not in error["message"]
    assert Run.objects.count() == 0
    # the form's preview says the same before anything is sent, and shows the estimate
    checked = preview.check_all(preset="cpu_smoke", dataset=dataset, model=big)
    assert [e.field for e in checked.errors] == [LORA]
    disk = preview.memory(model=big, config=checked.config, gpus=0)["checkpoint"]
    assert disk["budget_gib"] == 50 and not disk["fits"] and 80 < disk["gib"] < 90 and disk["export_gib"] == 0


@pytest.mark.django_db
def test_a_run_whose_checkpoint_fits_is_made(api, alice, make_dataset, big, settings):
    dataset = make_dataset(alice, status="ready")
    settings.RLSTUDIO_RUN_DISK_BUDGET_GB = 50
    resp = api.post("/api/v1/runs/", _body(dataset, big, overrides={LORA: 16}), format="json")
    assert resp.status_code == 201, resp.content  # LoRA: the adapter alone, well under 1 GiB
    settings.RLSTUDIO_RUN_DISK_BUDGET_GB = 200  # the default budget holds a 7B full fine-tune's
    assert api.post("/api/v1/runs/", _body(dataset, big, name="r2"), format="json").status_code == 201
    settings.RLSTUDIO_RUN_DISK_BUDGET_GB = 0  # no budget: nothing to refuse
    assert api.post("/api/v1/runs/", _body(dataset, big, name="r3"), format="json").status_code == 201
    assert launch.checkpoint_size(None, {}) is None
    checked = preview.check_all(preset="cpu_smoke", dataset=dataset, model=big)
    assert checked.errors == [] and preview.memory(model=big, config=checked.config, gpus=0)["checkpoint"]["fits"]


@pytest.mark.django_db
def test_an_evaluations_config_is_not_held_to_the_checkpoint_budget(alice, make_dataset, big, settings):
    """An evaluation of a catalog model writes no checkpoint: its config (the one a run would get) is
    built whatever one checkpoint of the model would weigh; a run's is refused."""
    from rlstudio.evaluations.jobs import model_config

    dataset = make_dataset(alice, status="ready")
    settings.RLSTUDIO_RUN_DISK_BUDGET_GB = 50
    cfg = model_config(model=big, dataset=dataset, gpus=0)
    assert cfg["actor_rollout_ref"]["model"]["path"] == str(big.path)
    with pytest.raises(launch.ConfigInvalid) as exc:
        launch.build_config(dataset=dataset, model=big, gpus=0)
    assert exc.value.key == LORA


def test_a_resume_over_the_budget_is_refused_on_run_not_on_a_key_it_cannot_set():
    """A resume continues the run's own config: the refusal names `run`, says an admin must raise the
    budget, and that a clone with the shrinking key changed is the alternative."""
    shape = shape_from_config(SEVEN_B)
    full = estimate(shape, _cfg(), tied_embeddings=False)
    check_checkpoint_size(_cfg(), full, 200, resume=True)  # fits: nothing refused
    with pytest.raises(GateRefused) as exc:
        check_checkpoint_size(_cfg(), full, 50, resume=True)
    assert exc.value.key == "run"
    assert exc.value.message == (
        f"one checkpoint of this run is about {full.bytes / GIB:.2f} GB, over this deployment's per-run disk "
        "budget of 50 GB, so it cannot resume until an admin raises RLSTUDIO_RUN_DISK_BUDGET_GB; a clone of it "
        f"with LoRA ({LORA} > 0: a checkpoint then holds the adapter alone) writes a smaller checkpoint (the new-run "
        "form's preview says whether it fits)")
    cfg = _cfg(**{LORA: 16, "algorithm.adv_estimator": "gae"})
    with pytest.raises(GateRefused) as exc:
        check_checkpoint_size(cfg, estimate(shape, cfg, tied_embeddings=False), 50, resume=True)
    assert exc.value.key == "run" and "an estimator without a critic (algorithm.adv_estimator" in exc.value.message
    assert exc.value.message.endswith("e.g. grpo) fits instead")  # the actor's part alone was checked to fit


@pytest.mark.django_db
def test_resuming_a_run_over_the_budget_is_a_400_on_run(api, alice, big, run_with_ckpts, settings):
    Run.objects.filter(pk=run_with_ckpts.pk).update(model=big)
    (Path(settings.RUNS_DIR) / str(run_with_ckpts.pk) / "latest_checkpointed_iteration.txt").write_text("2")
    settings.RLSTUDIO_RUN_DISK_BUDGET_GB = 50
    resp = api.post(f"/api/v1/runs/{run_with_ckpts.pk}/resume/", {}, format="json")
    assert resp.status_code == 400, resp.content
    error = resp.json()["error"]
    assert error["field"] == "run", error
    assert "so it cannot resume until an admin raises RLSTUDIO_RUN_DISK_BUDGET_GB" in error["message"]
    assert LORA + " > 0" in error["message"] and "lower the LoRA rank" not in error["message"]
    assert Run.objects.count() == 1
    settings.RLSTUDIO_RUN_DISK_BUDGET_GB = 200  # raised by an admin: the resume is made
    assert api.post(f"/api/v1/runs/{run_with_ckpts.pk}/resume/", {}, format="json").status_code == 201
