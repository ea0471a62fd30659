"""A dataset's upload (`dataset_upload`: stored under a temporary name, its validation queued) and its
deletion (`dataset_delete`). The layout of the files: `files`; validation: `validation`."""
from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path

from django.conf import settings
from django.db import connection, transaction
from django.db.models import ProtectedError

from rlstudio.accounts.services import audit_record
from rlstudio.worklocks import held

from ..formats import RowError, detect_format
from ..models import Dataset, ModelAsset
from ..presets import PRESETS
from ..errors import CatalogInUse, CatalogRefused, CatalogTooLarge
from ..sharing import check_can_change
from ..storage import added_bytes, storage_refusal
from .files import clean_name, remove_path, upload_limits
from .usage import protected_by, run_model, used_by
from .validation import VALIDATE_LOCK_SPACE, send_validation


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
    source_name = clean_name(os.path.basename(upload.name or "")) or "upload"
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
            owner=owner, name=clean_name(name) or source_name, file_path=str(part), sha256=sha,
            size_bytes=size, format=detected.format + ("+gzip" if detected.gzipped else ""), preset=preset,
            split=split, status=Dataset.Status.VALIDATING, source_name=source_name, stats_model=stats_model,
        )
        audit_record(actor=owner, action="dataset.upload", obj=dataset,
                     data={"name": dataset.name, "sha256": sha, "size_bytes": size, "preset": preset})
        dataset_id = dataset.pk
        transaction.on_commit(lambda: send_validation(dataset_id, actor=owner))
    return dataset, True


def dataset_delete(*, dataset: Dataset, by) -> None:
    """Delete a dataset no run uses (its converted rows and, if no other dataset shares it, its file).

    Only its owner or staff may (NotPermitted). A dataset in use answers 409 with the runs' names
    (another user's runs only counted), or the count of the evaluations made on it (they keep its
    prompts' figures and point at it), or of the other records that protect it (sweeps).

    The checks run with the dataset's row locked (FOR UPDATE), which a run's or an evaluation's
    creation waits for (it takes FOR KEY SHARE on the rows it references, `rlstudio.rowlocks`): one
    created meanwhile is either committed before the lock, so seen here and refused, or waits for the
    deletion and finds no dataset. A dataset already deleted by another request is left gone. While
    its validator is at work (converting, moving its file, counting tokens) the deletion answers 409
    `validating`: a deletion in the middle would leave its files behind.
    """
    check_can_change(user=by, item=dataset, action="delete")
    # The validator's work lock, held through the deletion: a validator at work refuses it (its files
    # half moved); one not started yet finds the dataset gone once it may start.
    with held(VALIDATE_LOCK_SPACE, dataset.pk) as no_validator:
        _delete_locked(dataset, by=by, validating=not no_validator)


def _delete_locked(dataset: Dataset, *, by, validating: bool) -> None:
    from django.db.models import Q

    run = run_model()
    with transaction.atomic():
        locked = Dataset.objects.select_for_update().filter(pk=dataset.pk).first()
        if locked is None:
            return
        if validating:
            raise CatalogInUse(f"dataset {dataset.name!r} is being validated (its rows converted, its token "
                               "statistics counted): delete it once that has ended", code="validating")
        used = used_by(run.objects.filter(Q(dataset=locked) | Q(val_dataset=locked)), by=by)
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
        try:
            locked.delete()
        except ProtectedError as exc:  # another app's record keeps it (a sweep): nothing is deleted
            raise CatalogInUse(f"dataset {dataset.name!r} is used by {protected_by(exc)}: delete them first",
                               code="in_use") from None
        transaction.on_commit(lambda: [remove_path(p) for p in paths])
