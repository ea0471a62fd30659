"""The config gate on the keys of verl's gpg, geo_mean and sapo: users may choose them and set sapo's
temperatures (actor.tau_pos, actor.tau_neg) inside their bounds; outside, the refusal names the key."""
import pytest

from rlstudio.runs.gate.bounds import GateRefused
from rlstudio.runs.gate.changes import check
from rlstudio.runs.gate.keys import PLATFORM_KEYS, USER_KEYS
from trainer.config import Config, apply_overrides

TAU = ("actor_rollout_ref.actor.tau_pos", "actor_rollout_ref.actor.tau_neg")


def _check(overrides):
    after = apply_overrides(Config(), overrides)
    check(before=Config().to_dict(), after=after.to_dict(), reward_names=["default"], tool_names=[])


def test_users_may_choose_the_algorithms_and_set_the_temperatures():
    _check({"algorithm.adv_estimator": "gpg", "actor_rollout_ref.actor.policy_loss.loss_mode": "gpg"})
    _check({"actor_rollout_ref.actor.policy_loss.loss_mode": "geo_mean",
            "actor_rollout_ref.actor.clip_ratio_low": 0.4, "actor_rollout_ref.actor.clip_ratio_high": 0.4})
    _check({"actor_rollout_ref.actor.policy_loss.loss_mode": "sapo", TAU[0]: 0.5, TAU[1]: 2.0})
    for key in TAU:
        assert key in USER_KEYS and key not in PLATFORM_KEYS


@pytest.mark.parametrize("key", TAU)
@pytest.mark.parametrize("value", [0.0, -1.0, 1000.0])
def test_temperatures_outside_their_bounds_are_refused_naming_the_key(key, value):
    with pytest.raises(GateRefused) as exc:
        _check({key: value})
    assert exc.value.key == key
