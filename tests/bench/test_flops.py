"""bench/flops.py: matmul FLOP counts of a GRPO step against counts worked out by hand for a toy model.

Toy model: hidden 4, 1 layer, 2 heads of dim 2, 1 KV head, FFN 8, vocab 10. Per token and layer the
projections are q 4x4, k 4x2, v 4x2, o 4x4, gate 4x8, up 4x8, down 8x4: sum K*N = 144, so 288 FLOPs.
Attention: QK^T and AV each cost 2 * head_dim * heads = 8 FLOPs per (query, visible position) pair.
LM head: 2 * 4 * 10 = 80 FLOPs per logit row.
"""
import math

import pytest

from bench import flops  # bench/ is a namespace package on the pytest pythonpath (".")

TOY = flops.ModelShape(hidden=4, layers=1, heads=2, kv_heads=1, head_dim=2, ffn=8, vocab=10)


def total(work, phase=None):
    return sum(w.flops for w in work if phase is None or w.phase == phase)


def test_from_hf_config_reads_qwen2_fields():
    class Cfg:
        hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads = 4, 1, 2, 1
        intermediate_size, vocab_size = 8, 10

    assert flops.ModelShape.from_hf_config(Cfg()) == TOY


def test_scoring_forward_one_sequence():
    # prompt 3 + response 2 = 5 tokens: linear 5*288 = 1440; attention 2 ops * 8 * (1+2+3+4+5) = 240;
    # LM head on the 2 response positions: 2*80 = 160.
    w = flops.scoring_work(TOY, [3], [2], phase="ref")
    b = flops.breakdown(w)["ref"]
    assert (b["linear"], b["attention"], b["lm_head"], b["total"]) == (1440, 240, 160, 1840)


def test_rollout_prefill_and_cached_decode():
    # prefill 3 tokens: 864 + 2*8*(1+2+3)=96 + one logit row 80 = 1040;
    # one decode step (token 2 sees 4 positions): 288 + 2*8*4=64 + 80 = 432.
    w = flops.rollout_work(TOY, [3], [2])
    b = flops.breakdown(w)["rollout"]
    assert (b["linear"], b["attention"], b["lm_head"], b["total"]) == (1152, 160, 160, 1472)


def test_ragged_batch():
    # rows (P, R) = (3, 2) and (2, 1).
    # rollout: prefill 5 tokens 1440, attention 2*8*(6+3)=144, 2 logit rows 160; one decode token for
    # row 1 only (sees 4): 288 + 64 + 80.  Total 2176.
    assert total(flops.rollout_work(TOY, [3, 2], [2, 1])) == 2176
    # scoring: 8 tokens 2304, attention 2*8*(15+6)=336, 3 logit rows 240.  Total 2880.
    assert total(flops.scoring_work(TOY, [3, 2], [2, 1], phase="ref")) == 2880


def test_step_work_phases_and_backward_is_twice_forward():
    w = flops.step_work(TOY, [3], [2], with_ref=True, with_old_log_prob=False)
    b = flops.breakdown(w)
    assert list(b) == ["rollout", "ref", "policy_fwd", "policy_bwd", "total"]
    assert b["policy_fwd"]["total"] == 1840 and b["policy_bwd"]["total"] == 3680
    assert b["total"]["total"] == 1472 + 1840 + 1840 + 3680
    w2 = flops.step_work(TOY, [3], [2], with_ref=False, with_old_log_prob=True)
    b2 = flops.breakdown(w2)
    assert "ref" not in b2 and b2["old_log_prob"]["total"] == 1840


def test_backward_shapes_are_the_operand_gradients():
    fwd = [flops.Work("policy_fwd", "linear", (1, 5, 4, 8), 320.0)]
    bwd = flops.backward_of(fwd)
    assert [w.shape for w in bwd] == [(1, 5, 8, 4), (1, 4, 5, 8)]
    assert sum(w.flops for w in bwd) == 640.0


def test_compute_floor_sums_flops_over_rates():
    w = [flops.Work("ref", "linear", (1, 2, 3, 4), 100.0), flops.Work("ref", "lm_head", (1, 5, 6, 7), 300.0),
         flops.Work("rollout", "linear", (1, 2, 3, 4), 50.0)]
    rates = {((1, 2, 3, 4), "float32"): 100.0, ((1, 5, 6, 7), "float32"): 30.0}
    floor, per_phase, _ = flops.compute_floor(w, "float32", rates=rates)
    assert per_phase == {"ref": 11.0, "rollout": 0.5}
    assert floor == 11.5
    assert flops.effective_rate(w, per_phase) == pytest.approx(450 / 11.5)


def test_measure_rate_is_a_plausible_rate():
    import torch

    torch.set_num_threads(1)
    r = flops.measure_rate((1, 64, 128, 128), torch.float32, min_time_s=0.01, repeats=2)
    assert math.isfinite(r) and 1e8 < r < 1e13  # 0.1 GFLOP/s .. 10 TFLOP/s on one core
    rb = flops.measure_rate((8, 4, 32, 16), torch.float32, min_time_s=0.01, repeats=2)
    assert math.isfinite(rb) and rb > 1e6


def test_step_work_rejects_bad_lengths():
    with pytest.raises(ValueError):
        flops.step_work(TOY, [3], [2, 1])


def test_shared_prompt_counts_each_prompt_once():
    # Two trajectories of one 3-token prompt (group=2), responses 2 and 1 (trainer/workers/prefix.py).
    # Scoring: the prompt runs once (3 tokens) and each row feeds its response but the last token:
    # 1 + 0 tokens; linear 4*288 = 1152; attention 2*8*(1+2+3) + 2*8*4 = 160; logit rows = 2+1 = 3: 240.
    b = flops.breakdown(flops.scoring_work(TOY, [3, 3], [2, 1], phase="ref", group=2))["ref"]
    assert (b["linear"], b["attention"], b["lm_head"], b["total"]) == (1152, 160, 240, 1552)
    # Rollout: one prefill of the prompt (1040, its last row gives both first tokens' logits), then the
    # one decode token of row 0 (432): the same as a single trajectory of (3, 2).
    assert total(flops.rollout_work(TOY, [3, 3], [2, 1], group=2)) == 1472
    # Without sharing, the same rows cost more, and group must divide the rows.
    assert total(flops.scoring_work(TOY, [3, 3], [2, 1], phase="ref")) > 1552
    with pytest.raises(ValueError):
        flops.step_work(TOY, [3, 3, 3], [2, 1, 1], group=2)
