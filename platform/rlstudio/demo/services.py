"""The one-click learning demo: its preparation status, its saved config, and launching it for a user.

The demo kit is made once by `manage.py rlstudio_demo` (the launcher runs it in the background after
the platform is up) and owned by the admin: the warm-started demo model, the arithmetic train and
held-out datasets (uploaded and validated through the catalog's own services) and the saved RunConfig
`DEMO_CONFIG_NAME`, built from recipe `demo_tool_arith` with the paths of those three objects. The
model and datasets are shared with everyone (read-only for the other users).

A click by any user finds the kit through the catalog's selectors (so a kit that is not shared is
"not available", never reached around them) and `run_new` launches the saved config on it exactly
like the run form: nothing is copied into the user's account.

While the kit is being made, `demo_state()` says so with the seconds left of the warm start, read
from a status file the command keeps under STATE_DIR/demo/ (never a guess: no progress yet means
no estimate; a status that stopped moving is reported as stalled).
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser

DEMO_CONFIG_NAME = "Demo: tool-calling arithmetic (GRPO)"
DEMO_RECIPE = "demo_tool_arith"
DEMO_RUN_PREFIX = "demo-tool-arith"
# A preparing status whose file has not changed for this long belongs to a command that died.
STALE_AFTER_S = 180.0


class DemoUnavailable(Exception):
    """The demo cannot be launched now; the message says why (and what to do)."""


# ----------------------------------------------------------------------------- status file
def status_path() -> Path:
    return Path(settings.STATE_DIR) / "demo" / "status.json"


def write_status(**fields: Any) -> dict[str, Any]:
    """Replace the status file atomically with ``fields`` plus ``updated`` (epoch seconds)."""
    path = status_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {**fields, "updated": time.time()}
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, path)
    return data


def read_status() -> dict[str, Any] | None:
    try:
        data = json.loads(status_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def seconds_left(status: dict[str, Any], now: float) -> int | None:
    """Seconds left of the warm start, from its measured pace; None before the first step.

    The pace is measured from the first step the command reported (`first_step`, `first_step_at`)
    once steps were made after it: the time before it (building and loading the model) is no step's,
    and counting it made the first estimates several times too long (2,112 s shown at step 3 of a
    warm start that took 600 s in all). Before that, the pace since the warm start began."""
    done, total = int(status.get("steps_done") or 0), int(status.get("steps_total") or 0)
    started, updated = status.get("warm_started"), status.get("updated")
    if done <= 0 or total <= 0 or started is None or updated is None:
        return None
    first, first_at = int(status.get("first_step") or 0), status.get("first_step_at")
    if first_at is not None and 0 < first < done:
        per_step = max(0.0, float(updated) - float(first_at)) / (done - first)
    else:
        per_step = max(0.0, float(updated) - float(started)) / done
    return max(0, round(per_step * (total - done) - max(0.0, now - float(updated))))


# ----------------------------------------------------------------------------- state
@dataclass
class DemoState:
    """What the demo button shows."""

    state: str  # "ready" | "preparing" | "failed" | "absent"
    message: str
    seconds_left: int | None = None
    config_id: int | None = None


def demo_config():
    """The admin's (staff-owned) demo RunConfig, or None."""
    from rlstudio.runs.models import RunConfig

    return (RunConfig.objects.filter(name=DEMO_CONFIG_NAME, owner__is_staff=True)
            .select_related("owner").order_by("id").first())


def demo_state(now: float | None = None) -> DemoState:
    now = time.time() if now is None else now
    status = read_status()
    if status and status.get("state") == "preparing":
        if now - float(status.get("updated") or 0) > STALE_AFTER_S:
            return DemoState("failed", "The demo preparation stopped making progress "
                                       f"(no news for over {STALE_AFTER_S:.0f} s); see logs/demo.log "
                                       "and run `manage.py rlstudio_demo` again.")
        stage = status.get("stage") or ""
        left = seconds_left(status, now) if stage == "warm-start" else None
        if stage == "warm-start":
            msg = ("The demo model is being prepared "
                   + (f"({left} s left)." if left is not None else "(estimating the time left).")
                   + f" Warm start step {int(status.get('steps_done') or 0)} of {int(status.get('steps_total') or 0)}.")
        else:
            msg = f"The demo is being prepared ({stage or 'starting'})."
        return DemoState("preparing", msg, seconds_left=left)
    if status and status.get("state") == "failed":
        return DemoState("failed", f"The demo could not be prepared: {status.get('error') or 'unknown error'} "
                                   "(see logs/demo.log; run `manage.py rlstudio_demo` again).")
    cfg = demo_config()
    if cfg is None:
        return DemoState("absent", "The demo is not installed here (an admin runs `manage.py rlstudio_demo`, "
                                   "which `make run` does by itself).")
    return DemoState("ready", "Launch the learning demo: GRPO teaches a tiny model to use a calculator; "
                              "the reward chart rises within minutes.", config_id=cfg.pk)


# ----------------------------------------------------------------------------- launch
def _first(queryset, *, owner_id: int):
    """The row owned by `owner_id` if there is one, else the oldest."""
    return queryset.filter(owner_id=owner_id).first() or queryset.order_by("id").first()


def _kit(cfg, *, user: AbstractBaseUser) -> tuple[Any, Any, Any]:
    """(model, train dataset, held-out dataset) the admin's demo config points at, as `user` sees them."""
    from rlstudio.catalog.models import Dataset
    from rlstudio.catalog.selectors import dataset_list_for, model_asset_list_for

    c = cfg.config or {}
    model_path = ((c.get("actor_rollout_ref") or {}).get("model") or {}).get("path")
    train_path = (c.get("data") or {}).get("train_files")
    val_path = (c.get("data") or {}).get("val_files")
    model = _first(model_asset_list_for(user=user).filter(path=model_path), owner_id=cfg.owner_id)
    ready = dataset_list_for(user=user).filter(status=Dataset.Status.READY)
    train = _first(ready.filter(converted_path=train_path), owner_id=cfg.owner_id)
    val = _first(ready.filter(converted_path=val_path), owner_id=cfg.owner_id)
    missing = [what for what, obj in (("model", model), ("train dataset", train), ("held-out dataset", val))
               if obj is None]
    if missing:
        raise DemoUnavailable(f"the demo's {', '.join(missing)} is gone or not shared with you; an admin runs "
                              "`manage.py rlstudio_demo` again (it makes the kit and shares it)")
    return model, train, val


def demo_launch(*, user: AbstractBaseUser):
    """Launch the demo for ``user`` on the shared kit; returns the Run."""
    from rlstudio.runs.models import Run
    from rlstudio.runs.services import run_new

    state = demo_state()
    if state.state != "ready":
        raise DemoUnavailable(state.message)
    cfg = demo_config()
    model, train, val = _kit(cfg, user=user)
    number = Run.objects.filter(owner=user, name__startswith=DEMO_RUN_PREFIX).count() + 1
    return run_new(owner=user, name=f"{DEMO_RUN_PREFIX}-{number}", dataset=train, val_dataset=val,
                   model=model, gpus=0, saved=cfg.config)
