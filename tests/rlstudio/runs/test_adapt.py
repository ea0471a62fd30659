"""Presets fitted to the resources chosen (platform/rlstudio/runs/adapt.py), and only presets."""
import pytest

from rlstudio.runs import launch
from rlstudio.runs.adapt import adapt_preset, resources_label
from rlstudio.runs.models import Run
from rlstudio.runs.services import RunInputInvalid, run_new
from trainer.config import validate

pytestmark = pytest.mark.django_db  # the gate reads the operator's reward registry

def _keys(adapted):
    return {c.key: (c.before, c.after) for c in adapted.changes}


def test_gsm8k_preset_on_the_cpu_swaps_sglang_for_hf_and_nothing_else():
    adapted = adapt_preset(launch.preset_config("gsm8k_multiturn_grpo"), gpus=0)
    assert adapted.resources == "CPU"
    assert _keys(adapted) == {"actor_rollout_ref.rollout.name": ("sglang", "hf")}
    assert adapted.config.actor_rollout_ref.rollout.name == "hf"
    assert adapted.config.data.train_batch_size == 256  # the experiment itself is the user's


def test_a_vllm_preset_on_the_cpu_becomes_hf_and_stays_vllm_on_a_gpu():
    from trainer.config import apply_overrides

    preset = apply_overrides(launch.preset_config("gsm8k_multiturn_grpo"), ["actor_rollout_ref.rollout.name=vllm"])
    cpu = adapt_preset(preset, gpus=0)
    assert _keys(cpu) == {"actor_rollout_ref.rollout.name": ("vllm", "hf")}
    assert cpu.changes[0].reason == "vLLM needs a GPU; the hf engine runs on the CPU"
    assert "actor_rollout_ref.rollout.name" not in _keys(adapt_preset(preset, gpus=1))
    model = type("M", (), {"path": "/models/m", "trust_remote_code": False})()
    with pytest.raises(launch.ConfigInvalid) as err:  # typed by the user: refused on the CPU, naming the key
        launch.build_config(preset="cpu_smoke", gpus=0, model=model, adapt=True,
                            overrides=["actor_rollout_ref.rollout.name=vllm"])
    assert err.value.key == "actor_rollout_ref.rollout.name" and "vllm needs a GPU" in str(err.value)
    config = launch.build_config(preset="cpu_smoke", gpus=1, model=model, adapt=True,
                                 overrides=["actor_rollout_ref.rollout.name=vllm"])
    assert config["actor_rollout_ref"]["rollout"]["name"] == "vllm"


@pytest.mark.parametrize("gpus", [1, 2, 3, 5, 6, 7, 8, 12, 24])
@pytest.mark.parametrize("preset", ["gsm8k_multiturn_grpo", "cpu_smoke", "demo_tool_arith", "dapo"])
def test_every_preset_validates_on_any_number_of_gpus(preset, gpus, settings):
    settings.RLSTUDIO_GPUS_PER_NODE = 4 if gpus % 4 == 0 else 8  # 12 and 24: whole nodes of 4
    model = type("M", (), {"path": "/models/m", "trust_remote_code": False})()
    config = launch.build_config(preset=preset, gpus=gpus, model=model, adapt=True)
    t = config["trainer"]
    assert t["nnodes"] * t["n_gpus_per_node"] == gpus and t["device"] == "cuda"
    assert t["nnodes"] == (1 if gpus <= settings.RLSTUDIO_GPUS_PER_NODE else gpus // 4)


def test_batch_sizes_split_over_three_gpus():
    # 256 prompts x 16 samples over 3 workers: 3 / gcd(3, 16) = 3, so both batch sizes become 258;
    # each worker's share of a mini batch, 258 x 16 / 3 = 1,376, is a multiple of the micro batch 32.
    adapted = adapt_preset(launch.preset_config("gsm8k_multiturn_grpo"), gpus=3)
    assert _keys(adapted) == {"actor_rollout_ref.actor.ppo_mini_batch_size": (256, 258),
                              "data.train_batch_size": (256, 258)}
    # 12 workers: 258 x 16 / 12 = 344 per worker, and the largest divisor of 344 up to 32 is 8.
    twelve = adapt_preset(launch.preset_config("gsm8k_multiturn_grpo"), gpus=12)
    assert _keys(twelve)["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"] == (32, 8)
    assert resources_label(12) == "12 GPUs" and resources_label(1) == "1 GPU"


def test_dapo_generation_batch_keeps_its_ratio_to_the_train_batch():
    # 8 prompts x 8 samples over 3 workers: both batch sizes become 9, the generation batch too
    adapted = adapt_preset(launch.preset_config("dapo"), gpus=3)
    assert _keys(adapted) == {"actor_rollout_ref.actor.ppo_mini_batch_size": (8, 9),
                              "data.train_batch_size": (8, 9), "data.gen_batch_size": (8, 9)}
    assert adapt_preset(launch.preset_config("dapo"), gpus=2).changes == ()
    validate(adapted.config, require_paths=False)


def test_what_the_user_typed_is_never_adapted():
    model = type("M", (), {"path": "/models/m", "trust_remote_code": False})()
    # the preset's sglang becomes hf on the CPU, but an explicit sglang is the user's and is refused
    assert launch.build_config(preset="gsm8k_multiturn_grpo", gpus=0, model=model,
                               adapt=True)["actor_rollout_ref"]["rollout"]["name"] == "hf"
    with pytest.raises(launch.ConfigInvalid) as err:
        launch.build_config(preset="gsm8k_multiturn_grpo", gpus=0, model=model, adapt=True,
                            overrides=["actor_rollout_ref.rollout.name=sglang"])
    assert err.value.key == "actor_rollout_ref.rollout.name"
    # a user's batch size that does not split over the workers is refused, not rounded
    with pytest.raises(launch.ConfigInvalid) as err:
        launch.build_config(preset="cpu_smoke", gpus=3, model=model, adapt=True,
                            overrides=["data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4"])
    assert err.value.key == "data.train_batch_size"
    # a whole config is the user's too
    with pytest.raises(launch.ConfigInvalid):
        launch.build_config(config={"actor_rollout_ref": {"rollout": {"name": "sglang"}}}, gpus=0, model=model)


def test_a_saved_config_keeps_the_preset_as_written():
    with pytest.raises(launch.ConfigInvalid) as err:  # no dataset: not a run's config, not adapted
        launch.build_config(preset="cpu_smoke", gpus=3)
    assert err.value.key == "data.train_batch_size"
    assert launch.build_config(preset="cpu_smoke", gpus=3, adapt=True)["data"]["train_batch_size"] == 3


def test_gsm8k_preset_on_the_cpu_with_a_tiny_model_launches_without_overrides(alice, make_dataset, tmp_path):
    """The issue's case: a preset made for 8 GPUs, 0 GPUs, a tiny model: the run is created and its spec
    (frozen at submit) validates, with no override."""
    from rlstudio.catalog.models import ModelAsset
    from trainer.config import Config
    from trainer.models.tiny import make_tiny_model

    folder = make_tiny_model(tmp_path / "tiny", preset="smoke", seed=0)
    model = ModelAsset.objects.create(owner=alice, name="tiny", path=str(folder))
    run = run_new(owner=alice, name="gsm8k-cpu", dataset=make_dataset(alice, status="ready"), model=model,
                  gpus=0, preset="gsm8k_multiturn_grpo")
    assert Run.objects.filter(pk=run.pk).exists()
    assert run.config["actor_rollout_ref"]["rollout"]["name"] == "hf"
    assert run.config["trainer"]["device"] == "cpu" and run.config["trainer"]["n_gpus_per_node"] == 1
    spec = launch.freeze_spec(run=run, out_dir=tmp_path / "out")
    validate(Config.from_dict(spec))
    # what a user types still is not adapted: sglang on the CPU is refused, naming the key
    with pytest.raises(RunInputInvalid) as err:
        run_new(owner=alice, name="x", dataset=run.dataset, model=model, gpus=0, preset="gsm8k_multiturn_grpo",
                overrides=["actor_rollout_ref.rollout.name=sglang"])
    assert err.value.field == "actor_rollout_ref.rollout.name"
