"""actor/entropy as verl reports it: over the trained tokens only, aggregated by actor.loss_agg_mode.

verl takes the old-log-prob pass's entropies over its response_mask (1 on the tokens the model
generated, 0 on tool replies) and aggregates them with agg_loss(loss_agg_mode). A multi-turn step's
tool replies must not pull the figure towards the policy's entropy on text it never chose.
"""
from __future__ import annotations

import pytest
import torch

from trainer.config import Config, apply_overrides
from trainer.scoring import build_experience
from trainer.step_report import step_metrics
from trainer.types import PromptItem, Trajectory


def _experience():
    prompt = PromptItem(uid="g", index=0, messages=[{"role": "user", "content": "q"}], prompt_ids=[1, 2])
    # Row 0: assistant, tool reply, assistant again; row 1: one assistant token.
    trajs = [Trajectory(uid="g", index=0, prompt=prompt, prompt_ids=[1, 2], response_ids=[5, 6, 7, 8, 9],
                        loss_mask=[1, 1, 0, 0, 1], num_turns=2, tool_calls=1),
             Trajectory(uid="g", index=1, prompt=prompt, prompt_ids=[1, 2], response_ids=[5],
                        loss_mask=[1], num_turns=1)]
    exp = build_experience(trajs)
    b = exp.batch
    b.token_level_rewards = b.token_level_scores
    b.advantages = torch.zeros_like(b.loss_mask)
    b.returns = torch.zeros_like(b.loss_mask)
    # Trained tokens: entropy 1 in row 0, 3 in row 1; the tool reply's two tokens: 9.
    exp.entropy = torch.tensor([[1.0, 1.0, 9.0, 9.0, 1.0], [3.0, 0.0, 0.0, 0.0, 0.0]])
    return exp


@pytest.mark.parametrize("mode, expected", [
    ("token-mean", (1 + 1 + 1 + 3) / 4),
    ("seq-mean-token-mean", (1 + 3) / 2),
    ("seq-mean-token-sum", (3 + 3) / 2),
    ("seq-mean-token-sum-norm", (3 + 3) / 2 / 8),  # S = rollout.response_length
])
def test_entropy_is_over_trained_tokens_by_the_loss_aggregation(mode, expected):
    cfg = apply_overrides(Config(), {"actor_rollout_ref.actor.loss_agg_mode": mode,
                                     "actor_rollout_ref.rollout.response_length": 8})
    m = step_metrics(cfg, _experience(), {}, {}, {}, step=1, epoch=0, device=torch.device("cpu"),
                     filtered_overlong_prompts=0)
    assert m["actor/entropy"] == pytest.approx(expected)


@pytest.mark.parametrize("mode, expected", [
    ("token-mean", (1 + 1 + 1 + 3) / 4),
    ("seq-mean-token-mean", (1 + 3) / 2),
    ("seq-mean-token-sum", (3 + 3) / 2),
])
def test_entropy_skips_rows_without_trained_tokens_and_counts_rejected_ones(mode, expected):
    """verl takes actor/entropy at the old-log-prob pass, before the rollout correction, with agg_loss
    and no global batch size: a row without trained tokens is not in a seq-mean, and tokens the
    correction rejects later still count."""
    prompt = PromptItem(uid="g", index=0, messages=[{"role": "user", "content": "q"}], prompt_ids=[1, 2])
    exp = _experience()
    empty = Trajectory(uid="g", index=2, prompt=prompt, prompt_ids=[1, 2], response_ids=[5, 6], loss_mask=[0, 0])
    exp = build_experience([*exp.trajectories, empty])
    b = exp.batch
    b.token_level_rewards = b.token_level_scores
    b.advantages = torch.zeros_like(b.loss_mask)
    b.returns = torch.zeros_like(b.loss_mask)
    exp.entropy = torch.tensor([[1.0, 1.0, 9.0, 9.0, 1.0], [3.0, 0, 0, 0, 0], [7.0, 7.0, 0, 0, 0]])
    exp.uncorrected_loss_mask = b.loss_mask.clone()
    b.loss_mask = b.loss_mask.clone()
    b.loss_mask[1] = 0.0  # the correction rejected row 1 after the entropies were taken
    cfg = apply_overrides(Config(), {"actor_rollout_ref.actor.loss_agg_mode": mode,
                                     "actor_rollout_ref.rollout.response_length": 8})
    m = step_metrics(cfg, exp, {}, {}, {}, step=1, epoch=0, device=torch.device("cpu"),
                     filtered_overlong_prompts=0)
    assert m["actor/entropy"] == pytest.approx(expected)
