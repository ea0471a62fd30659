"""Writes of the operator registries, and what the runs app calls to use them.

Staff register a reward function (a file under RLSTUDIO_REWARD_ROOTS, or an importable module) or a
tool set (verl tool-config YAML of the trainer's registered tools). Each is checked BEFORE anything is
saved, by the trainer's own code in a separate process with a time limit (`checks.py`): a reward
function scores the sample rows, a tool set's tools are built. A failed check refuses the registration
with its error (`RegistryRefused` naming the field) and saves nothing. Register, check again and
delete are audited.

For runs (the API the runs app relies on; keep it):
    reward_function_resolve(*, name) -> ResolvedReward(path, function)   RegistryRefused
    tool_set_write(*, name, out_dir) -> out_dir / "tool_config.yaml"      RegistryRefused
    reward_function_names() / tool_set_names() -> the ready ones' names, sorted
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.utils import timezone

from rlstudio.accounts.services import audit_record

from . import checks
from .inputs import (RegistryNotPermitted, RegistryRefused, clean_function, clean_module, clean_name,
                     clean_reward_file, clean_sample_rows, clean_tool_config, inside_roots)
from .models import RegistryStatus, RewardFunction, RewardKind, ToolSet

__all__ = ["RegistryNotPermitted", "RegistryRefused", "ResolvedReward", "reward_function_check",
           "reward_function_delete", "reward_function_names", "reward_function_register",
           "reward_function_resolve", "tool_set_check", "tool_set_delete", "tool_set_names",
           "tool_set_register", "tool_set_write"]

TOOL_CONFIG_FILE = "tool_config.yaml"
SCORE_TOLERANCE = 1e-6


@dataclass(frozen=True)
class ResolvedReward:
    """What a run's config gets: `custom_reward_function.path` and `.name`."""

    path: str
    """Absolute path of the Python file the trainer imports the function from."""
    function: str
    """The function's name in that file."""


def check_can_register(*, user: AbstractBaseUser | None) -> None:
    """RegistryNotPermitted unless `user` is staff."""
    if not (user is not None and getattr(user, "is_authenticated", False) and user.is_staff):
        raise RegistryNotPermitted("only staff can register, check or delete reward functions and tool sets")


def _sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _timeout() -> float:
    return float(settings.RLSTUDIO_REGISTRY_CHECK_TIMEOUT_S)


# --- reward functions -------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Checked:
    path: str  # the file the check loaded
    sha256: str
    results: list[dict[str, Any]]


def _check_reward(*, kind: str, source: str, function: str, rows: list[dict[str, Any]]) -> _Checked:
    """Score `rows` with the function in a separate process; RegistryRefused with the error when it
    does not load, a row fails, a score is not a number or differs from the row's `expected`."""
    field = "path" if kind == RewardKind.FILE else "module"
    before = _sha256(source) if kind == RewardKind.FILE else ""
    result = checks.check_reward_rows(path=source if kind == RewardKind.FILE else "",
                                      module=source if kind == RewardKind.MODULE else "", function=function,
                                      rows=[{k: v for k, v in r.items() if k != "expected"} for r in rows],
                                      timeout_s=_timeout())
    if not result.ok:
        where = {"load": "it does not load", "function": "no such function", "timeout": "too slow",
                 "crash": "the check process died"}.get(result.stage, result.stage)
        raise RegistryRefused(f"the reward function failed its check ({where}): {result.error}",
                              "function" if result.stage == "function" else field, code="check_failed")
    results = result.data.get("results")
    if not isinstance(results, list) or len(results) != len(rows):
        raise RegistryRefused("the reward function's check returned no result per sample row", field,
                              code="check_failed")
    for i, (row, got) in enumerate(zip(rows, results)):
        label = f"sample row {i} (data_source {row.get('data_source')!r})"
        if "error" in got:
            raise RegistryRefused(f"the reward function failed its check on {label}: {got['error']}", field,
                                  code="check_failed")
        expected = row.get("expected")
        if expected is not None and abs(float(got["score"]) - expected) > SCORE_TOLERANCE:
            raise RegistryRefused(f"the reward function scored {label} {got['score']}, expected {expected}",
                                  "sample_rows", code="check_failed")
    loaded = str(result.data.get("path") or "")
    if kind == RewardKind.FILE and (loaded != source or _sha256(source) != before):
        raise RegistryRefused(f"{source!r} changed while it was being checked; register it again", field,
                              code="check_failed")
    return _Checked(path=loaded, sha256=before or (_sha256(loaded) if loaded else ""), results=results)


def reward_function_register(*, by: AbstractBaseUser, name: str, kind: str, path: str = "", module: str = "",
                             function: str = "compute_score", description: str = "",
                             sample_rows: list[dict[str, Any]] | None = None) -> RewardFunction:
    """Check, then save, a reward function (staff only). Nothing is saved when the check fails."""
    from trainer.rewards import registered_rewards

    check_can_register(user=by)
    name = clean_name(name)
    if name in registered_rewards():
        raise RegistryRefused(f"{name!r} is the name of a built-in reward function; choose another", "name",
                              code="exists")
    if RewardFunction.objects.filter(name=name).exists():
        raise RegistryRefused(f"a reward function named {name!r} is already registered", "name", code="exists")
    function, rows = clean_function(function), clean_sample_rows(sample_rows)
    if kind == RewardKind.FILE:
        if module:
            raise RegistryRefused("a file reward function takes a path, not a module", "module", code="invalid")
        source = str(clean_reward_file(path))
    elif kind == RewardKind.MODULE:
        if path:
            raise RegistryRefused("a module reward function takes a module, not a path", "path", code="invalid")
        source = clean_module(module)
    else:
        raise RegistryRefused(f"kind must be one of {', '.join(RewardKind.values)}", "kind", code="invalid")
    checked = _check_reward(kind=kind, source=source, function=function, rows=rows)
    try:
        with transaction.atomic():
            reward = RewardFunction.objects.create(
                name=name, description=str(description or ""), kind=kind, function=function,
                path=source if kind == RewardKind.FILE else "", module=source if kind == RewardKind.MODULE else "",
                status=RegistryStatus.READY, sample_rows=rows, check_results=checked.results,
                checked_path=checked.path, checked_sha256=checked.sha256, checked=timezone.now(), created_by=by)
            audit_record(actor=by, action="reward_function.register", obj=reward,
                         data={"name": name, "kind": kind, "source": source, "function": function,
                               "sha256": checked.sha256, "scores": [r.get("score") for r in checked.results]})
    except IntegrityError:  # registered by someone else while this one was being checked
        raise RegistryRefused(f"a reward function named {name!r} is already registered", "name",
                              code="exists") from None
    return reward


def _record_check(item, *, by: AbstractBaseUser, action: str, fields: dict[str, Any]):
    """Store a check's outcome on a registry entry (`fields`: status, error, what it found), audited."""
    with transaction.atomic():
        type(item).objects.filter(pk=item.pk).update(checked=timezone.now(), **fields)
        audit_record(actor=by, action=action, obj=item,
                     data={"name": item.name, "status": fields["status"], "error": fields["error"][:500]})
    item.refresh_from_db()
    return item


def reward_function_check(*, reward_function: RewardFunction, by: AbstractBaseUser) -> RewardFunction:
    """Check a registered reward function again (staff only): `ready` with the new scores and file
    hash when it passes, `broken` with the error when not (runs cannot choose it until one passes)."""
    check_can_register(user=by)
    kind = reward_function.kind
    try:
        source = str(clean_reward_file(reward_function.path)) if kind == RewardKind.FILE else reward_function.module
        checked = _check_reward(kind=kind, source=source, function=reward_function.function,
                                rows=reward_function.sample_rows or clean_sample_rows(None))
    except RegistryRefused as exc:
        fields = {"status": RegistryStatus.BROKEN, "error": exc.message}
    else:
        fields = {"status": RegistryStatus.READY, "error": "", "check_results": checked.results,
                  "checked_path": checked.path, "checked_sha256": checked.sha256}
    return _record_check(reward_function, by=by, action="reward_function.check", fields=fields)


def reward_function_delete(*, reward_function: RewardFunction, by: AbstractBaseUser) -> None:
    """Remove a reward function from the registry (staff only; runs that chose it keep their config
    but cannot be started again with it)."""
    check_can_register(user=by)
    with transaction.atomic():
        audit_record(actor=by, action="reward_function.delete", obj=reward_function,
                     data={"name": reward_function.name, "kind": reward_function.kind,
                           "source": reward_function.source})
        reward_function.delete()


def _ready(model, name: str, what: str):
    if not isinstance(name, str) or not name:
        raise RegistryRefused(f"give the name of a registered {what}", "name", code="not_found")
    item = model.objects.filter(name=name).first()
    if item is None:
        known = ", ".join(model.objects.filter(status=RegistryStatus.READY).values_list("name", flat=True)) or "none"
        raise RegistryRefused(f"no {what} named {name!r:.80} is registered (registered: {known})", "name",
                              code="not_found")
    if item.status != RegistryStatus.READY:
        why = f": {item.error}" if item.error else " (it has not passed its check)"
        raise RegistryRefused(f"the {what} {name!r} is {item.status}{why}", "name", code="not_ready")
    return item


def reward_function_resolve(*, name: str) -> ResolvedReward:
    """The file and function a run uses for the registered reward function `name`.

    A file one must still be the file that was checked (same real path, inside a reward root, same
    SHA-256); a module one is resolved to its file now (`importlib.util.find_spec`). RegistryRefused
    when unknown, not ready, changed or gone."""
    from trainer.rewards import module_file

    reward = _ready(RewardFunction, name, "reward function")
    if reward.kind == RewardKind.FILE:
        real = Path(reward.path).resolve()
        if str(real) != reward.path or not inside_roots(real) or not real.is_file():
            raise RegistryRefused(f"the reward function {name!r}: its file {reward.path!r} is gone or no longer "
                                  "inside a reward root", "name", code="not_ready")
        if _sha256(real) != reward.checked_sha256:
            raise RegistryRefused(f"the reward function {name!r}: its file {reward.path!r} changed since it was "
                                  "checked; staff must check it again", "name", code="not_ready")
        return ResolvedReward(path=str(real), function=reward.function)
    try:
        path = module_file(reward.module)
    except Exception as exc:  # the module was uninstalled or broken since it was checked
        raise RegistryRefused(f"the reward function {name!r}: module {reward.module!r} cannot be found now: "
                              f"{type(exc).__name__}: {exc}", "name", code="not_ready") from None
    return ResolvedReward(path=path, function=reward.function)


def reward_function_names() -> list[str]:
    """Names of the ready reward functions, sorted (what a user may choose as `reward.name`)."""
    return list(RewardFunction.objects.filter(status=RegistryStatus.READY).order_by("name")
                .values_list("name", flat=True))


# --- tool sets --------------------------------------------------------------------------------------
def _check_tool_set(config_yaml: str) -> list[dict[str, Any]]:
    result = checks.check_tool_config(config_yaml=config_yaml, timeout_s=_timeout())
    if not result.ok:
        raise RegistryRefused(f"the tool set failed its check: {result.error}", "config_yaml", code="check_failed")
    return list(result.data.get("tools") or [])


def tool_set_register(*, by: AbstractBaseUser, name: str, config_yaml: str, description: str = "") -> ToolSet:
    """Check, then save, a tool set (staff only): its tools must build through the trainer's registry."""
    check_can_register(user=by)
    name = clean_name(name)
    if ToolSet.objects.filter(name=name).exists():
        raise RegistryRefused(f"a tool set named {name!r} is already registered", "name", code="exists")
    config_yaml = clean_tool_config(config_yaml)
    tools = _check_tool_set(config_yaml)
    try:
        with transaction.atomic():
            tool_set = ToolSet.objects.create(name=name, description=str(description or ""), config_yaml=config_yaml,
                                              status=RegistryStatus.READY, tools=tools, checked=timezone.now(),
                                              created_by=by)
            audit_record(actor=by, action="tool_set.register", obj=tool_set,
                         data={"name": name, "tools": [t.get("name") for t in tools]})
    except IntegrityError:
        raise RegistryRefused(f"a tool set named {name!r} is already registered", "name", code="exists") from None
    return tool_set


def tool_set_check(*, tool_set: ToolSet, by: AbstractBaseUser) -> ToolSet:
    """Build a registered tool set's tools again (staff only): `ready` or `broken` with the error
    (a tool the trainer no longer has)."""
    check_can_register(user=by)
    try:
        fields = {"status": RegistryStatus.READY, "error": "", "tools": _check_tool_set(tool_set.config_yaml)}
    except RegistryRefused as exc:
        fields = {"status": RegistryStatus.BROKEN, "error": exc.message}
    return _record_check(tool_set, by=by, action="tool_set.check", fields=fields)


def tool_set_delete(*, tool_set: ToolSet, by: AbstractBaseUser) -> None:
    check_can_register(user=by)
    with transaction.atomic():
        audit_record(actor=by, action="tool_set.delete", obj=tool_set, data={"name": tool_set.name})
        tool_set.delete()


def tool_set_write(*, name: str, out_dir: Path) -> Path:
    """Write the ready tool set `name` into the run folder `out_dir` as tool_config.yaml; its path.

    Written to a temporary name and renamed over the target, so a symlink planted at the target is
    replaced, never followed."""
    tool_set = _ready(ToolSet, name, "tool set")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / TOOL_CONFIG_FILE
    tmp = out_dir / f".{TOOL_CONFIG_FILE}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(tool_set.config_yaml)
    os.replace(tmp, target)
    return target


def tool_set_names() -> list[str]:
    """Names of the ready tool sets, sorted (what a user may choose as a run's tool set)."""
    return list(ToolSet.objects.filter(status=RegistryStatus.READY).order_by("name").values_list("name", flat=True))
