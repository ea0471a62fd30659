"""The advantage estimators and policy losses added after the first ones (opo, grpo_passk, clip_cov,
kl_cov, remax, gpg, geo_mean, sapo): their config keys parse, and each trains 2 GRPO steps on the tiny model through the command
line (`python -m trainer run --recipe cpu_smoke`, in-process through trainer.cli.main). The reward
gives responses of different lengths different scores, so the advantages are not all zero."""

from __future__ import annotations

import json
import math

from trainer.cli import main
import pytest

from trainer.config import Config, ConfigError, apply_overrides, validate


def _run(tmp_path, tiny_model_dir, demo_data_dir, *overrides: str) -> list[dict]:
    """Run cpu_smoke for 2 steps with ``overrides``; the metrics of the steps that trained."""
    out, reward = tmp_path / "out", tmp_path / "reward.py"
    reward.write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    return (len(solution_str) % 7) / 7.0\n"
    )
    rc = main(
        [
            "run",
            "--recipe",
            "cpu_smoke",
            f"data.train_files={demo_data_dir / 'train.jsonl'}",
            f"actor_rollout_ref.model.path={tiny_model_dir}",
            "trainer.save_freq=-1",
            f"custom_reward_function.path={reward}",
            "trainer.logger=[jsonl]",
            *overrides,
            "--output",
            str(out),
        ]
    )
    assert rc == 0
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    assert [e["data"]["state"] for e in events if e["type"] == "status"] == [
        "starting",
        "running",
        "succeeded",
    ]
    steps = [
        e["data"]
        for e in events
        if e["type"] == "metrics" and "actor/pg_loss" in e["data"]["metrics"]
    ]
    assert [s["step"] for s in steps] == [1, 2]
    for s in steps:
        m = s["metrics"]
        assert math.isfinite(m["actor/pg_loss"]) and 0 < m["actor/grad_norm"] < math.inf
    return [s["metrics"] for s in steps]


def test_opo_is_a_choice_of_adv_estimator():
    cfg = apply_overrides(
        Config(), ["algorithm.adv_estimator=opo", "actor_rollout_ref.rollout.n=4"]
    )
    assert validate(cfg, require_paths=False).algorithm.adv_estimator == "opo"


def test_opo_trains_two_steps(tmp_path, tiny_model_dir, demo_data_dir):
    steps = _run(tmp_path, tiny_model_dir, demo_data_dir, "algorithm.adv_estimator=opo")
    assert all(math.isfinite(m["critic/advantages/mean"]) for m in steps)


def test_grpo_passk_is_a_choice_and_refuses_one_sample_per_prompt():
    cfg = apply_overrides(
        Config(), ["algorithm.adv_estimator=grpo_passk", "actor_rollout_ref.rollout.n=2"]
    )
    assert validate(cfg, require_paths=False).algorithm.adv_estimator == "grpo_passk"
    with pytest.raises(ConfigError, match="rollout.n >= 2") as err:
        validate(
            apply_overrides(Config(), ["algorithm.adv_estimator=grpo_passk"]), require_paths=False
        )
    assert err.value.key == "actor_rollout_ref.rollout.n"


def test_grpo_passk_trains_two_steps(tmp_path, tiny_model_dir, demo_data_dir):
    steps = _run(tmp_path, tiny_model_dir, demo_data_dir, "algorithm.adv_estimator=grpo_passk")
    # Only one sample of each group of 2 learns: the others' advantages are 0, none negative.
    assert all(m["critic/advantages/min"] >= 0 for m in steps)


PL = "actor_rollout_ref.actor.policy_loss"


def test_clip_cov_and_kl_cov_keys_parse_and_are_checked():
    cfg = apply_overrides(
        Config(),
        [
            f"{PL}.loss_mode=clip_cov",
            f"{PL}.clip_cov_ratio=0.01",
            f"{PL}.clip_cov_lb=0.5",
            f"{PL}.clip_cov_ub=2",
        ],
    )
    pl = validate(cfg, require_paths=False).actor_rollout_ref.actor.policy_loss
    assert (pl.loss_mode, pl.clip_cov_ratio, pl.clip_cov_lb, pl.clip_cov_ub) == (
        "clip_cov",
        0.01,
        0.5,
        2.0,
    )
    cfg = apply_overrides(
        Config(), [f"{PL}.loss_mode=kl_cov", f"{PL}.kl_cov_ratio=0.001", f"{PL}.ppo_kl_coef=1"]
    )
    pl = validate(cfg, require_paths=False).actor_rollout_ref.actor.policy_loss
    assert (pl.loss_mode, pl.kl_cov_ratio, pl.ppo_kl_coef) == ("kl_cov", 0.001, 1.0)
    # Other modes ignore these keys (verl's section holds them whatever the mode); bad values are refused.
    for override, key in [
        (f"{PL}.clip_cov_ratio=0", "clip_cov_ratio"),
        (f"{PL}.kl_cov_ratio=1.5", "kl_cov_ratio"),
        (f"{PL}.clip_cov_ub=1", "clip_cov_ub"),
        (f"{PL}.ppo_kl_coef=-1", "ppo_kl_coef"),
    ]:
        with pytest.raises(ConfigError) as err:
            validate(apply_overrides(Config(), [override]), require_paths=False)
        assert err.value.key == f"{PL}.{key}"
    with pytest.raises(ConfigError) as err:
        apply_overrides(Config(), [f"{PL}.clip_cov_lb=low"])
    assert err.value.key == f"{PL}.clip_cov_lb"


def test_clip_cov_trains_two_steps(tmp_path, tiny_model_dir, demo_data_dir):
    # Wide bounds and a 10% budget so that tokens are cut on the tiny model; 2 epochs (off-policy).
    steps = _run(
        tmp_path,
        tiny_model_dir,
        demo_data_dir,
        f"{PL}.loss_mode=clip_cov",
        f"{PL}.clip_cov_ratio=0.1",
        f"{PL}.clip_cov_lb=-100",
        f"{PL}.clip_cov_ub=100",
        "actor_rollout_ref.actor.ppo_epochs=2",
    )
    for m in steps:
        assert 0 < m["actor/pg_clipfrac"] <= 0.2 and "actor/pg_clipfrac_lower" not in m  # as verl's clip_cov
        assert math.isfinite(m["actor/ppo_kl"])


def test_kl_cov_trains_two_steps(tmp_path, tiny_model_dir, demo_data_dir):
    steps = _run(
        tmp_path,
        tiny_model_dir,
        demo_data_dir,
        f"{PL}.loss_mode=kl_cov",
        f"{PL}.kl_cov_ratio=0.1",
        "actor_rollout_ref.actor.ppo_epochs=2",
    )
    for m in steps:
        assert "actor/pg_clipfrac" not in m and "actor/pg_clipfrac_lower" not in m  # verl's kl_cov: ppo_kl only
        assert 0 <= m["actor/ppo_kl"] < math.inf  # the mean |log r|, as verl's


def test_remax_is_a_choice_and_attaches_the_greedy_reward_by_prompt():
    from trainer.rollout_phase import attach_greedy_baselines

    cfg = apply_overrides(
        Config(), ["algorithm.adv_estimator=remax"]
    )  # n=1 is ReMax's usual setting
    assert validate(cfg, require_paths=False).algorithm.adv_estimator == "remax"

    class T:  # the two fields attach_greedy_baselines reads and writes
        def __init__(self, uid, reward=0.0):
            self.uid, self.reward, self.reward_baseline = uid, reward, None

    sampled = [T("p"), T("q"), T("p")]
    attach_greedy_baselines(sampled, [T("q", 0.25), T("p", 1.0)])
    assert [t.reward_baseline for t in sampled] == [1.0, 0.25, 1.0]


DYNAMIC = (
    "algorithm.filter_groups.enable=true",
    "algorithm.filter_groups.metric=score",
    "algorithm.filter_groups.max_num_gen_batches=2",
)


@pytest.mark.parametrize("extra", [(), DYNAMIC], ids=["plain", "dynamic_sampling"])
def test_remax_trains_two_steps_with_a_greedy_generation(
    extra, tmp_path, tiny_model_dir, demo_data_dir
):
    # With dynamic sampling each generation batch gets its own greedy responses.
    out = tmp_path / "out"
    steps = _run(
        tmp_path,
        tiny_model_dir,
        demo_data_dir,
        "algorithm.adv_estimator=remax",
        "report.samples_per_step=-1",
        *extra,
    )
    for m in steps:
        assert (
            m["timing_s/gen_max"] > 0
        )  # the greedy responses' generation and scoring (verl's name)
    # Every sample's advantage is its reward less its prompt's greedy reward: reward - advantage is the
    # same for the samples of a prompt, and is a reward the test's function can give (k / 7).
    samples = [
        json.loads(line)["data"]
        for line in (out / "events.jsonl").read_text().splitlines()
        if json.loads(line)["type"] == "sample"
    ]
    assert len(samples) == 2 * 2 * 2  # 2 steps x 2 prompts x n=2
    baseline: dict[tuple[int, str], float] = {}
    for s in samples:
        b = s["reward"] - s["advantage"]
        assert abs(b * 7 - round(b * 7)) < 1e-5 and 0 <= b < 1
        assert abs(baseline.setdefault((s["step"], s["uid"]), b) - b) < 1e-6


# ------------------------------------------------------------------- gpg, geo_mean (GMPO), sapo
def test_gpg_estimator_and_the_new_loss_modes_are_choices_with_verls_keys():
    cfg = apply_overrides(Config(), ["algorithm.adv_estimator=gpg", f"{PL}.loss_mode=gpg",
                                     "actor_rollout_ref.rollout.n=4"])
    assert validate(cfg, require_paths=False).algorithm.adv_estimator == "gpg"
    cfg = apply_overrides(Config(), [f"{PL}.loss_mode=geo_mean"])
    assert validate(cfg, require_paths=False).actor_rollout_ref.actor.policy_loss.loss_mode == "geo_mean"
    # sapo's temperatures: verl's keys in the actor section, verl's defaults
    actor = Config().actor_rollout_ref.actor
    assert (actor.tau_pos, actor.tau_neg) == (1.0, 1.05)
    cfg = apply_overrides(Config(), [f"{PL}.loss_mode=sapo", "actor_rollout_ref.actor.tau_pos=0.5",
                                     "actor_rollout_ref.actor.tau_neg=2"])
    actor = validate(cfg, require_paths=False).actor_rollout_ref.actor
    assert (actor.policy_loss.loss_mode, actor.tau_pos, actor.tau_neg) == ("sapo", 0.5, 2.0)
    for override, key in [("actor_rollout_ref.actor.tau_pos=0", "tau_pos"),
                          ("actor_rollout_ref.actor.tau_neg=-1", "tau_neg"),
                          ("actor_rollout_ref.actor.tau_neg=101", "tau_neg")]:
        with pytest.raises(ConfigError) as err:
            validate(apply_overrides(Config(), [override]), require_paths=False)
        assert err.value.key == f"actor_rollout_ref.actor.{key}"
    with pytest.raises(ConfigError) as err:
        apply_overrides(Config(), ["actor_rollout_ref.actor.tau_pos=warm"])
    assert err.value.key == "actor_rollout_ref.actor.tau_pos"


def test_the_new_modes_warn_where_verls_would_surprise():
    from trainer.config import config_warnings

    def keys(*overrides):
        cfg = apply_overrides(Config(), ["actor_rollout_ref.rollout.n=4", *overrides])
        validate(cfg, require_paths=False)  # warnings only
        return [w.key for w in config_warnings(cfg)]

    # gpg's baseline is the group: one sample per prompt leaves none
    assert keys("algorithm.adv_estimator=gpg", "actor_rollout_ref.rollout.n=1") == [
        "actor_rollout_ref.rollout.n"]
    # sapo aggregates seq-mean-token-mean whatever loss_agg_mode says; geo_mean a mean over sequences
    assert keys(f"{PL}.loss_mode=sapo") == ["actor_rollout_ref.actor.loss_agg_mode"]
    assert keys(f"{PL}.loss_mode=sapo", "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean") == []
    assert keys(f"{PL}.loss_mode=geo_mean") == []
    assert keys(f"{PL}.loss_mode=geo_mean", "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum") == [
        "actor_rollout_ref.actor.loss_agg_mode"]


def test_gpg_trains_two_steps_and_scales_the_centred_scores(tmp_path, tiny_model_dir, demo_data_dir):
    # verl's GPG recipe: the gpg estimator with the gpg loss (which reports no clip metrics).
    out = tmp_path / "out"
    steps = _run(tmp_path, tiny_model_dir, demo_data_dir, "algorithm.adv_estimator=gpg",
                 f"{PL}.loss_mode=gpg", "report.samples_per_step=-1")
    assert not {"actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower"} & set(steps[0])
    samples = [json.loads(line)["data"] for line in (out / "events.jsonl").read_text().splitlines()
               if json.loads(line)["type"] == "sample"]
    assert len(samples) == 2 * 2 * 2  # 2 steps x 2 prompts x n=2
    for step in (1, 2):
        rows = [s for s in samples if s["step"] == step]
        alpha = len(rows) / max(sum(1 for s in rows if s["reward"] != 0), 1)
        for s in rows:
            group = [t["reward"] for t in rows if t["uid"] == s["uid"]]
            expected = alpha * (s["reward"] - sum(group) / len(group))
            # a sample's advantage is its first non-zero one (0 for a centred-away group)
            assert s["advantage"] == pytest.approx(expected, abs=1e-5)


def test_geo_mean_trains_two_steps(tmp_path, tiny_model_dir, demo_data_dir):
    # verl's GMPO recipe clips at 0.4 on both sides; 2 epochs so the second runs off-policy.
    steps = _run(tmp_path, tiny_model_dir, demo_data_dir, f"{PL}.loss_mode=geo_mean",
                 "actor_rollout_ref.actor.clip_ratio_low=0.4", "actor_rollout_ref.actor.clip_ratio_high=0.4",
                 "actor_rollout_ref.actor.ppo_epochs=2")
    for m in steps:
        assert 0 <= m["actor/pg_clipfrac"] <= 1 and 0 <= m["actor/pg_clipfrac_lower"] <= 1
        assert math.isfinite(m["actor/ppo_kl"])


def test_sapo_trains_two_steps(tmp_path, tiny_model_dir, demo_data_dir):
    steps = _run(tmp_path, tiny_model_dir, demo_data_dir, f"{PL}.loss_mode=sapo",
                 "actor_rollout_ref.actor.tau_pos=1.0", "actor_rollout_ref.actor.tau_neg=1.05",
                 "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",
                 "actor_rollout_ref.actor.ppo_epochs=2")
    for m in steps:  # a soft gate, no clip: both fractions 0, as verl's
        assert m["actor/pg_clipfrac"] == 0.0 and m["actor/pg_clipfrac_lower"] == 0.0
        assert math.isfinite(m["actor/ppo_kl"])
