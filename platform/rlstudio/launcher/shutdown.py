"""The launcher's first step on Ctrl-C: stop the active runs with a checkpoint, before any child stops.

The launcher never imports Django: it runs `manage.py rlstudio_stop_runs --wait S` as a one-shot child
with the children's environment (like the bootstrap), relays the command's lines (one per run) to the
terminal as they come, and gives up the wait when `skip()` says so (a second Ctrl-C). S is
RLSTUDIO_SHUTDOWN_STOP_S (default 60; 0: no run is stopped and nothing is waited for). A relayed line
is said with its control characters escaped (`rlstudio.text.terminal_safe`): the command's lines hold
run names, which are users' text.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable, Mapping

from rlstudio.text import terminal_safe

from .supervisor import Supervisor

ENV = "RLSTUDIO_SHUTDOWN_STOP_S"
DEFAULT_S = 60.0
# Beyond the wait itself: Django's start, the stop requests, the last lines.
SLACK_S = 30.0


def shutdown_stop_seconds(environ: Mapping[str, str]) -> float:
    """RLSTUDIO_SHUTDOWN_STOP_S as seconds (SystemExit naming it for a value that is not a number >= 0)."""
    raw = (environ.get(ENV) or "").strip()
    if not raw:
        return DEFAULT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also NaN
        raise SystemExit(f"[rlstudio] {ENV}={raw!r} is not a number of seconds >= 0")
    return value


class LogRelay:
    """Says each complete line appended to a log after the point it was made at (the child's lines,
    without the supervisor's `=== date argv` header)."""

    def __init__(self, path: Path, say: Callable[[str], None]) -> None:
        self.path, self.say = path, say
        self.offset = path.stat().st_size if path.exists() else 0
        self.partial = b""

    def __call__(self) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return
        self.offset += len(data)
        *lines, self.partial = (self.partial + data).split(b"\n")
        for line in lines:
            text = line.decode(errors="replace").rstrip()
            if text and not text.startswith("=== "):
                self.say(f"  {terminal_safe(text)}")


def stop_runs(sup: Supervisor, *, env: dict[str, str], cwd: Path, manage_py: Path, wait_s: float,
              skip: Callable[[], bool], say: Callable[[str], None]) -> str:
    """Run the stop command to its end (or until `skip()`); what happened, in a word: "done",
    "skipped" (a second signal), "failed" (a non-zero exit) or "timeout"."""
    relay = LogRelay(sup.log_dir / "shutdown.log", say)
    argv = [sys.executable, str(manage_py), "rlstudio_stop_runs", "--wait", f"{wait_s:g}"]
    try:
        rc = sup.run_to_end("shutdown", argv, env=env, cwd=cwd, timeout=wait_s + SLACK_S,
                            should_stop=skip, on_poll=relay)
    except InterruptedError:
        return "skipped"
    except TimeoutError:
        return "timeout"
    return "done" if rc == 0 else "failed"
