"""Locks a create takes on the rows its new record will reference, so that a concurrent delete of one of
them either waits for the create (and then sees the new record) or has already happened (and the
create refuses, naming the field).

Why: the foreign keys are checked by PostgreSQL only at commit (Django makes them DEFERRABLE INITIALLY
DEFERRED), and a delete's own checks (`on_delete=PROTECT`, the `delete_refusal`s, Django's cascade
collection) read only committed rows. Without a lock, a run created while its dataset is deleted
passes both and fails at commit with a ForeignKeyViolation.

The lock is FOR KEY SHARE: it conflicts with FOR UPDATE and DELETE only, so creates referencing one row
never wait for each other, nor for an update of the row's other columns (a run's status). The delete
paths (`catalog.services.datasets.dataset_delete` / `model_assets.model_delete`, `runs.services.run_delete`) lock the row
FOR UPDATE and then run their checks. The lock order is: these rows (sorted by table and id), then
the owner's admission lock (`QuotaPolicy.lock_owner`): the deletions take the row's lock before any
owner's (their hooks').
"""
from __future__ import annotations

from collections.abc import Iterable

from django.db import connection
from django.db.models import Model


def lock_for_use(refs: Iterable[tuple[str, type[Model], int | None]]) -> str | None:
    """Take FOR KEY SHARE on each row `(field, model class, id)` of `refs` (an id None: none) until the
    caller's transaction ends, in one order (table, id), and return the `field` of the first ref (in the
    given order) whose row no longer exists, else None. Must be called inside a transaction."""
    refs = [(field, model, int(pk)) for field, model, pk in refs if pk is not None]
    present: set[tuple[str, int]] = set()
    for table, column, pk in sorted({(model._meta.db_table, model._meta.pk.column, pk) for _f, model, pk in refs}):
        quote = connection.ops.quote_name
        with connection.cursor() as cur:
            cur.execute(f"SELECT 1 FROM {quote(table)} WHERE {quote(column)} = %s FOR KEY SHARE", [pk])
            if cur.fetchone() is not None:
                present.add((table, pk))
    for field, model, pk in refs:
        if (model._meta.db_table, pk) not in present:
            return field
    return None
