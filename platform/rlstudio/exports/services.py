"""Writes of exports: ask for one (the run's owner or staff), run one (the Celery task `exports.run_export`).

An export turns checkpoint `step` of a run (a committed `global_step_<step>/` the platform finds in
the run's own folder, `runs.checkpoints.checkpoint_steps`) into `exports/step_<step>/` inside
that folder with `trainer.export.export_checkpoint`: `huggingface/` (FSDP shards merged; LoRA: merged
weights) and, for LoRA, `lora_adapter/`; a model card (`card.model_card`) is written into both as
README.md; then `huggingface/` is registered in the catalog for the run's owner (checked as any model
is, `catalog.services.model_assets.model_register`, inside the run's folder only).

Where it runs: in the Celery worker's process, on its CPU (about twice the model in float32 in
memory), holding the export's work lock (`rlstudio.worklocks`) while it works. Bounds: one queued or
running export per user at a time. `export_recover` (Celery beat, every 30 s) finds the exports left
behind: one `running` whose lock no worker holds (its worker died: killed, out of memory) is failed
and its partial folder removed; one `queued` whose task was sent over RLSTUDIO_EXPORT_RESEND_S ago
and no worker took is sent again (a lost message; a duplicate is harmless). One export per run and
step: asking again returns the existing one, or queues a failed one again. `export_delete` removes
one (its catalog model, the record, the folder).

The run's final export (the trainer's `huggingface/`, registered by runs.register_export) gets the
same card: `on_run_succeeded`, a transition hook this app registers, sends `exports.final_card`.
"""
from __future__ import annotations

import logging
import os
import traceback
from datetime import timedelta
from pathlib import Path

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from rlstudio.runs.checkpoints import checkpoint_steps
from rlstudio.runs.failure import stored_error
from rlstudio.runs.folders import remove_tree_inside
from rlstudio.runs.launch import inside, run_folder
from rlstudio.text import without_nul
from rlstudio.worklocks import held

from .models import ACTIVE_EXPORT_STATUSES, Export, ExportStatus

log = logging.getLogger(__name__)
WORK_LOCK_SPACE = 0x524C5345  # "RLSE": the exports' space of rlstudio.worklocks
MAX_ARCHIVE_BYTES = 64 * 2**30  # the largest export served as an archive (file bytes before compression)
EXPORTS_DIR = "exports"
MAX_ERROR_LOG = 64_000  # characters of a failure's detail kept (its end)


def write_card(*, run, step: int, folder: Path, lora: bool) -> None:
    """The model card of `run` at `step` as README.md in `folder/huggingface/` (and `lora_adapter/`)."""
    from trainer.export import MODEL_DIR

    from .card import model_card
    from .facts import card_facts

    card = model_card(card_facts(run=run, step=step, lora=lora))
    for sub in (MODEL_DIR, "lora_adapter") if lora else (MODEL_DIR,):
        tmp = folder / sub / "README.md.tmp"
        tmp.unlink(missing_ok=True)
        tmp.write_text(card, encoding="utf-8")
        os.replace(tmp, folder / sub / "README.md")  # replaces a link there rather than writing through it


def final_export_card(*, run_id: int) -> bool:
    """Write the model card into a succeeded run's final export (`huggingface/` and, with LoRA,
    `lora_adapter/` in the run's folder, which the trainer writes and runs.register_export registers).
    False when the run wrote no export."""
    from rlstudio.runs.models import Run, RunStatus

    run = Run.objects.select_related("owner", "model", "dataset", "val_dataset").get(pk=run_id)
    folder = run_folder(run)
    if run.status != RunStatus.SUCCEEDED or not (folder / "huggingface" / "config.json").is_file():
        return False
    if not inside(folder / "huggingface", folder):
        return False
    write_card(run=run, step=run.step, folder=folder, lora=(folder / "lora_adapter" / "adapter_config.json").is_file())
    return True


def on_run_succeeded(made) -> None:
    """The transition hook: a run that succeeded gets its final export's card written by a task."""
    if made.after != "succeeded":
        return
    from rlstudio.config.celery import publish

    error = publish("exports.final_card", made.run_id)
    if error is not None:
        log.warning("run %s: the final export's model card was not sent (%s)", made.run_id, error)


class ExportInvalid(ValueError):
    """A request that cannot be exported; `field` names the input that is wrong."""

    def __init__(self, message: str, *, field: str):
        super().__init__(message)
        self.field = field


class ExportRefused(RuntimeError):
    """A valid request refused now (another export of the user is still queued or running)."""


def export_folder(run, step: int) -> Path:
    """Where the export of `step` lies: `exports/step_<step>/` in the run's own folder (the run's record)."""
    return run_folder(run) / EXPORTS_DIR / f"step_{int(step)}"


def clean_step(value, *, available) -> int:
    """`step` as an int naming one of `available` (the run's committed checkpoints), else ExportInvalid."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ExportInvalid(f"step must be the global step of a checkpoint (an integer), got {value!r}",
                            field="step")
    if value not in available:
        raise ExportInvalid(f"the run has no checkpoint at step {value}; its checkpoints: "
                            f"{list(available) or 'none'}", field="step")
    return value


def export_new(*, user, run, data) -> tuple[Export, bool]:
    """Ask for the export of checkpoint `data["step"]` of `run` (RunNotPermitted unless the user
    manages it). Returns (the export, whether a task was queued now).

    In one transaction, in the lock order the run's deletion takes (the run's row, then owners'): the
    run's row FOR KEY SHARE (`rowlocks.lock_for_use`; a run deleted meanwhile is ExportInvalid on
    `run`), then the user's own admission lock (`QuotaPolicy.lock_user`: theirs alone, not their
    quota'd teammates', as no team limit counts exports), so one user's requests check "one queued or
    running export" one at a time. The
    same run and step asked for at once by two users (the owner and staff) gives both the one export."""
    from rlstudio.accounts.services import audit_record
    from rlstudio.rowlocks import lock_for_use
    from rlstudio.runs.models import Run
    from rlstudio.runs.services import check_can_manage
    from rlstudio.runs.services.queue_registry import quota_policy

    check_can_manage(user=user, run=run, action="export")
    step = clean_step((data or {}).get("step"), available=checkpoint_steps(run))
    with transaction.atomic():
        if lock_for_use([("run", Run, run.pk)]) is not None:
            raise ExportInvalid(f"the run {run.name!r} (#{run.pk}) was deleted", field="run")
        quota_policy().lock_user(user=user)
        existing = Export.objects.select_for_update().filter(run=run, step=step).first()
        if existing is not None and existing.status != ExportStatus.FAILED:
            return existing, False
        if Export.objects.filter(owner=user, status__in=ACTIVE_EXPORT_STATUSES).exists():
            raise ExportRefused("you already have an export queued or running; wait for it to finish")
        if existing is None:
            try:
                with transaction.atomic():
                    export = Export.objects.create(run=run, owner=user, step=step)
            except IntegrityError:  # another user's request (the owner's, staff's) made it first
                return Export.objects.get(run=run, step=step), False
        else:  # a failed export is asked for again
            export = existing
            export.owner, export.status, export.error, export.error_log = user, ExportStatus.QUEUED, "", ""
            export.started = export.finished = None
            export.save(update_fields=["owner", "status", "error", "error_log", "started", "finished"])
        audit_record(actor=user, action="run.export", obj=run, data={"step": step, "export": export.pk})
    error = _send(export)
    if error is not None:
        _finish(export, status=ExportStatus.FAILED, error=f"could not queue the export: {error}")
    return export, True


def _send(export: Export) -> Exception | None:
    """Send `export`'s task to the workers' queue and note when (None, or the broker's error)."""
    from rlstudio.config.celery import publish

    error = publish("exports.run_export", export.pk)
    if error is None:
        Export.objects.filter(pk=export.pk).update(sent=timezone.now())
    return error


def _mine(export: Export):
    """The export's row while it is still the run this worker started (`running` since its `started`):
    not failed by the recovery meanwhile (its connection, and so its work lock, was lost) nor asked again."""
    return Export.objects.filter(pk=export.pk, status=ExportStatus.RUNNING, started=export.started)


def _still_mine(export: Export) -> bool:
    return _mine(export).exists()


def _finish(export: Export, *, status: str, error: str = "", error_log: str = "", mine: bool = False,
            **fields) -> bool:
    """End `export`: a failure's reason as `error`, its server paths replaced (whoever reads the run
    reads it), and its detail as `error_log` (the error as it was, the traceback: the run's owner's
    and staff's; `rlstudio.runs.failure.stored_error`), both bounded and without NUL characters. With
    `mine` (the worker ending its run), only while `_still_mine`. Returns whether it was ended."""
    reason, detail = stored_error(error, error_log)
    with transaction.atomic():
        if mine and not _mine(export).select_for_update(of=("self",), no_key=True).exists():
            return False
        export.status, export.finished = status, timezone.now()
        export.error, export.error_log = without_nul(reason[:4000]), without_nul(detail[-MAX_ERROR_LOG:])
        for name, value in fields.items():
            setattr(export, name, value)
        export.save(update_fields=["status", "error", "error_log", "finished", *fields])
    return True


def export_execute(*, export_id: int) -> str:
    """Run a queued export here (the Celery worker), holding its work lock: write the folder, its
    card, register it. Returns the outcome ("already …" when another worker has it or it is not queued)."""
    with held(WORK_LOCK_SPACE, export_id) as mine:
        if not mine:
            return "already running"  # another worker is at it (a duplicate or redelivered task)
        return _execute_held(export_id)


def _execute_held(export_id: int) -> str:
    from rlstudio.catalog.errors import CatalogRefused
    from rlstudio.catalog.models import ModelAsset
    from rlstudio.catalog.services.model_assets import model_register
    from trainer.export import MODEL_DIR, export_checkpoint

    from rlstudio.archive import archive_size

    with transaction.atomic():
        # Only the export's row (select_related alone would lock the run, its owner and its model FOR
        # UPDATE too); no key changes, so rows referencing it (FOR KEY SHARE) are not blocked.
        export = (Export.objects.select_for_update(of=("self",), no_key=True)
                  .select_related("run", "run__owner", "run__model").filter(pk=export_id).first())
        if export is None:
            return "gone"
        if export.status != ExportStatus.QUEUED:
            return f"already {export.status}"
        export.status, export.started = ExportStatus.RUNNING, timezone.now()
        export.save(update_fields=["status", "started"])
    run = export.run
    try:
        steps = checkpoint_steps(run)
        if export.step not in steps:
            raise FileNotFoundError(f"the checkpoint of step {export.step} is no longer in the run's folder")
        folder, out = run_folder(run), export_folder(run, export.step)
        if not inside(out.parent, folder):
            raise FileNotFoundError("the run's exports folder leads outside the run's folder")
        info = export_checkpoint(run.config, steps[export.step], out, base_model_name=run.model.name)
        write_card(run=run, step=export.step, folder=out, lora=info["lora"])
        if not _still_mine(export):  # failed by the recovery meanwhile (this worker lost its connection)
            return "superseded"
        model = model_register(owner=run.owner, name=f"{run.name} (run {run.pk}, step {export.step})",
                               path=str(out / MODEL_DIR), source=ModelAsset.Source.RUN_EXPORT, source_run=run,
                               roots=[folder])
    except CatalogRefused as exc:
        _finish(export, status=ExportStatus.FAILED, error=f"the catalog refused the export: {exc}", mine=True)
        return "failed"
    except Exception as exc:  # the export fails with the reason (and its traceback); the worker goes on
        _finish(export, status=ExportStatus.FAILED, error=f"{type(exc).__name__}: {exc}", mine=True,
                error_log=traceback.format_exc().rstrip("\n"))
        return "failed"
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    if not _finish(export, status=ExportStatus.SUCCEEDED, mine=True, lora=info["lora"], files=files,
                   size_bytes=archive_size(out), model=model):
        return "superseded"
    return "succeeded"


def export_delete(*, user, export: Export) -> None:
    """Delete an export (the run's owner or staff, RunNotPermitted otherwise): its catalog model
    (CatalogInUse while runs use it: then nothing is deleted), the record, and its folder in the run's
    folder. ExportRefused while it is queued or running."""
    from rlstudio.accounts.services import audit_record
    from rlstudio.catalog.services.model_assets import model_delete
    from rlstudio.runs.services import check_can_manage

    run = export.run
    check_can_manage(user=user, run=run, action="delete exports of")
    folder = export_folder(run, export.step)
    with transaction.atomic():
        # the status as it is now: a failed export queued again meanwhile is not deleted under its worker
        export = Export.objects.select_for_update(of=("self",)).select_related("model").filter(pk=export.pk).first()
        if export is None:
            return
        if export.status in ACTIVE_EXPORT_STATUSES:
            raise ExportRefused(f"export {export.pk} is {export.status}: delete it once it has finished")
        if export.model is not None:
            model_delete(model=export.model, by=user)
        audit_record(actor=user, action="run.export.delete", obj=run, data={"step": export.step, "export": export.pk})
        export.delete()
    remove_tree_inside(folder, run_folder(run))


def export_recover(*, resend_after_s: float | None = None) -> dict[str, list[int]]:
    """The exports left behind (Celery beat): `running` ones whose work lock no worker holds (the
    worker died) are failed, saying so, and their partial folder removed; `queued` ones whose task
    was sent over `resend_after_s` (default settings.RLSTUDIO_EXPORT_RESEND_S) ago and no worker
    holds are sent again. Returns the ids {"failed": [...], "resent": [...]}."""
    from django.conf import settings

    failed: list[int] = []
    for export_id in Export.objects.filter(status=ExportStatus.RUNNING).order_by("id").values_list("id", flat=True)[:100]:
        with held(WORK_LOCK_SPACE, export_id) as free:
            if not free:
                continue  # its worker is at work
            with transaction.atomic():
                export = (Export.objects.select_for_update(of=("self",)).select_related("run")
                          .filter(pk=export_id, status=ExportStatus.RUNNING).first())
                if export is None:
                    continue
                _finish(export, status=ExportStatus.FAILED,
                        error="its worker stopped while exporting (the process ended, e.g. out of memory); "
                              "ask for the export again")
            remove_tree_inside(export_folder(export.run, export.step), run_folder(export.run))
            failed.append(export_id)
    age = float(settings.RLSTUDIO_EXPORT_RESEND_S if resend_after_s is None else resend_after_s)
    cutoff = timezone.now() - timedelta(seconds=age)
    resent: list[int] = []
    lost = Q(sent__lt=cutoff) | Q(sent__isnull=True, created__lt=cutoff)  # null: queued before `sent` was kept
    for export in Export.objects.filter(lost, status=ExportStatus.QUEUED).order_by("id")[:100]:
        with held(WORK_LOCK_SPACE, export.pk) as free:
            if not free:
                continue
        if _send(export) is not None:
            break  # the broker is down: the next pass tries again (`sent` is kept as it was)
        resent.append(export.pk)
    return {"failed": failed, "resent": resent}
