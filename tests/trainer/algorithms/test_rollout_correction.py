"""Rollout correction (trainer.algorithms.rollout_correction) against values worked out by hand on a
tiny float64 batch: importance weights (token and sequence, TIS and IcePop, batch normalisation),
rejection masks (k1 / k3, token / sequence, chained options, binary_kl), verl's mismatch metrics and
their names; the policy losses multiply their per-token loss by the weights; the config section's
threshold parsing and checks."""

import math

import pytest
import torch

from trainer.algorithms.policy_losses import get_policy_loss, policy_loss_names
from trainer.algorithms.rollout_correction import (corrected_policy_loss, importance_weights,
                                                   offpolicy_metrics, reinforce_loss, rejection_mask,
                                                   rollout_correction)
from trainer.config import Config, ConfigError, config_warnings, validate
from trainer.config.rollout_correction import (RS_OPTIONS, RolloutCorrectionConfig, parse_is_threshold,
                                               parse_rs_thresholds)

torch.set_num_threads(1)
D = torch.float64
E = math.exp

# Two rows; row 1's last token is padding (its huge values must be ignored).
OLD = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -1.2, -50.0]], dtype=D)
ROLLOUT = torch.tensor([[-1.5, -1.0, -0.5], [-0.3, -0.2, 0.0]], dtype=D)
MASK = torch.tensor([[1.0, 1, 1], [1, 1, 0]], dtype=D)
# log r = old - rollout on the masked tokens: [[0.5, -1, 0], [0, -1]]
LOG_R = OLD - ROLLOUT
K3 = [E(0.5) - 1.5, E(-1.0), 0.0, 0.0, E(-1.0)]  # r - 1 - log r per trained token


def close(a, b, tol=1e-12):
    a, b = (float(x.detach()) if isinstance(x, torch.Tensor) else float(x) for x in (a, b))
    return abs(a - b) <= tol * max(1.0, abs(b))


# ---------------------------------------------------------------------------------- importance weights
def test_token_tis_weights_and_metrics():
    w, m = importance_weights(LOG_R, MASK, "token", 1.5)
    expected = torch.tensor([[1.5, E(-1), 1.0], [1.0, E(-1), 0.0]], dtype=D)  # e^0.5 = 1.65 capped at 1.5
    assert torch.allclose(w, expected, atol=1e-15) and not w.requires_grad
    flat = [1.5, E(-1), 1.0, 1.0, E(-1)]
    mean = sum(flat) / 5
    assert close(m["rollout_is_mean"], mean)
    assert close(m["rollout_is_max"], 1.5) and close(m["rollout_is_min"], E(-1))
    assert close(m["rollout_is_ratio_fraction_high"], 1 / 5)  # raw e^0.5 > 1.5
    assert close(m["rollout_is_ratio_fraction_low"], 2 / 5)  # raw e^-1 < 1/1.5
    second = sum(x * x for x in flat) / 5
    assert close(m["rollout_is_std"], math.sqrt(second - mean * mean))
    assert close(m["rollout_is_eff_sample_size"], 1 / (second / (mean + 1e-8) ** 2), 1e-7)
    seq = [(1.5 + E(-1) + 1) / 3, (1 + E(-1)) / 2]
    assert close(m["rollout_is_seq_mean"], sum(seq) / 2)
    assert close(m["rollout_is_seq_std"], abs(seq[0] - seq[1]) / math.sqrt(2))
    assert close(m["rollout_is_seq_max"], seq[0]) and close(m["rollout_is_seq_min"], seq[1])
    assert close(m["rollout_is_seq_max_deviation"], 1 - seq[1])
    assert m["rollout_is_seq_fraction_high"] == 0.0 and m["rollout_is_seq_fraction_low"] == 0.0
    assert "rollout_is_oob_ratio" not in m and "rollout_is_batch_norm_factor" not in m


def test_sequence_weights_are_the_product_over_the_trained_tokens():
    w, m = importance_weights(LOG_R, MASK, "sequence", 2.0)
    expected = torch.tensor([[E(-0.5)] * 3, [E(-1), E(-1), 0.0]], dtype=D)
    assert torch.allclose(w, expected, atol=1e-15)
    assert close(m["rollout_is_max"], E(-0.5)) and close(m["rollout_is_min"], E(-1))
    assert close(m["rollout_is_mean"], (3 * E(-0.5) + 2 * E(-1)) / 5)
    assert m["rollout_is_ratio_fraction_high"] == 0.0
    assert close(m["rollout_is_ratio_fraction_low"], 1 / 2)  # row 1: e^-1 < 1/2; row 0: e^-0.5 > 1/2
    # A sequence far off the rollout: its weight is capped, its log-space max is reported uncapped.
    w, m = importance_weights(torch.tensor([[3.0, 2.0]], dtype=D), torch.ones(1, 2, dtype=D), "sequence", 2.0)
    assert torch.allclose(w, torch.full((1, 2), 2.0, dtype=D)) and close(m["rollout_is_max"], E(5.0))


def test_icepop_zeroes_weights_outside_the_interval():
    w, m = importance_weights(LOG_R, MASK, "token", "0.5_5.0")
    expected = torch.tensor([[E(0.5), 0.0, 1.0], [1.0, 0.0, 0.0]], dtype=D)
    assert torch.allclose(w, expected, atol=1e-15)
    assert close(m["rollout_is_oob_ratio"], 2 / 5)
    assert close(m["rollout_is_ratio_fraction_low"], 2 / 5)  # below lower = 0.5


def test_batch_normalisation_makes_the_mean_one():
    w, m = importance_weights(LOG_R, MASK, "token", 1.5, batch_normalize=True)
    mean = (1.5 + 2 * E(-1) + 2) / 5
    assert close(m["rollout_is_batch_norm_factor"], mean)
    assert close((w * MASK).sum() / MASK.sum(), 1.0)
    assert close(m["rollout_is_mean"], mean)  # metrics are those before the normalisation
    w, m = importance_weights(LOG_R, MASK, "sequence", 2.0, batch_normalize=True)
    seq_mean = (E(-0.5) + E(-1)) / 2  # one weight per sequence, averaged over sequences
    assert close(m["rollout_is_batch_norm_factor"], seq_mean)
    assert close(w[0, 0], E(-0.5) / seq_mean) and w[1, 2] == 0


# ------------------------------------------------------------------------------------------ rejection
def test_token_k1_rejects_ratios_outside_the_bounds():
    mask, m = rejection_mask(LOG_R, MASK, "token_k1", 2.0)  # ratio bounds [1/2, 2]: |log r| <= log 2
    assert mask.tolist() == [[1, 0, 1], [1, 0, 0]]
    assert close(m["rollout_rs_token_k1_masked_fraction"], 2 / 5)
    assert close(m["rollout_rs_token_k1_seq_masked_fraction"], 1.0)
    assert close(m["rollout_rs_token_k1_mean"], -(0.5 - 1 + 0 + 0 - 1) / 5)  # k1 = -log r
    assert close(m["rollout_rs_token_k1_max"], 1.0) and close(m["rollout_rs_token_k1_min"], -0.5)
    assert close(m["rollout_rs_token_k1_fraction_high"], 2 / 5)
    assert m["rollout_rs_token_k1_fraction_low"] == 0.0
    assert close(m["rollout_rs_masked_fraction"], 2 / 5) and close(m["rollout_rs_seq_masked_fraction"], 1.0)


def test_sequence_mean_k3_rejects_whole_rows_and_options_chain():
    seq = [(K3[0] + K3[1] + K3[2]) / 3, (K3[3] + K3[4]) / 2]  # 0.1722, 0.1839
    mask, m = rejection_mask(LOG_R, MASK, "seq_mean_k3", 0.175)
    assert mask.tolist() == [[1, 1, 1], [0, 0, 0]]
    assert close(m["rollout_rs_seq_mean_k3_max"], seq[1]) and close(m["rollout_rs_seq_mean_k3_min"], seq[0])
    assert close(m["rollout_rs_seq_mean_k3_fraction_high"], 1 / 2)
    assert close(m["rollout_rs_seq_mean_k3_masked_fraction"], 2 / 5)
    assert close(m["rollout_rs_seq_mean_k3_mean"], (3 * seq[0] + 2 * seq[1]) / 5)
    # Chained: a token must pass both options; one threshold per option.
    mask, m = rejection_mask(LOG_R, MASK, "token_k1,seq_mean_k3", "0.5_2.0,0.175")
    assert mask.tolist() == [[1, 0, 1], [0, 0, 0]]
    assert close(m["rollout_rs_masked_fraction"], 3 / 5) and close(m["rollout_rs_seq_masked_fraction"], 1.0)
    # seq_sum_k1 with ratio bounds on the product: row 0 sum(-log r) = 0.5, row 1 = 1.0 > log 2.
    mask, _ = rejection_mask(LOG_R, MASK, "seq_sum_k1", "0.5_2.0")
    assert mask.tolist() == [[1, 1, 1], [0, 0, 0]]
    mask, _ = rejection_mask(LOG_R, MASK, "seq_max_k3", 0.3)  # row maxima 0.368 and 0.368
    assert mask.tolist() == [[0, 0, 0], [0, 0, 0]]


def test_binary_kl_compares_the_sampled_token_probabilities():
    old = torch.log(torch.tensor([[0.5, 0.9]], dtype=D))
    rollout = torch.log(torch.tensor([[0.5, 0.6]], dtype=D))
    mask, m = rejection_mask(old - rollout, torch.ones(1, 2, dtype=D), "binary_kl", 0.1,
                             old_log_prob=old, rollout_log_prob=rollout)

    def bkl(p, q):
        return p * math.log(p / q) + (1 - p) * math.log((1 - p) / (1 - q))

    assert mask.tolist() == [[1, 0]]  # max(KL(0.9||0.6), KL(0.6||0.9)) = 0.226 > 0.1
    assert close(m["rollout_rs_binary_kl_max"], max(bkl(0.9, 0.6), bkl(0.6, 0.9)), 1e-6)


# --------------------------------------------------------------------------------------------- metrics
def test_offpolicy_metrics_by_hand():
    m = offpolicy_metrics(OLD, ROLLOUT, MASK)
    assert close(m["kl"], 1.5 / 5)  # mean(log p_rollout - log p_old)
    assert close(m["k3_kl"], sum(K3) / 5)
    old_mean, rollout_mean = [-3.5 / 3, -0.75], [-1.0, -0.25]
    assert close(m["training_ppl"], (E(3.5 / 3) + E(0.75)) / 2)
    assert close(m["training_log_ppl"], (3.5 / 3 + 0.75) / 2)
    assert close(m["rollout_ppl"], (E(1.0) + E(0.25)) / 2)
    diff = [r - o for r, o in zip(rollout_mean, old_mean)]  # 1/6, 1/2
    assert close(m["log_ppl_diff"], sum(diff) / 2) and close(m["log_ppl_abs_diff"], sum(diff) / 2)
    assert close(m["log_ppl_diff_max"], 0.5) and close(m["log_ppl_diff_min"], 1 / 6)
    assert close(m["ppl_ratio"], (E(diff[0]) + E(diff[1])) / 2)
    assert close(m["chi2_token"], (E(1.0) + 2 * E(-2.0) + 2) / 5 - 1)
    assert close(m["chi2_seq"], (E(-1.0) + E(-2.0)) / 2 - 1)


def test_rollout_correction_names_every_metric_as_verl():
    corr = rollout_correction(OLD, ROLLOUT, MASK, rollout_is="token", rollout_is_threshold=1.5,
                              rollout_rs="token_k1", rollout_rs_threshold=2.0)
    assert corr.mask.tolist() == [[1, 0, 1], [1, 0, 0]] and corr.weights is not None
    assert all(k.startswith("rollout_corr/") for k in corr.metrics)
    expected = {"rollout_corr/" + k for k in (
        "rollout_is_mean", "rollout_is_std", "rollout_is_max", "rollout_is_min", "rollout_is_eff_sample_size",
        "rollout_is_ratio_fraction_high", "rollout_is_ratio_fraction_low", "rollout_is_seq_mean",
        "rollout_is_seq_std", "rollout_is_seq_max", "rollout_is_seq_min", "rollout_is_seq_max_deviation",
        "rollout_is_seq_fraction_high", "rollout_is_seq_fraction_low", "rollout_rs_masked_fraction",
        "rollout_rs_seq_masked_fraction", "rollout_rs_token_k1_masked_fraction", "rollout_rs_token_k1_mean",
        "kl", "k3_kl", "training_ppl", "training_log_ppl", "rollout_ppl", "rollout_log_ppl", "log_ppl_diff",
        "log_ppl_abs_diff", "log_ppl_diff_max", "log_ppl_diff_min", "ppl_ratio", "chi2_token", "chi2_seq")}
    assert expected <= set(corr.metrics)
    assert all(math.isfinite(v) for v in corr.metrics.values())
    # Nothing configured: the mask is kept, no weights, the mismatch metrics only.
    plain = rollout_correction(OLD, ROLLOUT, MASK)
    assert plain.weights is None and torch.equal(plain.mask, MASK)
    assert not any("rollout_is" in k or "rollout_rs" in k for k in plain.metrics)
    # A batch without a trained token trains on (no metrics, nothing rejected).
    empty = rollout_correction(OLD, ROLLOUT, torch.zeros_like(MASK), rollout_is="token")
    assert empty.metrics == {} and float(empty.weights.abs().sum()) == 0.0


# -------------------------------------------------------------------------------- weights in the loss
@pytest.mark.parametrize("mode", ["vanilla", "gspo", "cispo", "gpg"])
def test_every_policy_loss_multiplies_its_token_losses_by_the_weights(mode):
    g = torch.Generator().manual_seed(3)
    old = -torch.rand(3, 4, generator=g, dtype=D) * 2
    logp = (old + 0.1 * torch.randn(3, 4, generator=g, dtype=D)).requires_grad_(True)
    adv = torch.tensor([[1.0] * 4, [-0.5] * 4, [2.0] * 4], dtype=D)
    mask = torch.tensor([[1.0, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0]], dtype=D)
    w = torch.tensor([[0.5, 1.0, 2.0, 7.0], [1.5, 0.2, 1.0, 1.0], [3.0, 1.0, 1.0, 1.0]], dtype=D)
    fn = get_policy_loss(mode)
    plain = fn(old, logp, adv, mask, loss_agg_mode="token-mean")
    weighted = fn(old, logp, adv, mask, loss_agg_mode="token-mean", rollout_is_weights=w)
    assert plain.metrics() == weighted.metrics()  # the metrics are the unweighted loss's
    if mode != "gspo":
        # With w >= 0, w times a token's loss is the token's loss with advantage A*w (each is linear
        # in A, and the clip decides by A's sign only).
        scaled = fn(old, logp, adv * w, mask, loss_agg_mode="token-mean")
        assert close(weighted.pg_loss, scaled.pg_loss, 1e-12)
    else:
        # GSPO by hand: the sequence ratio s_i = exp(mean of the row's log-ratios) on every token,
        # PPO-clipped at 0.2, times the token's weight, averaged seq-mean-token-mean.
        rows = []
        for i in range(3):
            kept = [j for j in range(4) if mask[i, j]]
            s_i = E(sum(float(logp[i, j].detach() - old[i, j]) for j in kept) / len(kept))
            a = float(adv[i, 0])
            tok = max(-a * s_i, -a * min(max(s_i, 0.8), 1.2))
            rows.append(sum(tok * float(w[i, j]) for j in kept) / len(kept))
        assert close(weighted.pg_loss, sum(rows) / 3, 1e-12)
    (grad_w,) = torch.autograd.grad(weighted.pg_loss, logp)
    assert float(grad_w[0, 3]) == 0.0  # a masked token, whatever its weight


def test_policy_losses_all_take_weights():
    for mode in policy_loss_names():
        get_policy_loss(mode)(OLD, OLD, MASK, MASK, rollout_is_weights=torch.zeros_like(MASK))


def test_reinforce_loss_is_minus_w_a_log_pi():
    logp = OLD.clone().requires_grad_(True)
    adv = torch.tensor([[1.0] * 3, [-2.0] * 3], dtype=D)
    w = torch.tensor([[0.5, 1.0, 2.0], [1.0, 3.0, 9.0]], dtype=D)
    out = reinforce_loss(ROLLOUT, logp, adv, MASK, rollout_is_weights=w)
    by_hand = -(0.5 * -1.0 + 1 * -2.0 + 2 * -0.5 + (-2.0) * 1 * -0.3 + (-2.0) * 3 * -1.2) / 5
    assert close(out.pg_loss, by_hand)
    assert close(out.ppo_kl, (-0.5 + 1.0 + 0 + 0 + 1.0) / 5)  # mean(log p_rollout - log p)
    (grad,) = torch.autograd.grad(out.pg_loss, logp)
    assert close(grad[1, 1], -(-2.0) * 3.0 / 5) and float(grad[1, 2]) == 0.0


def test_bypass_uses_the_current_policy_against_the_rollout():
    rc = RolloutCorrectionConfig(rollout_is="token", rollout_is_threshold=1.5, bypass_mode=True,
                                 loss_type="reinforce", rollout_rs="token_k1", rollout_rs_threshold=2.0)
    adv = torch.ones(2, 3, dtype=D)
    logp = OLD.clone().requires_grad_(True)
    vanilla = get_policy_loss("vanilla")
    out, metrics = corrected_policy_loss(vanilla, rc, ROLLOUT, logp, adv, MASK, rollout_log_prob=None,
                                         rollout_is_weights=None, loss_agg_mode="token-mean")
    # w = min(e^(log pi - log pi_rollout), 1.5), 0 on the two rejected tokens (|log r| = 1 > log 2)
    w = [1.5, 0.0, 1.0, 1.0, 0.0]
    lp = [-1.0, -2.0, -0.5, -0.3, -1.2]
    assert close(out.pg_loss, -sum(a * b for a, b in zip(w, lp)) / 5)
    assert close(metrics["rollout_corr/rollout_rs_masked_fraction"], 2 / 5)
    assert close(metrics["rollout_corr/kl"], 1.5 / 5)
    # ppo_clip: the configured loss with the rollout as the old policy over the kept tokens; in
    # token-mean that is the loss with the rejection as a 0/1 factor (divided by every token).
    clip = RolloutCorrectionConfig(bypass_mode=True, rollout_rs="token_k1", rollout_rs_threshold=2.0)
    out, _ = corrected_policy_loss(vanilla, clip, ROLLOUT, logp, adv, MASK, rollout_log_prob=None,
                                   rollout_is_weights=None, loss_agg_mode="token-mean", clip_ratio=0.2)
    keep = torch.tensor([[1.0, 0, 1], [1, 0, 0]], dtype=D)
    assert close(out.pg_loss, vanilla(ROLLOUT, logp, adv, MASK, rollout_is_weights=keep, clip_ratio=0.2).pg_loss)


def test_bypass_rejection_leaves_the_mask_as_verls_effective_mask():
    """Rejected tokens leave the mask the loss is taken over (verl passes the rejection's mask to the
    loss): a row's seq-mean-token-mean is the mean of its kept tokens, ppo_kl is over the kept tokens,
    and a sequence-level loss (gspo) takes its ratio over them, not over a 0 weight."""
    rc = RolloutCorrectionConfig(bypass_mode=True, rollout_rs="token_k1", rollout_rs_threshold=2.0)
    adv = torch.ones(2, 3, dtype=D)
    logp = OLD.clone().requires_grad_(True)
    vanilla = get_policy_loss("vanilla")
    out, _ = corrected_policy_loss(vanilla, rc, ROLLOUT, logp, adv, MASK, rollout_log_prob=None,
                                   rollout_is_weights=None, loss_agg_mode="seq-mean-token-mean", clip_ratio=10.0)
    # kept: row 0 tokens 0 and 2 (r = e^0.5, 1), row 1 token 0 (r = 1); L = -A r
    assert close(out.pg_loss, (-(E(0.5) + 1) / 2 - 1) / 2)
    assert close(out.ppo_kl, (-0.5 + 0 + 0) / 3)
    keep = torch.tensor([[1.0, 0, 1], [1, 0, 0]], dtype=D)
    gspo = get_policy_loss("gspo")
    out, _ = corrected_policy_loss(gspo, rc, ROLLOUT, logp, adv, MASK, rollout_log_prob=None,
                                   rollout_is_weights=None, loss_agg_mode="token-mean", clip_ratio=10.0)
    assert close(out.pg_loss, gspo(ROLLOUT, logp, adv, keep, clip_ratio=10.0).pg_loss)
    # reinforce, token-mean: -w A log pi over the kept tokens, divided by every token before rejection
    reinforce = RolloutCorrectionConfig(bypass_mode=True, loss_type="reinforce", rollout_rs="token_k1",
                                        rollout_rs_threshold=2.0)
    out, _ = corrected_policy_loss(vanilla, reinforce, ROLLOUT, logp, adv, MASK, rollout_log_prob=None,
                                   rollout_is_weights=None, loss_agg_mode="token-mean")
    assert close(out.pg_loss, (1.0 + 0.5 + 0.3) / 5)


# ---------------------------------------------------------------------------------------------- config
def test_threshold_parsing_as_verl():
    assert parse_is_threshold(2.0) == (2.0, None)
    assert parse_is_threshold("3") == (3.0, None)
    assert parse_is_threshold("0.5_5.0") == (5.0, 0.5)
    assert parse_rs_thresholds(["token_k1", "seq_max_k3"], "0.5_2.0,0.01") == {
        "token_k1": (0.5, 2.0), "seq_max_k3": (None, 0.01)}
    assert parse_rs_thresholds(["seq_mean_k1", "token_k2"], 2.0) == {"seq_mean_k1": (0.5, 2.0),
                                                                      "token_k2": (None, 2.0)}
    for bad in ("0", "5_0.5", "x", "-1", ""):
        with pytest.raises(ConfigError):
            parse_is_threshold(bad)


@pytest.mark.parametrize("section, key", [
    ({"rollout_rs": "token_k9"}, "rollout_rs"),
    ({"rollout_rs": "token_k1"}, "rollout_rs_threshold"),
    ({"rollout_rs": "token_k1,seq_max_k3", "rollout_rs_threshold": "1,2,3"}, "rollout_rs_threshold"),
    ({"rollout_rs": "token_k2", "rollout_rs_threshold": "0.5_2"}, "rollout_rs_threshold"),
    ({"rollout_is_threshold": "0.5_abc"}, "rollout_is_threshold"),
    ({"rollout_is": "geometric"}, "rollout_is"),
])
def test_config_refuses_bad_settings_naming_the_key(section, key):
    with pytest.raises(ConfigError) as exc:
        validate(Config.from_dict({"algorithm": {"rollout_correction": section}}), require_paths=False)
    assert exc.value.key == f"algorithm.rollout_correction.{key}"


def test_defaults_are_verls_and_warnings():
    rc = Config().algorithm.rollout_correction
    assert (rc.rollout_is, rc.rollout_is_threshold, rc.rollout_is_batch_normalize, rc.rollout_rs,
            rc.rollout_rs_threshold, rc.bypass_mode, rc.loss_type) == (None, 2.0, False, None, None, False,
                                                                        "ppo_clip")
    assert len(RS_OPTIONS) == 12
    cfg = Config.from_dict({"algorithm": {"rollout_correction": {"bypass_mode": True, "rollout_is": "token"}}})
    keys = [w.key for w in config_warnings(cfg)]
    assert "algorithm.rollout_correction.rollout_is" in keys  # reported only with ppo_clip in bypass
