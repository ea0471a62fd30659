"""Dataset storage: the bytes a user's datasets keep on disk, and the checks another app registers to
limit them (the quotas app's per-user `dataset_storage_gb`), called by `services.datasets.dataset_upload`.

What is counted (`dataset_bytes_used`), of the user's datasets that are not `invalid` (validation
removes a refused file and its rows): their uploaded files, each distinct content once (the stored
file is named by its content hash, so two datasets of one owner with the same bytes, e.g. another
split, share it on disk; a dataset still `validating` counts its upload), plus each one's converted
rows (`rows/<id>.jsonl`, `Dataset.converted_bytes`, recorded when validation writes them). An upload
is checked by its file's size: its rows are not known until validation, so they may take the owner
past their quota afterwards, and then their next upload is refused.

The catalog never imports the app that limits storage (quotas imports runs, which imports the
catalog): that app registers its check from its AppConfig.ready (`on_dataset_storage_check`), and
what it allows (`on_dataset_storage_allowance`) for the datasets page.
"""

from __future__ import annotations

from collections.abc import Callable

from django.db import connection

from .models import Dataset

BYTES_PER_GB = 10**9  # storage is shown in decimal gigabytes (as the quotas app counts it)

_STORAGE_CHECKS: list[Callable[[object, int], str]] = []
_STORAGE_ALLOWANCES: list[Callable[[object], int | None]] = []


def on_dataset_storage_check(check: Callable[[object, int], str]) -> Callable[[object, int], str]:
    """Register `check(owner, size_bytes)`: '' when `owner` may store `size_bytes` more bytes of
    datasets, else the sentence that says why not (shown to the user on the `file` field).
    `dataset_upload` calls it inside its per-owner locked transaction, after its same-bytes dedupe, so
    two uploads of one owner at once are checked one after the other."""
    if check not in _STORAGE_CHECKS:
        _STORAGE_CHECKS.append(check)
    return check


def on_dataset_storage_allowance(
    allowance: Callable[[object], int | None],
) -> Callable[[object], int | None]:
    """Register `allowance(owner)`: the bytes of datasets `owner` may keep (None: no limit from it)."""
    if allowance not in _STORAGE_ALLOWANCES:
        _STORAGE_ALLOWANCES.append(allowance)
    return allowance


def _sql(*, by_owner: bool) -> str:
    table = Dataset._meta.db_table
    where = "status <> %s" + ("" if by_owner else " AND owner_id = %s")
    # Each distinct stored file of an owner (same content hash, same size) once, plus every dataset's rows.
    return (
        f"SELECT owner_id, COALESCE(SUM(b), 0) FROM ("
        f"SELECT owner_id, size_bytes AS b FROM (SELECT DISTINCT owner_id, sha256, size_bytes FROM {table} "
        f"WHERE {where}) AS files "
        f"UNION ALL SELECT owner_id, converted_bytes AS b FROM {table} WHERE {where}"
        f") AS stored GROUP BY owner_id"
    )


def dataset_bytes_used(*, owner) -> int:
    """The bytes `owner`'s datasets keep on disk, as counted in the module's docstring (one query)."""
    with connection.cursor() as cur:
        cur.execute(_sql(by_owner=False), [Dataset.Status.INVALID, owner.pk] * 2)
        row = cur.fetchone()
    return int(row[1]) if row else 0


def dataset_bytes_used_by_owner() -> dict[int, int]:
    """{owner id: bytes} of every user with datasets (one query), for the staff overview."""
    with connection.cursor() as cur:
        cur.execute(_sql(by_owner=True), [Dataset.Status.INVALID] * 2)
        return {owner_id: int(used) for owner_id, used in cur.fetchall()}


def added_bytes(*, owner, sha256: str, size_bytes: int) -> int:
    """The bytes a new dataset of `owner` with this content adds to their count at upload: none when
    one of their datasets (not invalid) already holds the same bytes (the stored file is shared), else
    its size (its converted rows count once validation has written them)."""
    same = Dataset.objects.filter(owner=owner, sha256=sha256).exclude(status=Dataset.Status.INVALID)
    return 0 if same.exists() else size_bytes


def storage_refusal(*, owner, size_bytes: int) -> str:
    """The first registered check's reason to refuse `owner` `size_bytes` more bytes, or ''."""
    for check in list(_STORAGE_CHECKS):
        why = check(owner, size_bytes)
        if why:
            return why
    return ""


def storage_allowed_bytes(*, owner) -> int | None:
    """The least any registered allowance gives `owner` (None: no allowance registered)."""
    allowed = [
        a for a in (allowance(owner) for allowance in list(_STORAGE_ALLOWANCES)) if a is not None
    ]
    return min(allowed) if allowed else None


def storage_summary(*, owner) -> dict:
    """What the datasets page shows: `used_gb` of `allowed_gb` (None: no allowance registered)."""
    allowed = storage_allowed_bytes(owner=owner)
    return {
        "used_gb": dataset_bytes_used(owner=owner) / BYTES_PER_GB,
        "allowed_gb": None if allowed is None else allowed / BYTES_PER_GB,
    }
