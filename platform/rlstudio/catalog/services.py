"""Writes of the catalog: upload, validate and convert, statistics, delete datasets; register and
delete models. Who may change or share an object: `rlstudio.catalog.sharing`.

Storage layout under an uploads root (settings.UPLOADS_DIR when the upload arrives; every later step
derives it from the absolute `file_path` stored on the dataset, so the web process and a Celery
worker with another state folder agree):
    incoming/<uuid>.part          the upload, until it is valid (removed when it is not)
    <sha[:2]>/<sha256><suffix>    the stored file, by content hash (shared by identical uploads)
    rows/<dataset id>.jsonl       the converted rows, in the trainer's row format
"""
from __future__ import annotations

import hashlib
import logging
import os
import shutil
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from rlstudio.accounts.services import audit_record

from .conversion import convert_file, summarize_lengths, token_lengths
from .formats import Limits, RowError, detect_format
from .modelcheck import check_model_folder
from .models import Dataset, ModelAsset, Visibility
from .presets import PRESETS
from .errors import CatalogConflict, CatalogInUse, CatalogRefused, CatalogTooLarge
from .sharing import check_can_change
from .storage import added_bytes, storage_refusal

log = logging.getLogger(__name__)
DEFAULT_MAX_PROMPT_LENGTH = 1024


def upload_limits() -> Limits:
    return Limits(
        max_upload_bytes=settings.RLSTUDIO_MAX_UPLOAD_BYTES,
        max_line_bytes=settings.RLSTUDIO_MAX_LINE_BYTES,
        max_nesting_depth=settings.RLSTUDIO_MAX_NESTING_DEPTH,
        max_decompressed_bytes=settings.RLSTUDIO_MAX_DECOMPRESSED_BYTES,
        max_json_document_bytes=settings.RLSTUDIO_MAX_JSON_DOCUMENT_BYTES,
    )


def _suffix(name: str) -> str:
    lower = name.lower()
    for s in (".jsonl.gz", ".json.gz", ".csv.gz", ".ndjson.gz"):
        if lower.endswith(s):
            return s
    return Path(lower).suffix[:16]


def _clean_name(name: str) -> str:
    return "".join(ch for ch in name if ch.isprintable()).strip()[:200]


_UPLOAD_LOCK_SPACE = 0x524C5355  # "RLSU": the advisory-lock key space of one owner's dataset uploads


def dataset_upload(*, owner, upload, name: str = "", preset: str = "auto", split: str = "train",
                   stats_model: ModelAsset | None = None) -> tuple[Dataset, bool]:
    """Store `upload` (a Django UploadedFile) under a temporary name and queue its validation.

    Returns (dataset, created). The same bytes uploaded again by the same owner with the same preset
    and split give back the existing dataset (created False), also when uploaded at the same time (one
    owner's check-and-create runs under a per-owner lock). Cheap refusals (size, empty, unknown or
    disguised format) raise CatalogRefused / CatalogTooLarge before anything is stored; past the
    owner's dataset storage (the registered `storage` checks, under the same lock) CatalogTooLarge
    with code `storage_quota`, the uploaded part removed.
    """
    limits = upload_limits()
    if preset not in PRESETS:
        raise CatalogRefused(f"unknown preset {preset!r} (allowed: {', '.join(PRESETS)})", field="preset")
    if split not in Dataset.Split.values:
        raise CatalogRefused(f"unknown split {split!r} (allowed: {', '.join(Dataset.Split.values)})", field="split")
    source_name = _clean_name(os.path.basename(upload.name or "")) or "upload"
    if upload.size is not None and upload.size > limits.max_upload_bytes:
        raise CatalogTooLarge(f"the file is {upload.size} bytes, over the limit of {limits.max_upload_bytes} "
                       "bytes (RLSTUDIO_MAX_UPLOAD_BYTES)", code="too_large", field="file")
    if not upload.size:
        raise CatalogRefused("the file is empty", code="empty", field="file")
    upload.seek(0)
    head = upload.read(8)
    try:
        detected = detect_format(source_name, head)
    except RowError as exc:
        raise CatalogRefused(str(exc), code="bad_format", field="file") from None
    root = Path(settings.UPLOADS_DIR).resolve()
    (root / "incoming").mkdir(parents=True, exist_ok=True)
    part = root / "incoming" / f"{uuid.uuid4().hex}.part"
    digest = hashlib.sha256()
    size = 0
    try:
        upload.seek(0)
        with open(part, "wb") as out:
            for chunk in upload.chunks(1 << 20):
                size += len(chunk)
                if size > limits.max_upload_bytes:
                    raise CatalogTooLarge(f"the file is over the limit of {limits.max_upload_bytes} bytes "
                                   "(RLSTUDIO_MAX_UPLOAD_BYTES)", code="too_large", field="file")
                digest.update(chunk)
                out.write(chunk)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    sha = digest.hexdigest()
    with transaction.atomic():
        # One owner's uploads check and create one at a time, so identical uploads at once make one dataset.
        with connection.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s, %s)", [_UPLOAD_LOCK_SPACE, owner.pk])
        # A ready dataset records the preset auto resolved to, so "auto" matches any preset.
        same = Dataset.objects.filter(owner=owner, sha256=sha, split=split).exclude(status=Dataset.Status.INVALID)
        if preset != "auto":
            same = same.filter(preset=preset)
        existing = same.order_by("-id").first()
        if existing is not None:
            part.unlink(missing_ok=True)
            return existing, False
        # Under the owner's lock: two uploads at once are checked one after the other (catalog/storage.py).
        refusal = storage_refusal(owner=owner, size_bytes=added_bytes(owner=owner, sha256=sha, size_bytes=size))
        if refusal:
            part.unlink(missing_ok=True)
            raise CatalogTooLarge(refusal, code="storage_quota", field="file")
        dataset = Dataset.objects.create(
            owner=owner, name=_clean_name(name) or source_name, file_path=str(part), sha256=sha,
            size_bytes=size, format=detected.format + ("+gzip" if detected.gzipped else ""), preset=preset,
            split=split, status=Dataset.Status.VALIDATING, source_name=source_name, stats_model=stats_model,
        )
        audit_record(actor=owner, action="dataset.upload", obj=dataset,
                     data={"name": dataset.name, "sha256": sha, "size_bytes": size, "preset": preset})
        dataset_id = dataset.pk
        transaction.on_commit(lambda: _send_validation(dataset_id, actor=owner))
    return dataset, True


def _send_validation(dataset_id: int, *, actor=None) -> bool:
    """Publish the validation task; when the broker is unreachable, say so in the log and the audit
    trail and leave the dataset `validating`: `dataset_resend_stuck` (Celery beat) sends it again once
    the broker is back, and the upload itself answers normally instead of a 500."""
    from rlstudio.config.celery import publish

    error = publish("catalog.validate_dataset", dataset_id)
    if error is None:
        return True
    log.warning("dataset %s: validation not sent, the task queue is unreachable: %s", dataset_id, error)
    dataset = Dataset.objects.filter(pk=dataset_id).first()
    if dataset is not None:
        audit_record(actor=actor, action="dataset.validate_unsent", obj=dataset, data={"error": str(error)[:500]})
    return False


def dataset_resend_stuck(*, older_than_s: float | None = None) -> list[int]:
    """Re-send validation for datasets `validating` for longer than `older_than_s` (default
    settings.RLSTUDIO_VALIDATION_RESEND_S) that no validator holds (its advisory lock is free): their
    task was never published (broker down at upload) or was lost. A duplicate is harmless: the
    validator takes the dataset's lock or returns. Returns the ids sent."""
    from django.db import connection

    age = float(settings.RLSTUDIO_VALIDATION_RESEND_S if older_than_s is None else older_than_s)
    cutoff = timezone.now() - timedelta(seconds=age)
    sent: list[int] = []
    for dataset_id in Dataset.objects.filter(status=Dataset.Status.VALIDATING, created__lt=cutoff) \
            .order_by("id").values_list("id", flat=True)[:100]:
        with connection.cursor() as cur:
            cur.execute("SELECT pg_try_advisory_lock(%s, %s)", [_VALIDATE_LOCK_SPACE, dataset_id])
            if not cur.fetchone()[0]:
                continue  # a validator is at work on it
            cur.execute("SELECT pg_advisory_unlock(%s, %s)", [_VALIDATE_LOCK_SPACE, dataset_id])
        if not _send_validation(dataset_id):
            break  # the broker is still down: try again on the next pass
        sent.append(dataset_id)
    return sent


def _remove(path: str | Path | None) -> None:
    if path:
        p = Path(path)
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)


def _mark_invalid(dataset: Dataset, *, message: str, line: int | None = None, field: str = "") -> None:
    if not Dataset.objects.filter(pk=dataset.pk).exists():
        return
    dataset.status = Dataset.Status.INVALID
    dataset.error, dataset.error_line, dataset.error_field = message[:4000], line, field or ""
    dataset.converted_path, dataset.row_index, dataset.num_rows, dataset.converted_bytes = "", [], None, 0
    dataset.save(update_fields=["status", "error", "error_line", "error_field", "converted_path", "row_index",
                                "num_rows", "converted_bytes"])


_VALIDATE_LOCK_SPACE = 0x524C5356  # "RLSV": the advisory-lock key space of dataset validation


def dataset_validate(*, dataset: Dataset) -> Dataset:
    """Validate and convert a `validating` dataset (the Celery task's one call).

    Ends `ready` (file moved to its content-hash name, rows converted, statistics computed) or
    `invalid` (the message names line and field; the upload and any partial rows are removed).
    One validator at a time per dataset: a redelivered or duplicated task (late acks) that finds
    another one at work returns at once, leaving the dataset to it.
    """
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT pg_try_advisory_lock(%s, %s)", [_VALIDATE_LOCK_SPACE, dataset.pk])
        if not cur.fetchone()[0]:
            return dataset
    try:
        dataset.refresh_from_db()
        return _dataset_validate_locked(dataset=dataset)
    finally:
        with connection.cursor() as cur:
            cur.execute("SELECT pg_advisory_unlock(%s, %s)", [_VALIDATE_LOCK_SPACE, dataset.pk])


def _dataset_validate_locked(*, dataset: Dataset) -> Dataset:
    if dataset.status != Dataset.Status.VALIDATING:
        return dataset
    part = Path(dataset.file_path)
    root = part.parent.parent
    rows_dir = root / "rows"
    rows_dir.mkdir(parents=True, exist_ok=True)
    rows_part = rows_dir / f"{dataset.pk}.jsonl.part"
    work_dir = root / "incoming" / f"{part.stem}.d"
    fmt = dataset.format.split("+")[0]
    from .formats import Detected

    try:
        if not part.is_file():
            raise RowError("the uploaded file is gone (it was removed before validation)")
        result = convert_file(part, detected=Detected(fmt, gzipped=dataset.format.endswith("+gzip")),
                              preset=dataset.preset, split=dataset.split, limits=upload_limits(),
                              out_path=rows_part, work_dir=work_dir)
    except RowError as exc:
        _remove(rows_part)
        _remove(work_dir)
        _remove(part)
        _mark_invalid(dataset, message=str(exc), line=exc.line, field=exc.field or "")
        return dataset
    except Exception as exc:  # a reader bug or a library refusing the file: say so, keep nothing
        log.exception("validating dataset %s failed", dataset.pk)
        _remove(rows_part)
        _remove(work_dir)
        _remove(part)
        _mark_invalid(dataset, message=f"the file could not be read: {type(exc).__name__}: {exc}")
        return dataset
    stored = root / dataset.sha256[:2] / f"{dataset.sha256}{_suffix(dataset.source_name)}"
    stored.parent.mkdir(parents=True, exist_ok=True)
    if stored.exists():
        part.unlink(missing_ok=True)  # identical bytes already stored (another upload)
    else:
        os.replace(part, stored)
    final_rows = rows_dir / f"{dataset.pk}.jsonl"
    os.replace(rows_part, final_rows)
    with transaction.atomic():
        locked = Dataset.objects.select_for_update().filter(pk=dataset.pk).first()
        if locked is None:  # deleted while validating
            _remove(final_rows)
            return dataset
        locked.status = Dataset.Status.READY
        locked.file_path, locked.converted_path = str(stored), str(final_rows)
        locked.converted_bytes = final_rows.stat().st_size
        locked.num_rows, locked.columns, locked.row_index = result.num_rows, result.columns, result.offsets
        locked.preset = result.preset
        locked.error, locked.error_line, locked.error_field = "", None, ""
        locked.save()
        dataset = locked
    from .selectors import model_asset_default_for

    model = dataset.stats_model or model_asset_default_for(user=dataset.owner)
    if model is not None:
        dataset_compute_stats(dataset=dataset, model=model)
    return dataset


def tool_schemas() -> dict[str, dict[str, Any]]:
    """Schemas of the trainer's registered tools, by name."""
    from trainer.tools.base import get_tool_class, registered_tools

    return {name: get_tool_class(name).schema for name in registered_tools()}


def dataset_compute_stats(*, dataset: Dataset, model: ModelAsset,
                          max_prompt_length: int = DEFAULT_MAX_PROMPT_LENGTH) -> Dataset:
    """Prompt token-length statistics of a ready dataset with `model`'s tokenizer (stored in stats)."""
    if dataset.status != Dataset.Status.READY or not dataset.converted_path:
        raise CatalogConflict("statistics need a ready dataset", code="not_ready")
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model.path)
        lengths = token_lengths(Path(dataset.converted_path), tokenizer, tool_schemas=tool_schemas())
        stats = {"prompt_tokens": summarize_lengths(lengths, max_prompt_length=int(max_prompt_length)),
                 "model": {"id": model.pk, "name": model.name}}
    except Exception as exc:  # the dataset stays usable; the page says why there are no statistics
        stats = {"error": f"token statistics failed with model {model.name!r}: {type(exc).__name__}: {exc}",
                 "model": {"id": model.pk, "name": model.name}}
    dataset.stats, dataset.stats_model = stats, model
    dataset.save(update_fields=["stats", "stats_model"])
    return dataset


def _run_model():
    """The runs app's Run, reached through the dataset's reverse relation (`runs`): runs depends on
    the catalog, so the catalog does not import it."""
    return Dataset._meta.get_field("runs").related_model


def _used_by(runs, *, by) -> str:
    """'run(s): a, b' naming only the runs `by` may see, counting the others; '' when none."""
    from rlstudio.ownership import owned_by_or_staff

    total = runs.count()
    if not total:
        return ""
    visible = owned_by_or_staff(runs, user=by)
    names = list(visible.order_by("id").values_list("name", flat=True)[:20])
    others = total - visible.count()
    parts = names + ([f"{others} run(s) of other users"] if others else [])
    return f"run(s): {', '.join(parts)}"


def dataset_delete(*, dataset: Dataset, by) -> None:
    """Delete a dataset no run uses (its converted rows and, if no other dataset shares it, its file).

    Only its owner or staff may (NotPermitted). A dataset in use answers 409 with the runs' names
    (another user's runs only counted), or the count of the evaluations made on it (they keep its
    prompts' figures and point at it).

    The checks run with the dataset's row locked (FOR UPDATE), which a run's or an evaluation's
    creation waits for (it takes FOR KEY SHARE on the rows it references, `rlstudio.rowlocks`): one
    created meanwhile is either committed before the lock, so seen here and refused, or waits for the
    deletion and finds no dataset. A dataset already deleted by another request is left gone.
    """
    from django.db.models import Q

    check_can_change(user=by, item=dataset, action="delete")
    run = _run_model()
    with transaction.atomic():
        locked = Dataset.objects.select_for_update().filter(pk=dataset.pk).first()
        if locked is None:
            return
        used = _used_by(run.objects.filter(Q(dataset=locked) | Q(val_dataset=locked)), by=by)
        if used:
            raise CatalogInUse(f"dataset {dataset.name!r} is used by {used}", code="in_use")
        # The evaluations app's reverse relation (a protected key: deleting would fail with a 500).
        evaluated = locked.evaluations.count()
        if evaluated:
            raise CatalogInUse(f"dataset {dataset.name!r} is used by {evaluated} evaluation(s): delete them first",
                               code="in_use")
        paths = [locked.converted_path]
        shared = Dataset.objects.filter(file_path=locked.file_path).exclude(pk=locked.pk).exists()
        if not shared:
            paths.append(locked.file_path)
        audit_record(actor=by, action="dataset.delete", obj=locked, data={"name": locked.name, "sha256": locked.sha256})
        locked.delete()
        transaction.on_commit(lambda: [_remove(p) for p in paths])


# ---- models ---------------------------------------------------------------------------------

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
    name = _clean_name(name or folder.name)
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
    return model_register(owner=owner, name=name, path=str(target))


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
    a queued or running session on it).

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
        used = _used_by(_run_model().objects.filter(Q(model=locked) | Q(reward_model=locked)), by=by)
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
        model.delete()
