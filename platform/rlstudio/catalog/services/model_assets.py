"""The catalog's models: registering a checkpoint folder (`model_register`), the trainer's demo model
(`model_register_demo`), and deleting a model (`model_delete`) with the hooks and refusals other apps
register on it (`on_model_delete`, `on_model_delete_refusal`)."""
from __future__ import annotations

import logging
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.db.models import ProtectedError

from rlstudio.accounts.services import audit_record

from ..modelcheck import check_model_folder
from ..models import ModelAsset, Visibility
from ..errors import CatalogInUse, CatalogRefused
from ..sharing import check_can_change
from .files import clean_name
from .usage import protected_by, run_model, used_by


log = logging.getLogger(__name__)


_MODEL_PATH_LOCK_SPACE = 0x524C534D  # "RLSM": the advisory-lock key space of model registration


def model_register(*, owner, name: str, path: str, source: str = ModelAsset.Source.REGISTERED,
                   source_run=None, roots: list[Path] | None = None) -> ModelAsset:
    """Check a checkpoint folder and register it for `owner`.

    One folder (its resolved real path), one registration: the owner's own registration of it is
    updated (registering twice gives the same model); else one shared with everyone is returned as it
    is (no duplicate row; read-only to a non-owner); else one another user registered privately is
    refused (CatalogRefused on `path`). Registrations of one folder are serialized by an advisory lock.
    `roots`: where the folder may lie instead of RLSTUDIO_MODEL_ROOTS (the platform's own folders only,
    e.g. a run's export).
    """
    from django.db import connection

    checked = check_model_folder(path, roots=roots)
    folder, params = checked.folder, checked.num_parameters
    name = clean_name(name or folder.name)
    if not name:
        raise CatalogRefused("a name is required", field="name")
    with transaction.atomic():
        with connection.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", [_MODEL_PATH_LOCK_SPACE, str(folder)])
        same = ModelAsset.objects.filter(path=str(folder))
        if not same.filter(owner=owner).exists():
            shared = same.filter(visibility=Visibility.EVERYONE).select_related("owner").order_by("id").first()
            if shared is not None:
                return shared
            if same.exists():
                raise CatalogRefused("this folder is already registered by someone else and not shared; ask "
                                     "staff to share it, or register a copy in another folder",
                                     field="path", code="registered_by_other")
        model, created = ModelAsset.objects.update_or_create(
            owner=owner, path=str(folder),
            defaults={"name": name, "tokenizer_ok": True, "num_parameters": params, "source": source,
                      "source_run": source_run, "architecture": checked.architecture[:100],
                      "dtype": checked.dtype[:16], "shards": checked.shards, "kind": checked.kind,
                      "chat_family": checked.chat_family, "tool_parser": checked.tool_parser,
                      "stop_tokens": checked.stop_tokens, "check_report": checked.report},
        )
        audit_record(actor=owner, action="model.register" if created else "model.update", obj=model,
                     data={"name": name, "path": str(folder), "num_parameters": params,
                           "chat_family": checked.chat_family, "kind": checked.kind})
    return model


DEMO_MODEL_NAME = "demo-tiny-qwen2"
DEMO_NOTES = {
    False: ("Random weights, built for trying the platform end to end: its answers are noise, so a reward "
            "that checks them stays at 0 however long it trains. To see a run learn, train "
            f"{DEMO_MODEL_NAME}-warm (the demo's warm-started model, registered when the demo has built it) "
            "or a real model."),
    True: ("The demo's model: warm-started on its calculator task (tool calls in some of its episodes), "
           "so that GRPO improves it within minutes on a CPU (the one-click demo)."),
}


def model_register_demo(*, owner, warm_start: bool = False, warm_start_steps: int | None = None,
                        progress=None) -> ModelAsset:
    """Build the trainer's tiny demo model under STATE_DIR/models (once) and register it for `owner`.

    `warm_start`: register instead the warm-started demo model of `trainer.models.demo` (the two-phase
    supervised warm start, bounded by `warm_start_steps`, default its WARM_START_STEPS, that leaves it
    calling the calculator in only some of its episodes, so that GRPO has something to improve;
    minutes on a CPU). Built once per step count: the folder name carries it, so a second start
    reuses it. `progress(done, total)` is called after each warm-start step.
    """
    from trainer.models.tiny import make_tiny_model

    root = Path(settings.RLSTUDIO_MODEL_ROOTS[0])
    if warm_start:
        from trainer.models.demo import WARM_START_STEPS, make_demo_model

        steps = int(warm_start_steps or WARM_START_STEPS)
        suffix = "" if steps == WARM_START_STEPS else f"-{steps}steps"
        base, name, build = root / f"demo-tiny-warm-{steps}steps", f"{DEMO_MODEL_NAME}-warm{suffix}", (
            lambda out: make_demo_model(out, steps=steps, log=log.info, progress=progress))
    else:
        base, name, build = root / "demo-tiny", DEMO_MODEL_NAME, (lambda out: make_tiny_model(out, preset="demo"))
    if not (base / "config.json").is_file():
        tmp = base.with_name(base.name + f".{uuid.uuid4().hex[:8]}.tmp")
        build(tmp)
        if (base / "config.json").is_file():  # another process built it meanwhile
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            shutil.rmtree(base, ignore_errors=True)
            os.replace(tmp, base)
    target = base
    model = model_register(owner=owner, name=name, path=str(target))
    if model.owner_id == owner.pk and model.note != DEMO_NOTES[warm_start]:
        model.note = DEMO_NOTES[warm_start]
        model.save(update_fields=["note"])
    return model


_MODEL_DELETE_HOOKS: list[Callable[[ModelAsset], None]] = []


def on_model_delete(hook: Callable[[ModelAsset], None]) -> Callable[[ModelAsset], None]:
    """Register `hook(model)`, called inside `model_delete`'s transaction with the model (its row locked)
    before it and its evaluations are deleted (an app keeping what it needs of them: the quotas app, the
    evaluations' GPU-hours). An exception from a hook aborts the deletion."""
    if hook not in _MODEL_DELETE_HOOKS:
        _MODEL_DELETE_HOOKS.append(hook)
    return hook


_MODEL_DELETE_REFUSALS: list[Callable[[ModelAsset], str]] = []


def on_model_delete_refusal(check: Callable[[ModelAsset], str]) -> Callable[[ModelAsset], str]:
    """Register `check(model)`: '' when the registering app has nothing live on `model`, else why the
    model is in use, completing "model 'name' …" (e.g. "is answering in playground session #3 (running):
    stop it first"). `model_delete` calls it inside its transaction with the model's row locked, before
    anything is deleted, and refuses with CatalogInUse on the first reason. An app whose records name a
    model without a foreign key (the playground: its sessions hold model ids in JSON) registers one from
    its AppConfig.ready, so the catalog never reaches into it."""
    if check not in _MODEL_DELETE_REFUSALS:
        _MODEL_DELETE_REFUSALS.append(check)
    return check


def model_delete(*, model: ModelAsset, by) -> None:
    """Forget a model no run uses (owner or staff only; the folder on disk is left as it is: it is the
    operator's, or a run's export); its finished evaluations go with it, after the `on_model_delete`
    hooks. In use: CatalogInUse naming the runs, or counting its queued or running evaluations (their
    jobs read the model), or with the reason of an `on_model_delete_refusal` check (the playground's:
    a queued or running session on it), or counting the other records that protect it (sweeps).

    The checks run with the model's row locked (FOR UPDATE), which a run's or an evaluation's creation
    waits for (it takes FOR KEY SHARE on the rows it references first, `rlstudio.rowlocks`): one
    created meanwhile is either committed before the lock, so seen here and refused, or waits for the
    deletion and finds no model. A model already deleted by another request is left gone."""
    from django.db.models import Q

    check_can_change(user=by, item=model, action="delete")
    with transaction.atomic():
        locked = ModelAsset.objects.select_for_update().filter(pk=model.pk).first()
        if locked is None:
            return
        used = used_by(run_model().objects.filter(Q(model=locked) | Q(reward_model=locked)), by=by)
        if used:
            raise CatalogInUse(f"model {model.name!r} is used by {used}", code="in_use")
        # The evaluations app's reverse relation (it depends on the catalog, so the catalog does not
        # import it); "queued" and "running" are its active statuses.
        evaluating = locked.evaluations.filter(status__in=("queued", "running")).count()
        if evaluating:
            raise CatalogInUse(f"model {model.name!r} is being evaluated ({evaluating} evaluation(s) queued or "
                               f"running): wait for them to end or stop them", code="in_use")
        for check in list(_MODEL_DELETE_REFUSALS):
            why = check(locked)
            if why:
                raise CatalogInUse(f"model {model.name!r} {why}", code="in_use")
        audit_record(actor=by, action="model.delete", obj=model, data={"name": model.name, "path": model.path})
        for hook in list(_MODEL_DELETE_HOOKS):
            hook(locked)
        try:
            model.delete()
        except ProtectedError as exc:  # another app's record keeps it (a sweep); the transaction undoes the rest
            raise CatalogInUse(f"model {model.name!r} is used by {protected_by(exc)}: delete them first",
                               code="in_use") from None
