"""Dataset validation: queuing it (`send_validation`, and `dataset_resend_stuck` for a task the broker
never took), validating and converting an upload (`dataset_validate`: it ends `ready` or `invalid`),
and its prompts' token-length statistics (`dataset_compute_stats`)."""
from __future__ import annotations

import logging
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from rlstudio.accounts.services import audit_record
from rlstudio.worklocks import held

from ..conversion import convert_file, summarize_lengths, token_lengths
from ..formats import RowError
from ..models import Dataset, ModelAsset
from ..errors import CatalogConflict
from .files import remove_path, stored_suffix, upload_limits


log = logging.getLogger(__name__)
DEFAULT_MAX_PROMPT_LENGTH = 1024


def send_validation(dataset_id: int, *, actor=None) -> bool:
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
    age = float(settings.RLSTUDIO_VALIDATION_RESEND_S if older_than_s is None else older_than_s)
    cutoff = timezone.now() - timedelta(seconds=age)
    sent: list[int] = []
    for dataset_id in Dataset.objects.filter(status=Dataset.Status.VALIDATING, created__lt=cutoff) \
            .order_by("id").values_list("id", flat=True)[:100]:
        with held(VALIDATE_LOCK_SPACE, dataset_id) as free:
            if not free:
                continue  # a validator is at work on it
        if not send_validation(dataset_id):
            break  # the broker is still down: try again on the next pass
        sent.append(dataset_id)
    return sent


def _mark_invalid(dataset: Dataset, *, message: str, line: int | None = None, field: str = "") -> None:
    if not Dataset.objects.filter(pk=dataset.pk).exists():
        return
    dataset.status = Dataset.Status.INVALID
    dataset.error, dataset.error_line, dataset.error_field = message[:4000], line, field or ""
    dataset.converted_path, dataset.row_index, dataset.num_rows, dataset.converted_bytes = "", [], None, 0
    dataset.save(update_fields=["status", "error", "error_line", "error_field", "converted_path", "row_index",
                                "num_rows", "converted_bytes"])


VALIDATE_LOCK_SPACE = 0x524C5356  # "RLSV": the advisory-lock key space of dataset validation


def dataset_validate(*, dataset: Dataset) -> Dataset:
    """Validate and convert a `validating` dataset (the Celery task's one call).

    Ends `ready` (file moved to its content-hash name, rows converted, statistics computed) or
    `invalid` (the message names line and field; the upload and any partial rows are removed).
    One validator at a time per dataset: a redelivered or duplicated task (late acks) that finds
    another one at work returns at once, leaving the dataset to it.
    """
    with held(VALIDATE_LOCK_SPACE, dataset.pk) as mine:
        if not mine:
            return dataset
        try:
            dataset.refresh_from_db()
        except Dataset.DoesNotExist:  # deleted before its validation started
            return dataset
        return _dataset_validate_locked(dataset=dataset)


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
    from ..formats import Detected

    try:
        if not part.is_file():
            raise RowError("the uploaded file is gone (it was removed before validation)")
        result = convert_file(part, detected=Detected(fmt, gzipped=dataset.format.endswith("+gzip")),
                              preset=dataset.preset, split=dataset.split, limits=upload_limits(),
                              out_path=rows_part, work_dir=work_dir)
    except RowError as exc:
        remove_path(rows_part)
        remove_path(work_dir)
        remove_path(part)
        _mark_invalid(dataset, message=str(exc), line=exc.line, field=exc.field or "")
        return dataset
    except Exception as exc:  # a reader bug or a library refusing the file: say so, keep nothing
        log.exception("validating dataset %s failed", dataset.pk)
        remove_path(rows_part)
        remove_path(work_dir)
        remove_path(part)
        _mark_invalid(dataset, message=f"the file could not be read: {type(exc).__name__}: {exc}")
        return dataset
    stored = root / dataset.sha256[:2] / f"{dataset.sha256}{stored_suffix(dataset.source_name)}"
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
            remove_path(final_rows)
            return dataset
        locked.status = Dataset.Status.READY
        locked.file_path, locked.converted_path = str(stored), str(final_rows)
        locked.converted_bytes = final_rows.stat().st_size
        locked.num_rows, locked.columns, locked.row_index = result.num_rows, result.columns, result.offsets
        locked.preset = result.preset
        locked.error, locked.error_line, locked.error_field = "", None, ""
        locked.save()
        dataset = locked
    from ..selectors import model_asset_default_for

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
