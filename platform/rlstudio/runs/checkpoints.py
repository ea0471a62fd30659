"""A run's committed checkpoints: the global_step_N folders in its own folder, by step.

Read by the runs app (a fork picks one of them), evaluations, exports and the playground; only the
platform's record of where the run writes (`launch.run_folder`) is read, never a path a user typed.
"""
from __future__ import annotations

from pathlib import Path

from trainer.step_dirs import STEP_DIR  # not trainer.checkpoint: it loads torch

from .launch import inside, run_folder


def checkpoint_steps(run) -> dict[int, Path]:
    """The committed step folders of a run (global_step_N directly in its own folder, symlinks that
    lead out of it ignored, each with its `actor` folder), by step, oldest first. The trainer writes a
    step's folder as `global_step_N.tmp` and renames it into place, so every one listed is whole."""
    folder = run_folder(run)
    if not folder.is_dir():
        return {}
    out = {}
    for path in folder.iterdir():
        m = STEP_DIR.match(path.name)
        if m and path.is_dir() and inside(path, folder) and (path / "actor").is_dir():
            out[int(m.group(1))] = path
    return dict(sorted(out.items()))
