"""Every error of a new run's config at once, and the effective config preview (runs/preview.py)."""
import pytest
import yaml

from rlstudio.runs import launch, preview

pytestmark = pytest.mark.django_db  # the gate reads the operator's reward registry


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from trainer.models.tiny import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("m") / "tiny", preset="smoke", seed=0)


@pytest.fixture
def tiny(tiny_dir):
    return type("M", (), {"path": str(tiny_dir), "trust_remote_code": False, "num_parameters": None})()


def _fields(checked):
    return [e.field for e in checked.errors]


def test_every_bad_override_is_reported_with_the_first_cross_field_error(tiny):
    checked = preview.check_all(preset="cpu_smoke", gpus=0, model=tiny, adapt=True, overrides=[
        "actor_rollout_ref.rollout.n=abc",            # type
        "trainer.default_local_dir=/etc",              # the platform's key
        "actor_rollout_ref.rollout.temperature=99",    # out of bounds
        "data.no_such_key=1",                          # unknown
        5,                                             # not a string
        "data.train_batch_size=3",                     # fine alone, but then 3 % ppo_mini_batch_size 2 != 0
    ])
    assert _fields(checked) == ["actor_rollout_ref.rollout.n", "trainer.default_local_dir",
                                "actor_rollout_ref.rollout.temperature", "data.no_such_key", "overrides[4]",
                                "actor_rollout_ref.actor.ppo_mini_batch_size"]
    assert "set by the platform" in checked.errors[1].message
    assert checked.errors[0].source == "overrides" and checked.errors[-1].source == ""
    # the same inputs, one at a time, as build_config raises them: its first is in the list
    with pytest.raises(launch.ConfigInvalid) as err:
        launch.build_config(preset="cpu_smoke", gpus=0, model=tiny, overrides=["actor_rollout_ref.rollout.n=abc"])
    assert err.value.key in _fields(checked)


def test_mapping_overrides_and_a_whole_config_are_checked_key_by_key(tiny):
    checked = preview.check_all(preset="cpu_smoke", gpus=0, model=tiny,
                                overrides={"trainer.launcher": "ray", "trainer.n_gpus_per_node": 2})
    assert _fields(checked) == ["trainer.launcher", "trainer.n_gpus_per_node"]
    checked = preview.check_all(config={"data": {"max_prompt_length": "long", "train_batch_size": 4},
                                        "trainer": {"resume_from_path": "/x/global_step_1", "logger": ["wandb"]},
                                        "nonsense": 1}, gpus=0, model=tiny)
    # then the cross-field check: 4 prompts cannot hold the default mini batch of 256
    assert _fields(checked) == ["data.max_prompt_length", "trainer.resume_from_path", "trainer.logger[0]", "nonsense",
                                "actor_rollout_ref.actor.ppo_mini_batch_size"]


def test_no_errors_and_the_preview_matches_what_the_run_gets(tiny):
    inputs = dict(preset="gsm8k_multiturn_grpo", gpus=0, model=tiny, adapt=True,
                  overrides=["actor_rollout_ref.rollout.n=4"])
    assert preview.check_all(**inputs).errors == []
    shown = preview.preview(**inputs)
    built = launch.build_config(**inputs)
    assert yaml.safe_load(shown["yaml"]) == built
    marks = {line["key"]: line["mark"] for line in shown["lines"] if line["mark"]}
    assert marks["actor_rollout_ref.rollout.n"] == "yours"
    assert marks["actor_rollout_ref.rollout.name"] == "adapted"
    assert marks["trainer.device"] == marks["trainer.n_gpus_per_node"] == marks["actor_rollout_ref.model.path"] == "platform"
    assert "data.train_batch_size" not in marks  # as the preset has it
    line = next(x for x in shown["lines"] if x["key"] == "actor_rollout_ref.rollout.n")
    assert line["before"] == 16 and line["text"] == "    n: 4"
    adapted = {a["key"]: (a["before"], a["after"]) for a in shown["adapted"]}
    assert adapted == {"actor_rollout_ref.rollout.name": ("sglang", "hf"), "trainer.device": ("cuda", "cpu"),
                       "trainer.n_gpus_per_node": (8, 1)}
    assert shown["resources"] == "CPU" and shown["reference"] == "the preset gsm8k_multiturn_grpo"
    mem = shown["memory"]
    assert mem["device"] == "cpu" and mem["engine"] == "hf" and mem["fits"]
    names = [x["name"] for x in mem["lines"]]
    assert names[:4] == ["actor weights", "actor gradients", "optimizer states", "reference weights"]
    assert "rollout KV cache" in names
    # the preset's 256 prompts x 4 samples, (1,024 + 1,024) tokens, 2 x 2 layers x 2 kv heads x 16, float32
    kv = next(x for x in mem["lines"] if x["name"] == "rollout KV cache")
    assert kv["bytes"] == 256 * 4 * 2048 * (2 * 2 * 2 * 16) * 4


def test_a_missing_config_json_gives_no_estimate_but_a_reason(tmp_path):
    model = type("M", (), {"path": str(tmp_path), "trust_remote_code": False, "num_parameters": None})()
    shown = preview.preview(preset="cpu_smoke", gpus=0, model=model)
    assert shown["memory"] == {"error": "no estimate: the model folder has no readable config.json"}
    assert preview.preview(preset="cpu_smoke", gpus=0)["memory"] is None


def test_a_lora_estimate_shows_the_saving_against_full_fine_tuning(tiny):
    from rlstudio.runs.memory_estimate import GIB, estimate_for

    lora = ["actor_rollout_ref.model.lora_rank=8", "actor_rollout_ref.model.lora_alpha=16"]
    shown = preview.preview(preset="cpu_smoke", gpus=0, model=tiny, overrides=lora)
    assert shown["errors"] == []
    mem = shown["memory"]
    full = preview.preview(preset="cpu_smoke", gpus=0, model=tiny)["memory"]
    assert "full_fine_tuning" not in full  # no LoRA, nothing to compare with
    assert mem["full_fine_tuning"]["lora_rank"] == 8
    # The comparison is the same config's estimate with LoRA off: the full fine-tuning preview's figures.
    assert mem["full_fine_tuning"]["peak_gib"] == full["peak_gib"]
    assert mem["full_fine_tuning"]["peak_phase"] == full["peak_phase"]
    assert mem["full_fine_tuning"]["saving_gib"] == round((full["peak_bytes"] - mem["peak_bytes"]) / GIB, 3) > 0
    names = {x["name"]: x["bytes"] for x in mem["lines"]}
    assert names["actor gradients"] < {x["name"]: x["bytes"] for x in full["lines"]}["actor gradients"]
    # The stored config is not changed by the comparison.
    cfg = launch.build_config(preset="cpu_smoke", gpus=0, model=tiny, overrides=lora)
    assert preview.memory(model=tiny, config=cfg, gpus=0) == mem and cfg["actor_rollout_ref"]["model"]["lora_rank"] == 8
    assert estimate_for(model=tiny, cfg=cfg, gpus=0).peak_bytes == mem["peak_bytes"]


def test_yaml_lines_load_back_and_keep_odd_values_escaped_by_yaml():
    cfg = launch.preset_config("cpu_smoke").to_dict()
    cfg["trainer"]["experiment_name"] = "a: b # c"
    cfg["reward"]["reward_kwargs"] = {"k": [1, 2], "s": "x\ny"}
    lines = preview.yaml_lines(cfg)
    assert yaml.safe_load("\n".join(x["text"] for x in lines)) == cfg


def test_merge_puts_the_services_error_first_once():
    a, b = preview.FieldError("x", "bad"), preview.FieldError("y", "worse")
    assert preview.merge(b, [a, b]) == [b, a]


def test_cross_field_errors_of_different_parts_are_all_reported(tiny):
    """The trainer's cross-field checks report each part's first failure together (config_errors)."""
    checked = preview.check_all(preset="cpu_smoke", gpus=0, model=tiny, adapt=True, overrides=[
        "data.train_batch_size=3",   # the batch layout: 3 % ppo_mini_batch_size 2 != 0
        "trainer.save_freq=0",       # the trainer's part: -1 or >= 1
    ])
    assert _fields(checked) == ["actor_rollout_ref.actor.ppo_mini_batch_size", "trainer.save_freq"]
    # the first is what build_config (and the trainer's validate) raises
    with pytest.raises(launch.ConfigInvalid) as err:
        launch.build_config(preset="cpu_smoke", gpus=0, model=tiny, adapt=True,
                            overrides=["data.train_batch_size=3", "trainer.save_freq=0"])
    assert err.value.key == "actor_rollout_ref.actor.ppo_mini_batch_size"


def test_config_errors_is_empty_exactly_when_validate_passes():
    from trainer.config import Config, ConfigError, apply_overrides, config_errors, validate

    good = Config()
    assert config_errors(good, require_paths=False) == []
    validate(good, require_paths=False)
    bad = apply_overrides(Config(), ["trainer.test_freq=0", "data.max_prompt_length=0"])
    errors = config_errors(bad, require_paths=False)
    assert [e.key for e in errors] == ["data.max_prompt_length", "trainer.test_freq"]
    with pytest.raises(ConfigError) as first:
        validate(bad, require_paths=False)
    assert first.value.key == errors[0].key


def test_the_memory_estimate_counts_one_validation_batch_of_the_validation_dataset(tiny):
    """cpu_smoke generates 2 x 2 rows a step; a validation dataset of 500 prompts x val_kwargs.n = 8 is
    generated at once unless data.val_batch_size cuts it, and the form's estimate says so."""
    val = type("D", (), {"file_path": "/catalog/val.jsonl", "num_rows": 500})()
    many = ["actor_rollout_ref.rollout.val_kwargs.n=8"]
    mem = preview.preview(preset="cpu_smoke", gpus=0, model=tiny, val_dataset=val, overrides=many)["memory"]
    lines = {x["name"]: x for x in mem["lines"]}
    assert "4000 trajectories of one validation batch" in lines["validation KV cache"]["note"]
    assert mem["peak_phase"] == "validation" and mem["phases"]["validation"] > mem["phases"]["rollout"]
    cut = preview.preview(preset="cpu_smoke", gpus=0, model=tiny, val_dataset=val,
                          overrides=[*many, "data.val_batch_size=1"])["memory"]
    assert {x["name"]: x["bytes"] for x in cut["lines"]}["validation KV cache"] * 500 == lines[
        "validation KV cache"]["bytes"]
    assert "validation" not in preview.preview(preset="cpu_smoke", gpus=0, model=tiny, overrides=many)["memory"][
        "phases"]
