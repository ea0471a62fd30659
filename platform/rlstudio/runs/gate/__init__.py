"""The config gate: which trainer keys a user may set (with their bounds), and which only the platform sets.

A run's trainer config reaches the platform in many ways (the new-run form's preset, fields, YAML and
overrides; the API's `config`, `config_id` and `overrides`; clone overrides; a saved config). All of
them are checked by this package, by one rule:

- A key a user changed (its value differs from what it started from: the preset, or the schema's
  default for a whole config) must be in `USER_KEYS`, and its value inside that key's `Bound`.
- Every other key (anything naming a server path, an address, code or resources) is written by the
  platform from catalog objects and the run's own record (`platform_values`); a user who sets one gets
  a `GateRefused` naming the key and saying who sets it.

Its modules, each owning one thing:

- `bounds`: `Bound`, the check of one value against it, and `GateRefused`;
- `keys`: the two lists (`USER_KEYS`, `PLATFORM_KEYS`), the loggers a user may list, and the lists as
  docs/security.md's tables (`markdown`);
- `flat`: dotted keys over the schema (`flatten`, `unflatten`, `changed_keys`, the defaults);
- `changes`: the rule applied (`check`, `check_trackers`, `check_bounds`) and `user_view`, a stored
  config back as what its user owns (the platform's keys reset to the schema defaults);
- `sizes`: the operator's bounds on one step as a whole (`StepLimits`, `check_step_size`,
  `check_validation_size`) and the loader batch against the training set (`check_train_size`);
- `disk`: the operator's bounds on a run's checkpoints (`check_checkpoints_kept`, `check_checkpoint_size`).

New code imports from the owning module.
"""
# The public path `rlstudio.runs.gate.X`: docs/security.md, docs/runs.md and docs/api.md name these as
# `gate.X`, and runs/launch.py and runs/services/lineage.py use them through `gate` (kept importable
# from here for them; each is owned by the module it comes from).
from .bounds import GateRefused
from .changes import check, check_bounds, check_trackers, user_view
from .disk import check_checkpoint_size, check_checkpoints_kept
from .flat import flatten
from .keys import PLATFORM_KEYS, TRACKER_LOGGERS, USER_KEYS, USER_LOGGERS
from .sizes import StepLimits, check_step_size, check_train_size, check_validation_size

__all__ = [
    "GateRefused", "PLATFORM_KEYS", "StepLimits", "TRACKER_LOGGERS", "USER_KEYS", "USER_LOGGERS", "check",
    "check_bounds", "check_checkpoint_size", "check_checkpoints_kept", "check_step_size", "check_trackers",
    "check_train_size", "check_validation_size", "flatten", "user_view",
]
