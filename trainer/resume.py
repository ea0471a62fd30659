"""The driver's side of checkpoints: what a run saves at a step, and what it restores on resume.

`save_run` writes one step's checkpoint (trainer.checkpoint's layout: every worker its actor shards,
and its critic shards with gae, through the worker group, the loader position, the RNG states, the driver's epoch / emitter seq /
KL coefficient, the config), prunes old ones to trainer.max_actor_ckpt_to_keep under the operator's
trainer.max_ckpt_to_keep_cap, reports it as a checkpoint event and holds the output folder to
trainer.disk_budget_gb (trainer.checkpoint.enforce_disk_budget: DiskBudgetExceeded fails the run,
except after the checkpoint a run ends on anyway, a stop's or the last step's: kept, with a warning).
`resume_run` finds the checkpoint trainer.resume_mode asks for and, when there is one, loads the actor
(and the critic) into every worker, the loader position and the RNG states, and returns the driver's
state for trainer.loop.Trainer to take over. A fork (trainer.resume_fork) loads the same, then takes the
config's fork-changeable values over the restored ones (trainer.config.fork): the optimizers' lr,
weight decay and schedule in every worker, and a changed algorithm.kl_ctrl.kl_coef.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer import checkpoint as ckpt
from trainer.config import Config
from trainer.config.fork import FORK_CHANGEABLE, dotted


@dataclass(frozen=True)
class Saved:
    """A checkpoint written: its step folder, and the output folder's bytes after pruning."""

    path: Path
    folder_bytes: int


def save_run(out_dir: Path, step: int, *, group: Any, loader: Any, trainer_state: dict[str, Any], cfg: Config,
             emitter: Any, final: bool = False, ends: str = "stopped") -> Saved:
    """Save step `step` under `out_dir`, prune, emit the checkpoint event, then measure the folder
    against trainer.disk_budget_gb (over it: pruned to the newest checkpoint, with a warning; still
    over: ckpt.DiskBudgetExceeded, after the checkpoint event, so the platform has it).

    `final`: the run ends after this checkpoint whatever it holds: a stop's (`ends` "stopped") or the
    last step's (`ends` "succeeded": training is complete). Still over the budget with only this
    checkpoint left, it is kept (committed: a stopped run stays resumable from its last state) and a
    warning naming the budget and the size (no path) says so instead of DiskBudgetExceeded: the run
    ends as `ends` says, not failed."""
    path = ckpt.save_checkpoint(out_dir, step,
                                # the critic (gae) beside the actor, in the same uncommitted step folder
                                write_actor=lambda d: group.call("save", path=str(d), critic_path=str(d.parent / "critic")),
                                loader_state=loader.state_dict(),
                                trainer_state=trainer_state,
                                config=cfg.to_dict())
    tr = cfg.trainer
    ckpt.prune(out_dir, ckpt.keep_count(tr.max_actor_ckpt_to_keep, tr.max_ckpt_to_keep_cap))
    emitter.checkpoint(step, str(path))
    try:
        use = ckpt.enforce_disk_budget(out_dir, tr.disk_budget_gb)
    except ckpt.DiskBudgetExceeded as exc:
        if not final:
            raise
        if ends == "stopped":
            emitter.log("warning", f"{exc.over}. The run was stopping: it ends stopped with that checkpoint kept; "
                                   "a checkpoint this size is over the budget on its own, so a run resumed from "
                                   "it fails at its first checkpoint unless the budget is raised")
        else:  # the end-of-run export still follows (trainer.loop.Trainer.fit): the run's product
            export = ("; the Hugging Face export (trainer.export_hf) is still written beside it, over the "
                      "budget too" if tr.export_hf else "")
            emitter.log("warning", f"{exc.over}. It is the last step's checkpoint and training is complete: the "
                                   f"run ends {ends} with that checkpoint kept{export}")
        return Saved(path, exc.size)
    if use.pruned:
        emitter.log("warning", f"the run's folder was over its disk budget of {tr.disk_budget_gb:g} GB "
                               f"(trainer.disk_budget_gb): pruned {len(use.pruned)} older checkpoint(s), "
                               f"{use.size / ckpt.GIB:.2f} GB left")
    return Saved(path, use.size)


@dataclass
class Resumed:
    """The driver's state read back from a checkpoint; `forked`: a fork's, with `changed` the
    fork-changeable keys whose values differ from the checkpoint's config."""

    path: Path
    global_step: int
    epoch: int
    kl_coef: float
    forked: bool = False
    changed: tuple[str, ...] = ()


def fork_changes(saved: dict[str, Any], cfg: Config) -> tuple[str, ...]:
    """The keys of trainer.config.fork.FORK_CHANGEABLE whose value in `cfg` differs from the checkpoint's
    config `saved` (compared as JSON: a checkpoint's config.json holds lists where `cfg` may hold tuples)."""
    now = json.loads(json.dumps(cfg.to_dict(), default=str))
    return tuple(key for key in FORK_CHANGEABLE if dotted(saved, key) != dotted(now, key))


def resume_run(out_dir: Path, cfg: Config, *, group: Any, loader: Any, kl_coef: float) -> Resumed | None:
    """Restore the checkpoint trainer.resume_mode / resume_from_path name (None: start fresh).

    Every rank loads its shards, then a weight sync; the loader and the RNG states are restored here.
    `kl_coef` is the controller's value, kept when the checkpoint has none. A fork (trainer.resume_fork)
    then takes `cfg`'s lr, weight decay and schedule in every worker, and its kl_coef when it differs
    from the checkpoint's config (else the controller's restored value, as a resume).
    """
    tr = cfg.trainer
    path = ckpt.resolve_resume(out_dir, mode=tr.resume_mode, resume_from_path=tr.resume_from_path)
    if path is None:
        return None
    state = ckpt.load_checkpoint(path)
    fork = bool(tr.resume_fork)
    # every rank its shards (the critic's too, with gae), then a weight sync
    group.call("load", path=str(state["actor"]["dir"]), critic_path=str(Path(path) / "critic"), fork=fork)
    loader.load_state_dict(state["loader"])
    ckpt.set_rng_state(state["rng"])
    ts = state["trainer_state"]
    restored_kl = float(ts.get("kl_coef", kl_coef))
    changed = fork_changes(state["config"], cfg) if fork else ()
    if "algorithm.kl_ctrl.kl_coef" in changed:
        restored_kl = float(cfg.algorithm.kl_ctrl.kl_coef)
    return Resumed(path=path, global_step=int(ts["global_step"]), epoch=int(ts.get("epoch", 0)),
                   kl_coef=restored_kl, forked=fork, changed=changed)
