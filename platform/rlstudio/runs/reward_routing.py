"""The launch's check that the reward `default` can score the run's datasets.

`default` picks a built-in reward by each row's data_source (trainer.rewards.default_reward_name); a
row whose data_source it does not route would fail the run at its first scored step. Before a run is
created, the first SAMPLE_ROWS converted rows of its training and validation datasets are read (the
column the trainer reads: data.reward_fn_key, else data_source) and a data_source `default` does not
route is a ConfigInvalid on `reward.name` naming it and the rewards to pick. Rows past the sample
are not read (a large dataset's launch stays quick): the trainer's own error still names any such one.

Not checked: another reward (it scores every row, whatever its data_source), an operator's reward
function (custom_reward_function.path), and the training rows when the reward function's weight is
0 beside a reward model (the trainer then leaves the rule out where it has none).
"""

from __future__ import annotations

from typing import Any

from trainer.config import Config

from .errors import ConfigInvalid

SAMPLE_ROWS = 256


def _source(row: dict[str, Any], key: str) -> str:
    return str(row.get(key) or row.get("data_source") or "")


def check_default_reward(cfg: Config, *, dataset=None, val_dataset=None) -> None:
    """ConfigInvalid("reward.name") when `default` has no reward for a data_source of the first rows
    of `dataset` (unless the rule's weight is 0 beside a reward model) or `val_dataset`."""
    if cfg.reward.name != "default" or cfg.custom_reward_function.path:
        return
    from rlstudio.catalog.selectors import dataset_rows
    from trainer.rewards import default_reward_name, registered_rewards

    rule_counts = not (cfg.reward_model.enable and float(cfg.reward_model.rule_weight) == 0.0)
    checked = [(dataset, "training")] if rule_counts else []
    checked.append((val_dataset, "validation"))
    key = cfg.data.reward_fn_key or "data_source"
    for data, role in checked:
        if data is None:
            continue
        rows = dataset_rows(dataset=data, offset=0, limit=SAMPLE_ROWS)
        unrouted = sorted(
            {s for s in (_source(r, key) for r in rows) if default_reward_name(s) is None}
        )
        if unrouted:
            names = [n for n in registered_rewards() if n != "default"]
            shown = ", ".join(repr(s) for s in unrouted[:5]) + (" ..." if len(unrouted) > 5 else "")
            raise ConfigInvalid(
                "reward.name",
                f"the reward 'default' has no reward for data_source {shown} of the {role} dataset "
                f"{data.name!r}: choose a reward function (one of {', '.join(names)}, or one your "
                "operator registered), or give the rows a data_source it routes (docs/datasets.md, Rewards)",
            )
