"""The config gate (rlstudio.runs.gate), on its own: the lists cover the schema, platform keys are
refused, user keys are bounded, stored configs are read back without the platform's keys."""
import math

import pytest

from rlstudio.runs.gate import changes
from rlstudio.runs.gate.bounds import Bound, GateRefused, check_value
from rlstudio.runs.gate.changes import check, user_view
from rlstudio.runs.gate.flat import flatten, unflatten
from rlstudio.runs.gate.keys import PLATFORM_KEYS, USER_KEYS, markdown, unlisted_keys
from rlstudio.runs.gate.sizes import StepLimits, check_step_size, check_validation_size
from trainer.config import Config, ConfigError, apply_overrides, describe_config

REWARDS = ["default", "gsm8k", "arith"]
TOOLS = ["calculator", "calc_gsm8k_reward"]


def _check(overrides, before=None):
    before = before or Config()
    after = apply_overrides(before, overrides)
    check(before=before.to_dict(), after=after.to_dict(), reward_names=REWARDS, tool_names=TOOLS)


def test_every_schema_key_is_on_one_list():
    """A key added to trainer.config later is refused until someone puts it on a list."""
    assert unlisted_keys() == []
    assert not set(USER_KEYS) & set(PLATFORM_KEYS)
    schema = {key for key, *_ in describe_config()}
    assert set(USER_KEYS) <= schema and set(PLATFORM_KEYS) <= schema


def test_a_key_on_no_list_is_refused(monkeypatch):
    monkeypatch.setattr(changes, "USER_KEYS", {k: b for k, b in USER_KEYS.items() if k != "trainer.project_name"})
    with pytest.raises(GateRefused) as exc:
        _check({"trainer.project_name": "mine"})
    assert exc.value.key == "trainer.project_name"
    assert "not a key users may set" in exc.value.message


STRING_KEYS = [key for key, tp, *_ in describe_config() if "str" in tp and not tp.startswith("dict")]
# String keys whose schema type is a closed set of choices ("hf" | "sglang"): the schema refuses a path.
CHOICE_KEYS = [key for key, tp, *_ in describe_config() if tp.startswith('"')]


@pytest.mark.parametrize("key", STRING_KEYS)
def test_no_string_key_takes_a_path(key):
    """Every string-valued key of the schema: a server path is refused, naming the key."""
    value = ["/etc/passwd"] if key in ("tools.names", "trainer.logger") else "/etc/passwd"
    with pytest.raises(GateRefused) as exc:
        _check({key: value})
    assert exc.value.key.startswith(key)


@pytest.mark.parametrize("key", CHOICE_KEYS)
def test_no_choice_key_takes_a_path_and_unlisted_ones_take_no_choice(key):
    """Choice-valued string keys: a path is refused by the schema; one not on the users' list refuses
    even a valid choice (trainer.launcher=ray, trainer.device=cuda, a key added later)."""
    with pytest.raises((GateRefused, ConfigError)) as exc:
        _check({key: "/etc/passwd"})
    assert exc.value.key.startswith(key)
    if key not in USER_KEYS:
        default = flatten(Config().to_dict())[key]
        tp = next(tp for k, tp, *_ in describe_config() if k == key)
        other = next(c.strip().strip('"') for c in tp.split("|") if c.strip().strip('"') not in (str(default), "None"))
        with pytest.raises(GateRefused) as exc:
            _check({key: other})
        assert exc.value.key == key
        assert ("set by the platform" if key in PLATFORM_KEYS else "not a key users may set") in exc.value.message


PLATFORM_PROBES = {
    "data.train_files": "/srv/other-user/data.jsonl",
    "data.val_files": "/srv/other-user/val.jsonl",
    "actor_rollout_ref.model.path": "/srv/models/x",
    "actor_rollout_ref.model.tokenizer_path": "/srv/models/x",
    "actor_rollout_ref.model.trust_remote_code": True,
    "critic.model.path": "/srv/other-user/critic",
    "actor_rollout_ref.rollout.multi_turn.format": "llama3",
    "reward_model.model.path": "/srv/other-user/rm",
    "reward_model.model.trust_remote_code": True,
    "custom_reward_function.path": "/tmp/evil.py",
    "custom_reward_function.name": "run_me",
    "tools.config_path": "/etc/passwd",
    "trainer.default_local_dir": "/srv/runs/1",
    "trainer.resume_mode": "resume_path",
    "trainer.resume_from_path": "/srv/runs/1/global_step_2",
    "trainer.resume_fork": True,
    "trainer.device": "cuda",
    "trainer.nnodes": 2,
    "trainer.n_gpus_per_node": 2,
    "trainer.launcher": "ray",
    "trainer.torch_threads": 4096,
    "trainer.max_ckpt_to_keep_cap": 1000,
    "trainer.disk_budget_gb": 1e9,
}


def test_every_platform_key_is_probed():
    assert set(PLATFORM_PROBES) == set(PLATFORM_KEYS)


@pytest.mark.parametrize("key", sorted(PLATFORM_PROBES))
def test_platform_keys_name_who_sets_them(key):
    with pytest.raises(GateRefused) as exc:
        _check({key: PLATFORM_PROBES[key]})
    assert exc.value.key == key
    assert "set by the platform" in exc.value.message


@pytest.mark.parametrize("override,key", [
    ({"trainer.project_name": "../../etc"}, "trainer.project_name"),
    ({"trainer.experiment_name": "a/b"}, "trainer.experiment_name"),
    ({"trainer.logger": ["console", "wandb"]}, "trainer.logger"),
    ({"trainer.logger": ["http"]}, "trainer.logger"),
    ({"reward.name": "not_registered"}, "reward.name"),
    ({"tools.names": ["os.system"]}, "tools.names"),
    ({"data.train_batch_size": 10**9}, "data.train_batch_size"),
    ({"actor_rollout_ref.rollout.n": 100000}, "actor_rollout_ref.rollout.n"),
    ({"report.heartbeat_interval_s": 3600.0}, "report.heartbeat_interval_s"),
    ({"report.memory_interval_s": 0.0001}, "report.memory_interval_s"),
    ({"reward.reward_kwargs": {"k": "x" * 5000}}, "reward.reward_kwargs"),
    ({"reward.reward_kwargs": {"k": "a\x00b"}}, "reward.reward_kwargs"),
    ({"data.prompt_key": "a\x00"}, "data.prompt_key"),
])
def test_user_keys_are_bounded(override, key):
    with pytest.raises((GateRefused, ConfigError)) as exc:  # NUL: the schema refuses it first
        _check(override)
    assert exc.value.key.startswith(key)


def test_user_keys_within_bounds_pass():
    _check({"actor_rollout_ref.rollout.n": 8, "actor_rollout_ref.actor.optim.lr": 1e-5,
            "trainer.project_name": "gsm8k-grpo_v2.1", "trainer.logger": ["console", "tensorboard"],
            "reward.name": "gsm8k", "reward.reward_kwargs": {"strict": True, "scale": 2},
            "actor_rollout_ref.rollout.multi_turn.enable": True, "tools.names": ["calculator"]})


def test_unchanged_platform_keys_in_a_whole_config_pass():
    """A whole config that repeats the schema's defaults for platform keys is not setting them."""
    cfg = Config().to_dict()
    cfg["actor_rollout_ref"]["rollout"]["n"] = 4
    check(before=Config().to_dict(), after=cfg, reward_names=REWARDS, tool_names=TOOLS)


def test_non_finite_numbers_are_refused_by_bounds():
    with pytest.raises(GateRefused) as exc:
        check_value("x", math.inf, Bound(lo=0, hi=1))
    assert "finite" in exc.value.message


def test_user_view_resets_the_platform_keys():
    stored = apply_overrides(Config(), {
        "data.train_files": "/srv/other/secret.jsonl", "trainer.default_local_dir": "/srv/runs/9",
        "custom_reward_function.path": "/tmp/evil.py", "trainer.torch_threads": 4096,
        "actor_rollout_ref.rollout.n": 6, "trainer.logger": ["console", "jsonl", "http"]}).to_dict()
    view = user_view(stored)
    assert view["trainer"]["logger"] == ["console", "jsonl"]
    flat = flatten(view)
    defaults = flatten(Config().to_dict())
    for key in PLATFORM_KEYS:
        assert flat[key] == defaults[key], key
    assert flat["actor_rollout_ref.rollout.n"] == 6


def test_flatten_keeps_object_values_whole():
    flat = flatten(apply_overrides(Config(), {"reward.reward_kwargs": {"a": {"b": 1}}}).to_dict())
    assert flat["reward.reward_kwargs"] == {"a": {"b": 1}}
    assert unflatten(flat) == apply_overrides(Config(), {"reward.reward_kwargs": {"a": {"b": 1}}}).to_dict()


def test_docs_security_lists_the_gate_as_the_code_has_it():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[3] / "docs" / "security.md").read_text(encoding="utf-8")
    block = page.split("<!-- gate:begin -->\n", 1)[1].split("<!-- gate:end -->", 1)[0]
    assert block == markdown()


# --- the operator's bounds on one step as a whole (security review F2) ------------------------------------
LIMITS = StepLimits(trajectories=32_768, tokens=1024 * 1024 * 1024, reported_samples=1024)


def _step(overrides, limits=LIMITS):
    check_step_size(apply_overrides(Config(), overrides).to_dict(), limits)


def _refused(overrides, limits=LIMITS) -> GateRefused:
    with pytest.raises(GateRefused) as err:
        _step(overrides, limits)
    return err.value


GSM8K = {"data.train_batch_size": 1024, "actor_rollout_ref.rollout.n": 5, "data.max_prompt_length": 512,
         "data.max_response_length": 1024}
DAPO = {"data.train_batch_size": 512, "actor_rollout_ref.rollout.n": 16, "data.max_prompt_length": 2048,
        "data.max_response_length": 20480, "algorithm.filter_groups.enable": True, "data.gen_batch_size": 1536}


def test_verls_gsm8k_and_dapo_examples_and_the_settings_defaults_pass(settings):
    _step(GSM8K)
    _step(DAPO)
    _step({**GSM8K, "report.samples_per_step": 1024})
    from rlstudio.runs.launch import step_limits

    assert step_limits() == LIMITS  # the settings' defaults are the ones tested here


def test_the_reviewers_cpu_run_is_refused_on_trajectories_per_step():
    err = _refused({"data.train_batch_size": 4096, "actor_rollout_ref.rollout.n": 1024,
                    "actor_rollout_ref.rollout.response_length": 32768, "report.samples_per_step": -1,
                    "trainer.save_freq": 1})
    assert err.key == "data.train_batch_size"
    assert "4096 x 1024 = 4,194,304 trajectories per step" in err.message and "32,768" in err.message
    # one more than the limit is refused, the limit itself passes
    _step({"data.train_batch_size": 32, "actor_rollout_ref.rollout.n": 1024, "data.max_response_length": 16})
    assert _refused({"data.train_batch_size": 33, "actor_rollout_ref.rollout.n": 1024}).key == "data.train_batch_size"


def test_dynamic_samplings_generation_batch_counts():
    over = {**DAPO, "data.gen_batch_size": 2049}
    err = _refused(over)
    assert err.key == "data.gen_batch_size" and "2049 x 16 = 32,784" in err.message
    _step({**over, "algorithm.filter_groups.enable": False, "data.gen_batch_size": None})


def test_tokens_per_step_are_refused_on_the_response_length_that_applies():
    big = {**GSM8K, "data.train_batch_size": 4096}  # 20,480 trajectories: within their own bound
    _step(big)
    err = _refused({**big, "data.max_response_length": 65536})
    assert err.key == "data.max_response_length" and "20,480 trajectories x" in err.message
    assert "= 512 + 65536) = 1,352,663,040 tokens per step" in err.message
    assert "RLSTUDIO_MAX_TOKENS_PER_STEP" in err.message
    err = _refused({**big, "actor_rollout_ref.rollout.response_length": 65536})
    assert err.key == "actor_rollout_ref.rollout.response_length"
    _step({**big, "data.max_response_length": 65536},
          StepLimits(trajectories=32_768, tokens=20480 * (512 + 65536), reported_samples=1024))


def test_reporting_every_sample_counts_as_the_trajectories_per_step():
    err = _refused({**GSM8K, "report.samples_per_step": -1})
    assert err.key == "report.samples_per_step" and "-1 (all) reports 5,120 samples" in err.message
    _step({"data.train_batch_size": 64, "actor_rollout_ref.rollout.n": 16, "report.samples_per_step": -1})
    assert _refused({**GSM8K, "report.samples_per_step": 2048}).key == "report.samples_per_step"
    # whole groups, at least one: n = 1024 reports 1024 whatever the number asked
    small = StepLimits(trajectories=32_768, tokens=LIMITS.tokens, reported_samples=512)
    assert _refused({"data.train_batch_size": 2, "actor_rollout_ref.rollout.n": 1024,
                     "report.samples_per_step": 8}, small).key == "report.samples_per_step"
    _step({"data.train_batch_size": 2, "actor_rollout_ref.rollout.n": 1024, "report.samples_per_step": 0}, small)


def test_every_preset_passes_the_default_bounds():
    from trainer.recipes import REGISTRY, get_recipe

    assert REGISTRY
    for name in REGISTRY:
        check_step_size(get_recipe(name).to_dict(), LIMITS)


# --- the same bounds on one validation: data.val_batch_size prompts at a time x val_kwargs.n ------------------
VAL = {"data.val_files": "/v.jsonl", "data.max_prompt_length": 512, "data.max_response_length": 1024}


def _val(overrides, val_rows, limits=LIMITS):
    check_validation_size(apply_overrides(Config(), overrides).to_dict(), limits, val_rows)


def _val_refused(overrides, val_rows, limits=LIMITS) -> GateRefused:
    with pytest.raises(GateRefused) as err:
        _val(overrides, val_rows, limits)
    return err.value


def test_a_whole_validation_set_in_one_batch_counts_its_rows():
    _val(VAL, 1319)  # GSM8K's test split, val_kwargs.n = 1: verl's example
    err = _val_refused({**VAL, "actor_rollout_ref.rollout.val_kwargs.n": 32}, 1319)
    assert err.key == "data.val_batch_size"
    assert "the validation set's 1,319 rows x actor_rollout_ref.rollout.val_kwargs.n = 1,319 x 32 = 42,208" \
        in err.message and "RLSTUDIO_MAX_TRAJECTORIES_PER_STEP" in err.message
    # the fix the message names: generate the set in batches
    _val({**VAL, "actor_rollout_ref.rollout.val_kwargs.n": 32, "data.val_batch_size": 1024}, 1319)
    assert _val_refused({**VAL, "actor_rollout_ref.rollout.val_kwargs.n": 32, "data.val_batch_size": 1025},
                        1_000_000).key == "data.val_batch_size"
    # a batch larger than the set generates the set: 1,000 rows x 32 pass whatever the batch
    _val({**VAL, "actor_rollout_ref.rollout.val_kwargs.n": 32, "data.val_batch_size": 65536}, 1000)


def test_validation_tokens_and_no_validation_set():
    long = {**VAL, "data.max_response_length": 65536, "data.val_batch_size": 20480}
    err = _val_refused(long, 1_000_000)
    assert err.key == "data.val_batch_size" and "RLSTUDIO_MAX_TOKENS_PER_STEP" in err.message
    _val({**long, "data.val_files": None}, None)  # no validation set: no validation to bound
    _val({**VAL, "report.val_samples": -1}, None)  # rows unknown (a saved config): only a given batch counts


def test_reporting_every_validation_sample_counts_the_whole_set():
    err = _val_refused({**VAL, "report.val_samples": -1}, 1319)
    assert err.key == "report.val_samples" and "-1 (all) reports 1,319 samples per validation" in err.message
    _val({**VAL, "report.val_samples": -1}, 1024)
    # whole groups, at least one: val_kwargs.n = 2048 reports 2048 whatever the number asked
    assert _val_refused({**VAL, "actor_rollout_ref.rollout.val_kwargs.n": 1024, "report.val_samples": 8,
                         "data.val_batch_size": 4}, 100,
                        StepLimits(trajectories=32_768, tokens=LIMITS.tokens, reported_samples=512)
                        ).key == "report.val_samples"
    _val({**VAL, "report.val_samples": 0, "actor_rollout_ref.rollout.val_kwargs.n": 1024,
          "data.val_batch_size": 4}, 100, StepLimits(trajectories=32_768, tokens=LIMITS.tokens,
                                                           reported_samples=512))


def test_every_preset_passes_the_validation_bounds_with_gsm8ks_test_split():
    from trainer.recipes import REGISTRY, get_recipe

    for name in REGISTRY:
        cfg = get_recipe(name).to_dict()
        cfg["data"]["val_files"] = "/v.jsonl"
        check_validation_size(cfg, LIMITS, 1319)
