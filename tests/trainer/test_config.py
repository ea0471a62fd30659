"""The run spec: typed overrides, errors naming keys, round trips, loading, recipes, the doc."""

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Literal

import pytest

from trainer.config import (
    Config,
    ConfigError,
    apply_overrides,
    config_markdown,
    describe_config,
    load_config,
    resolve,
    validate,
)
from trainer.recipes import REGISTRY, get_recipe
from trainer.recipes import main as recipes_main

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_follow_verl():
    c = Config()
    assert (
        c.actor_rollout_ref.actor.clip_ratio == 0.2
        and c.actor_rollout_ref.actor.clip_ratio_c == 3.0
    )
    assert c.actor_rollout_ref.actor.loss_agg_mode == "token-mean"
    assert (
        c.actor_rollout_ref.actor.kl_loss_type == "low_var_kl"
        and c.actor_rollout_ref.actor.kl_loss_coef == 0.001
    )
    assert c.algorithm.adv_estimator == "grpo" and c.algorithm.norm_adv_by_std_in_grpo is True
    assert (
        c.actor_rollout_ref.actor.optim.betas == [0.9, 0.999]
        and c.actor_rollout_ref.actor.optim.lr == 1e-6
    )
    assert c.data.seed == 1 and c.trainer.logger == ["console", "jsonl"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.data.train_batch_size = 3  # type: ignore[misc]


def test_overrides_parse_by_field_type():
    c = apply_overrides(
        Config(),
        [
            "actor_rollout_ref.rollout.n=8",
            "actor_rollout_ref.actor.optim.lr=3e-4",
            "actor_rollout_ref.rollout.multi_turn.enable=true",
            "data.shuffle=0",
            "data.val_files=null",
            "actor_rollout_ref.rollout.response_length=None",
            "trainer.logger=['console','wandb']",
            "tools.names=calculator,calc_gsm8k_reward",
            "actor_rollout_ref.actor.optim.betas=[0.8, 0.95]",
            "data.train_files=[a.jsonl, b.parquet]",
            'reward.reward_kwargs={"format_score": 0.1}',
            "actor_rollout_ref.actor.clip_ratio_high=0.28",
            "+trainer.total_training_steps=1e2",
            "actor_rollout_ref.rollout.multi_turn.tool_config_path=tools.yaml",  # verl's name, aliased
        ],
    )
    arr = c.actor_rollout_ref
    assert arr.rollout.n == 8 and isinstance(arr.rollout.n, int)
    assert (
        arr.actor.optim.lr == 3e-4
        and arr.rollout.multi_turn.enable is True
        and c.data.shuffle is False
    )
    assert c.data.val_files is None and arr.rollout.response_length is None
    assert c.trainer.logger == ["console", "wandb"]
    assert c.tools.names == ["calculator", "calc_gsm8k_reward"]
    assert arr.actor.optim.betas == [0.8, 0.95]
    assert c.data.train_files == ["a.jsonl", "b.parquet"]
    assert c.reward.reward_kwargs == {"format_score": 0.1}
    assert arr.actor.clip_ratio_high == 0.28 and c.trainer.total_training_steps == 100
    assert c.tools.config_path == "tools.yaml"
    # strings stay strings; a dict of overrides type-checks non-string values
    c2 = apply_overrides(
        c, {"data.train_files": "x.jsonl", "data.train_batch_size": 4, "algorithm.gamma": 1}
    )
    assert (
        c2.data.train_files == "x.jsonl"
        and c2.data.train_batch_size == 4
        and c2.algorithm.gamma == 1.0
    )
    assert Config().actor_rollout_ref.rollout.n == 1  # the original is untouched


@pytest.mark.parametrize(
    "override, key, fragment",
    [
        ("data.trian_batch_size=8", "data.trian_batch_size", "known keys of data: train_files"),
        (
            "actor_rollout_ref.rollout.multi_turn.turns=3",
            "actor_rollout_ref.rollout.multi_turn.turns",
            "max_turns",
        ),
        ("nope.x=1", "nope.x", "known keys of the top level: data, actor_rollout_ref"),
        (
            "algorithm.adv_estimator=grpo_vectorized",
            "algorithm.adv_estimator",
            "allowed values: grpo, rloo, reinforce_plus_plus, reinforce_plus_plus_baseline, gae, opo, grpo_passk, remax, gpg",
        ),
        (
            "actor_rollout_ref.actor.loss_agg_mode=mean",
            "actor_rollout_ref.actor.loss_agg_mode",
            "seq-mean-token-sum-norm",
        ),
        ("data.train_batch_size=eight", "data.train_batch_size", "expected an integer"),
        ("data.train_batch_size=2.5", "data.train_batch_size", "expected an integer"),
        ("data.shuffle=maybe", "data.shuffle", "true/false"),
        (
            "actor_rollout_ref.actor.optim.lr=fast",
            "actor_rollout_ref.actor.optim.lr",
            "expected a number",
        ),
        ("data.train_batch_size=null", "data.train_batch_size", "must not be null"),
        ("reward.reward_kwargs=[1]", "reward.reward_kwargs", "JSON object"),
    ],
)
def test_override_errors_name_the_key(override, key, fragment):
    with pytest.raises(ConfigError) as info:
        apply_overrides(Config(), [override])
    assert info.value.key == key
    assert fragment in str(info.value)
    assert str(info.value).startswith(key)


def test_quoted_values_are_unquoted_as_hydra_reads_them():
    # A verl command line quotes names and choices; Hydra drops one pair of matching quotes.
    c = apply_overrides(Config(), [
        "trainer.project_name='verl_grpo_example_gsm8k'", 'trainer.experiment_name="qwen2_7b"',
        "data.truncation='error'", "algorithm.rollout_correction.rollout_is_threshold='0.5_5.0'",
        "data.val_files='test.parquet'", "trainer.logger=['console']",
    ])
    assert (c.trainer.project_name, c.trainer.experiment_name) == ("verl_grpo_example_gsm8k", "qwen2_7b")
    assert c.data.truncation == "error" and c.data.val_files == "test.parquet"
    assert c.algorithm.rollout_correction.rollout_is_threshold == "0.5_5.0"
    assert apply_overrides(Config(), ["trainer.experiment_name='a"]).trainer.experiment_name == "'a"  # unmatched: kept
    assert apply_overrides(Config(), ["trainer.experiment_name= a b"]).trainer.experiment_name == " a b"


@pytest.mark.parametrize("verl_key, ours, text, value", [
    ("actor_rollout_ref.rollout.multi_turn.max_assistant_turns", "actor_rollout_ref.rollout.multi_turn.max_turns",
     "3", 3),
    ("actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes",
     "actor_rollout_ref.rollout.update_weights_bucket_megabytes", "2048", 2048),
    ("actor_rollout_ref.actor.optim.lr_scheduler_type", "actor_rollout_ref.actor.optim.warmup_style", "cosine", "cosine"),
    ("critic.optim.lr_scheduler_type", "critic.optim.warmup_style", "cosine", "cosine"),
    ("custom_reward_function.reward_kwargs", "reward.reward_kwargs", '{"format_score": 0.1}', {"format_score": 0.1}),
    ("trainer.log_val_generations", "report.val_samples", "10", 10),
])
def test_verls_later_key_names_set_ours(verl_key, ours, text, value):
    def get(cfg, key):
        node = cfg.to_dict()
        for part in key.split("."):
            node = node[part]
        return node

    assert get(apply_overrides(Config(), [f"{verl_key}={text}"]), ours) == value
    assert get(apply_overrides(Config(), {verl_key: text}), ours) == value


def test_override_errors_name_the_key_as_typed():
    # An aliased key's error names verl's key, as typed, and the key it sets here.
    with pytest.raises(ConfigError) as info:
        apply_overrides(Config(), ["actor_rollout_ref.actor.optim.lr_scheduler_type=wsd"])
    assert info.value.key == "actor_rollout_ref.actor.optim.lr_scheduler_type"
    assert '"wsd" is not allowed' in str(info.value) and "actor_rollout_ref.actor.optim.warmup_style" in str(info.value)
    # Hydra's "+" adds a key there; here the schema is fixed, and the error says so.
    with pytest.raises(ConfigError) as info:
        apply_overrides(Config(), ["+some.new_key=3"])
    assert info.value.key == "some.new_key"
    assert "unknown key" in str(info.value) and "cannot add" in str(info.value)
    # "+" on a known key sets it, on the command line and in a mapping alike.
    assert apply_overrides(Config(), ["++trainer.total_epochs=2"]).trainer.total_epochs == 2
    assert apply_overrides(Config(), {"+trainer.total_epochs": 3}).trainer.total_epochs == 3


def test_from_dict_unknown_and_wrong_types():
    with pytest.raises(ConfigError, match=r"^actor_rollout_ref\.model\.paht: unknown key"):
        Config.from_dict({"actor_rollout_ref": {"model": {"paht": "x"}}})
    # A section's unknown keys all at once (a verl YAML has many), the section named without a dot.
    with pytest.raises(ConfigError) as info:
        Config.from_dict({"actor_rollout_ref": {"actor": {"_target_": "x", "strategy": "fsdp", "profiler": {}}}})
    assert info.value.key == "actor_rollout_ref.actor._target_"
    assert "unknown key (also unknown here: profiler); known keys of actor_rollout_ref.actor: strategy," in str(info.value)
    with pytest.raises(ConfigError, match=r"^data\.train_batch_size: expected an integer"):
        Config.from_dict({"data": {"train_batch_size": "8"}})
    with pytest.raises(ConfigError, match=r"^trainer\.logger\[1\]: expected a string"):
        Config.from_dict({"trainer": {"logger": ["console", 3]}})
    with pytest.raises(ConfigError, match=r"^data: expected an object"):
        Config.from_dict({"data": 3})
    with pytest.raises(ConfigError, match="must be true or false|expected true or false"):
        Config.from_dict({"data": {"shuffle": 1}})


def test_round_trip_to_dict_from_dict_and_json():
    c = apply_overrides(
        Config(),
        ["actor_rollout_ref.rollout.n=4", "tools.names=[calculator]", "data.train_files=[a, b]"],
    )
    d = c.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert Config.from_dict(d) == c
    assert Config.from_dict(json.loads(json.dumps(d))).to_dict() == d
    assert Config.from_dict({}) == Config() and Config.from_dict(None) == Config()


def test_load_json_and_yaml(tmp_path):
    spec = {"data": {"train_batch_size": 16}, "actor_rollout_ref": {"rollout": {"n": 4}}}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    assert load_config(tmp_path / "spec.json").data.train_batch_size == 16
    (tmp_path / "spec.yaml").write_text(
        "data:\n  train_batch_size: 32\nactor_rollout_ref:\n  rollout:\n    n: 2\n"
    )
    c = load_config(tmp_path / "spec.yaml")
    assert c.data.train_batch_size == 32 and c.actor_rollout_ref.rollout.n == 2
    (tmp_path / "bad.json").write_text("{nope")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_config(tmp_path / "bad.json")


def _runnable(**extra):
    return apply_overrides(
        Config(),
        {
            "data.train_files": "d.jsonl",
            "actor_rollout_ref.model.path": "m",
            "data.train_batch_size": 8,
            "actor_rollout_ref.actor.ppo_mini_batch_size": 4,
            **extra,
        },
    )


def test_validate_cross_field_checks():
    validate(_runnable())
    with pytest.raises(ConfigError, match=r"^actor_rollout_ref\.model\.path: required"):
        validate(apply_overrides(Config(), {"data.train_files": "d.jsonl"}))
    with pytest.raises(ConfigError, match=r"^data\.train_files: required"):
        validate(Config())
    cases = [
        (
            {"actor_rollout_ref.actor.ppo_mini_batch_size": 16},
            "actor_rollout_ref.actor.ppo_mini_batch_size",
        ),
        (
            {"actor_rollout_ref.actor.ppo_mini_batch_size": 3},
            "actor_rollout_ref.actor.ppo_mini_batch_size",
        ),
        ({"trainer.n_gpus_per_node": 3}, "data.train_batch_size"),
        (
            {"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 3},
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
        ),
        ({"tools.names": ["calculator"]}, "tools.names"),
        # an interaction only in multi-turn rollout, and only a registered one
        ({"actor_rollout_ref.rollout.multi_turn.interaction": "gsm8k"},
         "actor_rollout_ref.rollout.multi_turn.interaction"),
        ({"actor_rollout_ref.rollout.multi_turn.enable": True,
          "actor_rollout_ref.rollout.multi_turn.interaction": "trainer.interactions.gsm8k.Gsm8kInteraction"},
         "actor_rollout_ref.rollout.multi_turn.interaction"),
        ({"actor_rollout_ref.rollout.multi_turn.max_user_turns": 0},
         "actor_rollout_ref.rollout.multi_turn.max_user_turns"),
        (
            {"actor_rollout_ref.rollout.name": "sglang", "trainer.device": "cpu"},
            "actor_rollout_ref.rollout.name",
        ),
        ({"actor_rollout_ref.actor.clip_ratio_c": 1.0}, "actor_rollout_ref.actor.clip_ratio_c"),
        ({"trainer.save_freq": 0}, "trainer.save_freq"),
        ({"trainer.resume_mode": "resume_path"}, "trainer.resume_from_path"),
        ({"trainer.logger": ["console", "slack"]}, "trainer.logger"),
        ({"actor_rollout_ref.rollout.top_p": 0.0}, "actor_rollout_ref.rollout.top_p"),
        ({"actor_rollout_ref.rollout.temperature": 0.0}, "actor_rollout_ref.rollout.temperature"),
    ]
    for extra, key in cases:
        with pytest.raises(ConfigError) as info:
            validate(_runnable(**extra))
        assert info.value.key == key, (extra, str(info.value))
    with pytest.raises(ConfigError, match="allowed values: console, jsonl"):
        validate(_runnable(**{"trainer.logger": ["slack"]}))
    # a hand-built bad choice (dataclasses.replace skips parsing) is still caught
    bad = dataclasses.replace(
        _runnable(), algorithm=dataclasses.replace(Config().algorithm, adv_estimator="grpo_vectorized")
    )
    with pytest.raises(ConfigError, match=r"^algorithm\.adv_estimator: .*allowed values"):
        validate(bad)


def test_resolve_fills_derived_values():
    r = resolve(
        apply_overrides(
            Config(),
            [
                "actor_rollout_ref.rollout.multi_turn.enable=true",
                "actor_rollout_ref.actor.clip_ratio_high=0.3",
            ],
        )
    )
    assert r.actor_rollout_ref.rollout.response_length == 512
    assert r.actor_rollout_ref.rollout.max_model_len == 1024
    assert r.actor_rollout_ref.rollout.multi_turn.max_turns == 5
    assert (
        r.actor_rollout_ref.actor.clip_ratio_low == 0.2
        and r.actor_rollout_ref.actor.clip_ratio_high == 0.3
    )
    assert resolve(Config()).actor_rollout_ref.rollout.multi_turn.max_turns == 1


@pytest.mark.parametrize("device, name, expected", [("cpu", "auto", "hf"), ("auto", "auto", "auto"),
                                                    ("cuda", "auto", "auto"), ("cuda", "sglang", "sglang"),
                                                    ("cpu", "hf", "hf")])
def test_resolve_makes_auto_hf_on_the_cpu(device, name, expected):
    """A CPU run's rollout engine is hf before the loop looks at the machine (security review F1)."""
    cfg = apply_overrides(Config(), [f"trainer.device={device}", f"actor_rollout_ref.rollout.name={name}"])
    assert resolve(cfg).actor_rollout_ref.rollout.name == expected


def test_auto_passes_and_sglang_is_refused_on_the_cpu():
    validate(apply_overrides(_runnable(), ["trainer.device=cpu", "actor_rollout_ref.rollout.name=auto"]))
    with pytest.raises(ConfigError, match=r"^actor_rollout_ref\.rollout\.name: sglang needs a GPU"):
        validate(apply_overrides(_runnable(), ["trainer.device=cpu", "actor_rollout_ref.rollout.name=sglang"]))


def test_vllm_is_a_gpu_engine():
    """verl's default rollout name validates on a GPU and is refused on the CPU, naming the key."""
    validate(apply_overrides(_runnable(), ["trainer.device=cuda", "actor_rollout_ref.rollout.name=vllm"]))
    with pytest.raises(ConfigError, match=r"^actor_rollout_ref\.rollout\.name: vllm needs a GPU; use hf"):
        validate(apply_overrides(_runnable(), ["trainer.device=cpu", "actor_rollout_ref.rollout.name=vllm"]))
    with pytest.raises(ConfigError, match=r"actor_rollout_ref\.rollout\.name"):
        apply_overrides(_runnable(), ["actor_rollout_ref.rollout.name=vllm2"])
    assert resolve(apply_overrides(Config(), ["trainer.device=cpu", "actor_rollout_ref.rollout.name=auto"])
                   ).actor_rollout_ref.rollout.name == "hf"


def test_recipes_all_validate_and_need_paths():
    assert set(REGISTRY) == {"cpu_smoke", "dapo", "demo_tool_arith", "gsm8k_multiturn_grpo"}
    for name in REGISTRY:
        cfg = get_recipe(name)
        validate(cfg, require_paths=False)
        with pytest.raises(ConfigError, match="required"):
            validate(cfg)
        validate(
            apply_overrides(
                cfg, {"data.train_files": "d.jsonl", "actor_rollout_ref.model.path": "m"}
            )
        )
        assert Config.from_dict(cfg.to_dict()) == cfg
    smoke = get_recipe("cpu_smoke")
    assert smoke.data.train_batch_size == 2 and smoke.actor_rollout_ref.rollout.n == 2
    assert (
        smoke.actor_rollout_ref.rollout.response_length == 16
        and smoke.trainer.total_training_steps == 2
    )
    assert smoke.actor_rollout_ref.rollout.multi_turn.max_turns == 2 and smoke.tools.names == [
        "calculator"
    ]
    assert (
        smoke.trainer.device == "cpu"
        and smoke.trainer.save_freq == 1
        and not smoke.trainer.val_before_train
    )
    demo = get_recipe("demo_tool_arith")
    assert (demo.data.train_batch_size, demo.actor_rollout_ref.rollout.n) == (8, 8)
    assert (
        demo.actor_rollout_ref.actor.optim.lr == 3e-4
        and not demo.actor_rollout_ref.actor.use_kl_loss
    )
    assert demo.actor_rollout_ref.rollout.multi_turn.max_turns == 3 and demo.trainer.test_freq == 5
    g = get_recipe("gsm8k_multiturn_grpo")
    assert g.actor_rollout_ref.model.path == "" and g.actor_rollout_ref.rollout.name == "sglang"
    assert (g.data.train_batch_size, g.actor_rollout_ref.rollout.n, g.trainer.n_gpus_per_node) == (
        256,
        16,
        8,
    )
    assert g.actor_rollout_ref.actor.use_kl_loss and g.tools.names == ["calc_gsm8k_reward"]
    with pytest.raises(KeyError, match="known recipes: cpu_smoke, dapo, demo_tool_arith"):
        get_recipe("nope")


def test_recipes_cli(capsys):
    assert recipes_main([]) == 0
    assert "cpu_smoke" in capsys.readouterr().out
    assert recipes_main(["--show", "cpu_smoke"]) == 0
    assert Config.from_dict(json.loads(capsys.readouterr().out)) == get_recipe("cpu_smoke")
    assert recipes_main(["--show", "nope"]) == 2


def test_describe_config_covers_every_field_with_help():
    rows = describe_config()
    keys = [r[0] for r in rows]
    assert len(keys) == len(set(keys)) and "actor_rollout_ref.rollout.multi_turn.max_turns" in keys
    assert all(r[3] for r in rows), [r[0] for r in rows if not r[3]]
    assert dict((r[0], r[2]) for r in rows)["actor_rollout_ref.actor.clip_ratio"] == 0.2


def test_committed_config_reference_is_up_to_date():
    doc = ROOT / "docs" / "config-reference.md"
    assert doc.read_text(encoding="utf-8") == config_markdown(), (
        "regenerate: python -m trainer.config --markdown > docs/config-reference.md"
    )


def test_config_and_events_import_without_torch():
    code = (
        "import sys, trainer.events, trainer.config, trainer.recipes; "
        "bad = [m for m in ('torch', 'django', 'numpy', 'transformers') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


@pytest.mark.parametrize("overrides,key", [
    (["actor_rollout_ref.actor.optim.lr=nan"], "actor_rollout_ref.actor.optim.lr"),
    (["actor_rollout_ref.rollout.temperature=inf"], "actor_rollout_ref.rollout.temperature"),
    ({"actor_rollout_ref.rollout.temperature": float("-inf")}, "actor_rollout_ref.rollout.temperature"),
    ({"reward.reward_kwargs": {"x": float("nan")}}, "reward.reward_kwargs"),
    ({"reward.reward_kwargs": {"x": "a\x00"}}, "reward.reward_kwargs"),
    ({"trainer.project_name": "a\x00b"}, "trainer.project_name"),
    ([1, 2], "overrides[0]"),
    (["tools.names=[1]"], "tools.names"),
])
def test_non_finite_nul_and_non_string_items_are_config_errors(overrides, key):
    """Each of these once reached PostgreSQL (NaN / NUL in JSONB) or crashed the parser: a 500."""
    from trainer.config import Config, ConfigError, apply_overrides, validate

    with pytest.raises(ConfigError) as exc:
        validate(apply_overrides(Config(), overrides), require_paths=False)
    assert exc.value.key.startswith(key)


def test_yaml_inf_is_a_config_error():
    import yaml

    from trainer.config import Config, ConfigError

    with pytest.raises(ConfigError) as exc:
        Config.from_dict(yaml.safe_load("actor_rollout_ref: {actor: {optim: {lr: .inf}}}"))
    assert exc.value.key == "actor_rollout_ref.actor.optim.lr"


def test_policy_loss_is_verls_section_and_old_specs_still_load():
    cfg = apply_overrides(Config(), ["actor_rollout_ref.actor.policy_loss.loss_mode=gspo"])
    assert cfg.actor_rollout_ref.actor.policy_loss.loss_mode == "gspo"
    assert cfg.to_dict()["actor_rollout_ref"]["actor"]["policy_loss"] == {
        "loss_mode": "gspo", "clip_cov_ratio": 0.0002, "clip_cov_lb": 1.0, "clip_cov_ub": 5.0,
        "kl_cov_ratio": 0.0002, "ppo_kl_coef": 0.1}  # verl's section, with verl's defaults
    with pytest.raises(ConfigError, match="allowed values: vanilla, gspo, cispo, gpg, geo_mean, sapo, clip_cov, kl_cov") as err:
        apply_overrides(Config(), ["actor_rollout_ref.actor.policy_loss.loss_mode=ppo"])
    assert err.value.key == "actor_rollout_ref.actor.policy_loss.loss_mode"
    # A spec stored when actor.policy_loss was the mode's name as a string reads as that mode.
    old = Config().to_dict()
    old["actor_rollout_ref"]["actor"]["policy_loss"] = "vanilla"
    assert Config.from_dict(old) == Config()
    with pytest.raises(ConfigError, match="loss_mode"):
        Config.from_dict({"actor_rollout_ref": {"actor": {"policy_loss": "nope"}}})


@pytest.mark.parametrize("tp, value, message", [
    (int | None, "ten", 'k: expected an integer or null, got "ten"'),
    (list[str], 3, "k: expected a list of strings, got 3"),
    (list[int] | None, {"a": True}, 'k: expected a list of integers or null, got {"a": true}'),
    (bool, "yes", 'k: expected true or false, got "yes"'),
    (float, None, "k: expected a number, got null"),
    (Literal["a", "b"], "c", 'k: "c" is not allowed; allowed values: a, b'),
    (int, "x" * 300, 'k: expected an integer, got "' + "x" * 118 + "…"),
    # nested shapes: the list's items, not the list, may be null; a Literal's choices are the items'
    (list[int | None], "x", 'k: expected a list whose items are each an integer or null, got "x"'),
    (list[Literal["a", "b"]], 3, 'k: expected a list whose items are each one of "a", "b", got 3'),
    (list[list[int | None]], [3], 'k[0]: expected a list whose items are each an integer or null, got 3'),
    (bool | None, 3, "k: expected true or false, or null, got 3"),
    (list[int | None] | None, 3, "k: expected a list whose items are each an integer or null, or null, got 3"),
])
def test_type_errors_read_in_the_configs_own_terms(tp, value, message):
    """A wrong value's error names the type in words and the value as JSON (true, null, "text"), not
    Python's `int | None` and repr (True, None, 'text'), and cuts a long value short."""
    from trainer.config.fields import ConfigError, coerce

    with pytest.raises(ConfigError) as info:
        coerce(tp, value, "k")
    assert str(info.value) == message
