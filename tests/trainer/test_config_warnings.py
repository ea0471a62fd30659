"""trainer.config: the warnings channel (config_warnings) and actor.loss_scale_factor (issue 17)."""
import pytest

from trainer.config import Config, ConfigError, config_warnings, resolve, validate


def _cfg(**actor_rollout_ref_and_algorithm):
    return Config.from_dict(actor_rollout_ref_and_algorithm)


def test_group_baseline_estimators_with_one_sample_per_prompt_warn_but_validate():
    for est in ("grpo", "rloo", "opo"):
        cfg = _cfg(algorithm={"adv_estimator": est}, data={"train_batch_size": 256})
        [w] = config_warnings(cfg)
        assert w.key == "actor_rollout_ref.rollout.n" and "no baseline" in w.message and est in w.message
        validate(cfg, require_paths=False)  # a warning never refuses
    assert config_warnings(_cfg(actor_rollout_ref={"rollout": {"n": 2}})) == []
    # REINFORCE++ (and its baseline variant, which whitens over the batch) does not need groups.
    assert config_warnings(_cfg(algorithm={"adv_estimator": "reinforce_plus_plus"})) == []


def test_a_loss_scale_factor_the_loss_mode_ignores_is_a_warning():
    cfg = _cfg(actor_rollout_ref={"rollout": {"n": 4}, "actor": {"loss_scale_factor": 4096}})
    assert [w.key for w in config_warnings(cfg)] == ["actor_rollout_ref.actor.loss_scale_factor"]
    cfg = _cfg(actor_rollout_ref={"rollout": {"n": 4}, "actor": {"loss_scale_factor": 4096,
                                                                 "loss_agg_mode": "seq-mean-token-sum-norm"}})
    assert config_warnings(cfg) == []
    assert config_warnings(_cfg())[0].as_dict()["field"] == "actor_rollout_ref.rollout.n"  # the web side's form


def test_loss_scale_factor_defaults_to_the_response_length_and_must_be_positive():
    assert Config().actor_rollout_ref.actor.loss_scale_factor is None  # verl's default
    assert resolve(Config()).actor_rollout_ref.actor.loss_scale_factor == 512  # data.max_response_length
    cfg = Config.from_dict({"data": {"max_response_length": 300},
                            "actor_rollout_ref": {"rollout": {"response_length": 200}}})
    assert resolve(cfg).actor_rollout_ref.actor.loss_scale_factor == 200
    cfg = Config.from_dict({"actor_rollout_ref": {"actor": {"loss_scale_factor": 4096}}})
    assert resolve(cfg).actor_rollout_ref.actor.loss_scale_factor == 4096
    with pytest.raises(ConfigError, match="loss_scale_factor"):
        validate(Config.from_dict({"actor_rollout_ref": {"actor": {"loss_scale_factor": 0}}}), require_paths=False)


def test_gspo_warns_about_its_own_aggregation_and_the_clip_range():
    def keys(**actor):
        cfg = _cfg(actor_rollout_ref={"rollout": {"n": 4}, "actor": {"policy_loss": {"loss_mode": "gspo"}, **actor}})
        validate(cfg, require_paths=False)  # warnings only
        return [w.key for w in config_warnings(cfg)]

    assert keys() == ["actor_rollout_ref.actor.loss_agg_mode", "actor_rollout_ref.actor.clip_ratio_low"]
    # verl's GSPO recipe: seq-mean-token-mean and 3e-4 / 4e-4.
    assert keys(loss_agg_mode="seq-mean-token-mean", clip_ratio_low=3e-4, clip_ratio_high=4e-4) == []
    for mode in ("vanilla", "cispo", "gpg"):
        cfg = _cfg(actor_rollout_ref={"rollout": {"n": 4}, "actor": {"policy_loss": {"loss_mode": mode}}})
        assert config_warnings(cfg) == []
