"""Removing a folder the platform wrote, without following a link out of where it belongs."""
from __future__ import annotations

import shutil
from pathlib import Path

from .launch import inside


def remove_tree_inside(folder: Path, root: Path) -> bool:
    """Remove `folder` and what it holds when it is a real folder (not a symlink) that lies inside
    `root` with every link on the way resolved; leave it alone otherwise (a job, or anyone who can
    write in the run's folder, may have put a link there to make a delete reach another folder).
    True when it was removed."""
    folder = Path(folder)
    if folder.is_dir() and not folder.is_symlink() and inside(folder, root):
        shutil.rmtree(folder, ignore_errors=True)
        return True
    return False
