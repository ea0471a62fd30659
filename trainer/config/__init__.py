"""The run spec: a tree of frozen dataclasses in verl's key names (standard library only).

The trainer's configuration: every section and field with its default and help text, loading from
JSON / YAML, verl-style dotted overrides (``actor_rollout_ref.rollout.n=8``), type checking with
errors that name the key, and the cross-field checks of ``validate``. The web side imports this
package to build and check run specs, so it must never import torch (a test enforces it).

    cfg = Config.from_dict(json.load(f))          # unknown key -> ConfigError naming it
    cfg = apply_overrides(cfg, ["data.train_batch_size=8", "trainer.logger=['console']"])
    validate(cfg)                                 # cross-field checks, model/data paths demanded
    config_errors(cfg)                            # the same checks, every part's first failure
    config_warnings(cfg)                          # what runs but likely is not meant (rollout.n=1 GRPO)
    cfg.to_dict()                                 # the JSON the platform stores on a run

Where each part lives:

  fields.py             ConfigError, the field makers, checking a value against a field's type
  schema.py             the root Config and its sections; LOGGERS, the one list of sinks
  actor_rollout_ref.py  the model, rollout, actor and reference sections
  critic.py             the critic section (the value model of PPO with GAE) and its checks
  overrides.py          apply_overrides, parse_value, KEY_ALIASES, load_config
  checks.py             validate (one check per part of the spec) and resolve
  reference.py          describe_config / describe_sections / config_markdown

Generate the config reference:  python -m trainer.config --markdown > docs/config-reference.md
"""

from .actor_rollout_ref import (
    ActorConfig,
    ActorFsdpConfig,
    ActorRolloutRefConfig,
    ModelConfig,
    MultiTurnConfig,
    OptimConfig,
    PolicyLossConfig,
    RefConfig,
    RefFsdpConfig,
    RolloutConfig,
    ValKwargsConfig,
)
from .checks import ConfigWarning, config_errors, config_warnings, resolve, validate
from .fields import ConfigError
from .overrides import KEY_ALIASES, apply_overrides, load_config, parse_value
from .reference import config_markdown, describe_config, describe_sections
from .rollout_correction import RolloutCorrectionConfig
from .schema import (
    LOGGERS,
    AlgorithmConfig,
    Config,
    CustomRewardFunctionConfig,
    DataConfig,
    FilterGroupsConfig,
    KLCtrlConfig,
    OverlongBufferConfig,
    ReportConfig,
    RewardConfig,
    RewardModelConfig,
    ToolsConfig,
    TrainerConfig,
)

__all__ = [
    "KEY_ALIASES",
    "LOGGERS",
    "ActorConfig",
    "ActorFsdpConfig",
    "ActorRolloutRefConfig",
    "AlgorithmConfig",
    "Config",
    "ConfigError",
    "CustomRewardFunctionConfig",
    "DataConfig",
    "FilterGroupsConfig",
    "KLCtrlConfig",
    "ModelConfig",
    "MultiTurnConfig",
    "OptimConfig",
    "OverlongBufferConfig",
    "PolicyLossConfig",
    "RefConfig",
    "RefFsdpConfig",
    "ReportConfig",
    "RewardConfig",
    "RewardModelConfig",
    "RolloutCorrectionConfig",
    "RolloutConfig",
    "ToolsConfig",
    "TrainerConfig",
    "ValKwargsConfig",
    "apply_overrides",
    "config_markdown",
    "describe_config",
    "describe_sections",
    "load_config",
    "parse_value",
    "resolve",
    "validate",
    "config_errors",
    "ConfigWarning",
    "config_warnings",
]
