"""The reward of a trajectory from its parts: the reward function's (rule) score, the reward model's
score, the tools' rewards and DAPO's overlong penalty (reward_model.* weights; pure functions).

    score  = rule_weight * rule + rm_weight * rm + tool_reward_weight * sum(tool rewards)
    reward = score + overlong penalty (reward_model.overlong_buffer)

A part that is absent (no reward model, or no rule for the data source when rule_weight is 0)
counts 0. verl's reward manager, by contrast, returns the reward model's scores instead of the rule
when both exist: rule_weight=0 gives that. When the reward is a combination (a reward model, or
weights other than the rule alone), every part is recorded in the trajectory's reward_extra under
`PART_KEYS`, so each sample event (and the transcript page) shows them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PART_KEYS = ("rule_score", "rm_score", "tool_reward", "overlong_reward", "total")


@dataclass(frozen=True)
class Weights:
    rule: float = 1.0
    rm: float = 1.0
    tool: float = 0.0
    use_rm: bool = False

    @classmethod
    def of(cls, rm_cfg: Any) -> "Weights":
        """The weights of a reward_model config section."""
        return cls(rule=float(rm_cfg.rule_weight), rm=float(rm_cfg.rm_weight), tool=float(rm_cfg.tool_reward_weight),
                   use_rm=bool(rm_cfg.enable))

    @property
    def rule_alone(self) -> bool:
        """The reward is the rule's score alone (nothing to combine, no parts recorded)."""
        return not self.use_rm and self.rule == 1.0 and self.tool == 0.0


def weighted_score(w: Weights, *, rule: float | None, rm: float | None, tool_rewards: dict[str, float] | None) -> float:
    """The combined score before the overlong penalty; an absent part counts 0."""
    tool = sum(float(v) for v in (tool_rewards or {}).values())
    total = w.tool * tool
    if rule is not None:
        total += w.rule * float(rule)
    if w.use_rm and rm is not None:
        total += w.rm * float(rm)
    return total


def parts(w: Weights, *, rule: float | None, rm: float | None, tool_rewards: dict[str, float] | None,
          penalty: float, reward: float) -> dict[str, Any]:
    """The reward_extra entries of a combined reward (None for a part that was not computed)."""
    return {"rule_score": None if rule is None else float(rule),
            "rm_score": None if rm is None else float(rm),
            "tool_reward": sum(float(v) for v in (tool_rewards or {}).values()),
            "overlong_reward": float(penalty),
            "total": float(reward)}


def part_metrics(extras: list[dict[str, Any]]) -> dict[str, float]:
    """reward_model/<part>/mean|max|min over the step's trajectories, for the parts they carry."""
    out: dict[str, float] = {}
    for key in ("rm_score", "rule_score", "tool_reward"):
        vals = [float(e[key]) for e in extras if isinstance(e.get(key), (int, float)) and not isinstance(e.get(key), bool)]
        if vals:
            out[f"reward_model/{key}/mean"] = sum(vals) / len(vals)
            out[f"reward_model/{key}/max"] = max(vals)
            out[f"reward_model/{key}/min"] = min(vals)
    return out
