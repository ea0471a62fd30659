"""Checkpoints: save, find, load, prune, the output folder's disk budget, and the final Hugging Face export.

Layout under `trainer.default_local_dir`:
  global_step_N/actor/              the workers' torch.distributed.checkpoint (DCP) folder: every rank
                                    writes its FSDP shards of model + optimizer (__*.distcp, .metadata),
                                    rank 0 the LR scheduler (scheduler.pt); loadable at another world
                                    size. (`read_actor_model` consolidates the model for inspection.)
  or, from `actor_state=` (a plain in-memory state): actor/model.pt and actor/optim.pt
  global_step_N/critic/             the value model with algorithm.adv_estimator=gae, the same way as
                                    actor/ (DCP shards of model + optimizer, scheduler.pt), written by
                                    the workers beside actor/ (trainer.resume.save_run)
  global_step_N/extra_state.pt      RNG states (python, numpy, torch, cuda)
  global_step_N/data.pt             prompt loader state (epoch, position, seed)
  global_step_N/trainer_state.json  step, epoch, emitter seq, KL controller value
  global_step_N/config.json         the run's config
  latest_checkpointed_iteration.txt N   <- written LAST, atomically: the commit marker
  huggingface/                      final export (model + tokenizer, from_pretrained-loadable)

A step folder is written as `global_step_N.tmp` and renamed into place, then the marker is replaced
with os.replace: a crash at any point leaves either the previous checkpoint or the new one committed,
never a half-written one that resume would pick up.

After each save the trainer keeps `keep_count` checkpoints (the user's trainer.max_actor_ckpt_to_keep
under the operator's trainer.max_ckpt_to_keep_cap) and holds the folder to trainer.disk_budget_gb
(`enforce_disk_budget`): pruning never removes the newest step folder nor the committed one. (What an
over-budget folder does to the run, failed or, for the checkpoint it ends on, a stop's or the last
step's, stopped or succeeded with a warning: trainer.resume.save_run.)
"""
from __future__ import annotations

import json
import os
import random
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from trainer.step_dirs import STEP_DIR

MARKER = "latest_checkpointed_iteration.txt"
GIB = 2**30  # the "GB" of trainer.disk_budget_gb and the perf/run_folder_gb metric


def rng_state() -> dict[str, Any]:
    """The process's RNG states; CUDA's only when this process already uses CUDA (a CPU run, or a
    Ray driver whose workers hold the GPUs, must not open a CUDA context on every visible GPU)."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def step_dir(root: Path, step: int) -> Path:
    return Path(root) / f"global_step_{step}"


def save_checkpoint(root: Path, step: int, *, actor_state: dict[str, Any] | None = None,
                    loader_state: dict[str, Any], trainer_state: dict[str, Any], config: dict[str, Any],
                    write_actor: Callable[[Path], None] | None = None) -> Path:
    """Write global_step_<step>/ then commit it with the marker. Returns the step folder.

    The actor is written either by `write_actor(actor_dir)` (the worker group's sharded DCP save,
    all ranks into the same folder: a filesystem every worker sees) or from `actor_state`.
    """
    if (actor_state is None) == (write_actor is None):
        raise ValueError("give exactly one of actor_state / write_actor")
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    final = step_dir(root, step)
    tmp = root / f"global_step_{step}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    (tmp / "actor").mkdir(parents=True)
    if write_actor is not None:
        write_actor(tmp / "actor")
    else:
        torch.save(actor_state["model"], tmp / "actor" / "model.pt")
    if actor_state is not None and "optimizer" in actor_state:
        torch.save({"optimizer": actor_state["optimizer"], "scheduler": actor_state.get("scheduler")},
                   tmp / "actor" / "optim.pt")
    torch.save(rng_state(), tmp / "extra_state.pt")
    torch.save(loader_state, tmp / "data.pt")
    (tmp / "trainer_state.json").write_text(json.dumps({"global_step": step, **trainer_state}, indent=1))
    (tmp / "config.json").write_text(json.dumps(config, indent=1, default=str))
    if final.exists():  # re-saving the same step (e.g. stop right after a periodic save)
        shutil.rmtree(final)
    os.replace(tmp, final)
    marker_tmp = root / (MARKER + ".tmp")
    marker_tmp.write_text(str(step))
    os.replace(marker_tmp, root / MARKER)  # the commit point
    return final


def latest_step(root: Path) -> int | None:
    """The committed step (from the marker), or None when there is no committed checkpoint."""
    marker = Path(root) / MARKER
    if not marker.exists():
        return None
    step = int(marker.read_text().strip())
    if not step_dir(root, step).is_dir():
        raise FileNotFoundError(f"{marker} names step {step} but {step_dir(root, step)} is missing")
    return step


def resolve_resume(root: Path, *, mode: str, resume_from_path: str | None) -> Path | None:
    """trainer.resume_mode: auto (latest committed, if any) | disable | resume_path (explicit folder)."""
    if mode == "disable":
        return None
    if mode == "auto":
        step = latest_step(root)
        return step_dir(root, step) if step is not None else None
    if mode == "resume_path":
        if not resume_from_path or not STEP_DIR.match(Path(resume_from_path).name):
            raise ValueError("trainer.resume_mode=resume_path needs trainer.resume_from_path pointing at a "
                             f"global_step_N folder, got {resume_from_path!r}")
        path = Path(resume_from_path)
        if not path.is_dir():
            raise FileNotFoundError(f"trainer.resume_from_path {path} does not exist")
        return path
    raise ValueError(f"trainer.resume_mode must be auto|disable|resume_path, got {mode!r}")


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Everything save_checkpoint wrote, as a dict (RNG states not yet applied). A sharded actor is not
    read here: `actor["dir"]` is the folder the workers load from."""
    path = Path(path)
    actor: dict[str, Any] = {"dir": path / "actor"}
    if (path / "actor" / "model.pt").exists():
        actor["model"] = torch.load(path / "actor" / "model.pt", map_location="cpu", weights_only=True)
    optim_path = path / "actor" / "optim.pt"
    if optim_path.exists():
        opt = torch.load(optim_path, map_location="cpu", weights_only=False)
        actor["optimizer"], actor["scheduler"] = opt["optimizer"], opt["scheduler"]
    return {"actor": actor,
            "rng": torch.load(path / "extra_state.pt", map_location="cpu", weights_only=False),
            "loader": torch.load(path / "data.pt", weights_only=False),
            "trainer_state": json.loads((path / "trainer_state.json").read_text()),
            "config": json.loads((path / "config.json").read_text())}


def prune(root: Path, keep: int | None) -> list[Path]:
    """Delete all but the newest `keep` step folders (never the newest, never the committed one);
    `keep` None or <= 0: none."""
    if not keep or keep <= 0:
        return []
    root = Path(root)
    committed = latest_step(root)
    steps = sorted(int(m.group(1)) for p in root.iterdir() if (m := STEP_DIR.match(p.name)) and p.is_dir())
    doomed = [s for s in steps[:-keep] if s != committed] if len(steps) > keep else []
    removed = []
    for s in doomed:
        shutil.rmtree(step_dir(root, s))
        removed.append(step_dir(root, s))
    return removed


def keep_count(keep: int | None, cap: int | None) -> int | None:
    """Checkpoints the trainer keeps: the user's trainer.max_actor_ckpt_to_keep under the operator's
    trainer.max_ckpt_to_keep_cap; None (either unset) is no bound on its side, so None = keep all."""
    bounds = [n for n in (keep, cap) if n is not None and n > 0]
    return min(bounds) if bounds else None


def folder_bytes(root: Path) -> int:
    """Bytes of the regular files under `root` (their sizes; symlinks are neither followed nor
    counted; a file removed while it is walked counts nothing)."""
    total = 0
    for dirpath, _dirs, files in os.walk(root, followlinks=False):
        for name in files:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except FileNotFoundError:
                continue
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
    return total


class DiskBudgetExceeded(RuntimeError):
    """The output folder holds more than trainer.disk_budget_gb with only its newest checkpoint left.

    `over` says that much (the folder's size and the budget, no path); the message adds that the run
    stops here (it fails), its newest checkpoint kept."""

    def __init__(self, size: int, budget_gb: float):
        self.over = (f"the run's folder holds {size / GIB:.2f} GB with only its newest checkpoint kept, more "
                     f"than its disk budget of {budget_gb:g} GB (trainer.disk_budget_gb, set by the platform "
                     f"from RLSTUDIO_RUN_DISK_BUDGET_GB)")
        super().__init__(f"{self.over}; the run stops here, its newest checkpoint kept")
        self.size, self.budget_gb = size, budget_gb


@dataclass(frozen=True)
class DiskUse:
    """The output folder after a checkpoint: its bytes, and the step folders pruned to fit the budget."""

    size: int
    pruned: list[Path]


def enforce_disk_budget(root: Path, budget_gb: float | None) -> DiskUse:
    """Hold `root` to `budget_gb` GiB (None: no budget, only measured): over it, every checkpoint but
    the newest (and the committed one) is pruned; still over, DiskBudgetExceeded."""
    size = folder_bytes(root)
    if budget_gb is None or size <= budget_gb * GIB:
        return DiskUse(size, [])
    pruned = prune(root, 1)
    size = folder_bytes(root)
    if size > budget_gb * GIB:
        raise DiskBudgetExceeded(size, budget_gb)
    return DiskUse(size, pruned)


class CheckpointGone(FileNotFoundError):
    """A checkpoint asked for (an evaluation, an export, the playground) is no longer on disk: its run
    pruned it meanwhile. The message names the step, not the server's path."""

    def __init__(self, step_path: Path):
        m = STEP_DIR.match(Path(step_path).name)
        what = f"the checkpoint of step {m.group(1)}" if m else f"the checkpoint {Path(step_path).name!r}"
        super().__init__(f"{what} is no longer on disk: its run pruned it (a run keeps "
                         "trainer.max_actor_ckpt_to_keep checkpoints, at most the platform's cap); choose a newer step")


def require_actor(step_path: Path) -> Path:
    """The checkpoint's actor/ folder; CheckpointGone when it is not there."""
    actor = Path(step_path) / "actor"
    if not actor.is_dir():
        raise CheckpointGone(step_path)
    return actor


def read_actor_model(step_path: Path) -> dict[str, torch.Tensor]:
    """The consolidated model state of a checkpoint's actor (plain model.pt or a DCP folder);
    CheckpointGone when it is missing, or removed while being read."""
    actor = require_actor(step_path)
    try:
        if (actor / "model.pt").exists():
            return torch.load(actor / "model.pt", map_location="cpu", weights_only=True)
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

        with tempfile.TemporaryDirectory() as tmp:
            dcp_to_torch_save(actor, Path(tmp) / "full.pt")
            return torch.load(Path(tmp) / "full.pt", map_location="cpu", weights_only=False)["model"]
    except Exception:  # torch's DCP reader wraps a vanished file in its own exception type
        if not actor.is_dir():
            raise CheckpointGone(step_path) from None
        raise


def export_hf(model: Any, tokenizer: Any, out_dir: Path, *, state_dict: dict[str, Any] | None = None) -> Path:
    """Save model + tokenizer with save_pretrained (safetensors) into out_dir (replaced atomically).

    `state_dict`: the full weights to write (an FSDP module's own state dict holds only shards)."""
    out_dir = Path(out_dir)
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    if state_dict is not None:
        model.save_pretrained(tmp, state_dict=state_dict)
    else:
        model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    os.replace(tmp, out_dir)
    return out_dir
