"""Who may change a catalog object, and the writes that rename, share or unshare one.

The rule: a dataset or model is changed (renamed, deleted, statistics recomputed) only by its owner
or staff; only staff share it with everyone or make it private again. Non-owners read a shared object
and launch runs on it, nothing more. Refusals are domain errors (`NotPermitted`, `CatalogRefused`);
the API and the pages turn them into a 403 / 400 or a message.
"""
from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from rlstudio.accounts.services import audit_record

from .errors import CatalogRefused, NotPermitted
from .models import Dataset, ModelAsset, Visibility


def _kind(item: Dataset | ModelAsset) -> str:
    return "dataset" if isinstance(item, Dataset) else "model"


def can_change(*, user: AbstractBaseUser, item: Dataset | ModelAsset) -> bool:
    """True when `user` owns `item` or is staff."""
    return bool(getattr(user, "is_authenticated", False) and (user.is_staff or item.owner_id == user.pk))


def check_can_change(*, user: AbstractBaseUser, item: Dataset | ModelAsset, action: str = "change") -> None:
    """NotPermitted unless `user` owns `item` or is staff (`action` says what was refused)."""
    if not can_change(user=user, item=item):
        raise NotPermitted(f"{_kind(item)} {item.name!r} is shared with you read-only: only its owner "
                           f"({item.owner.get_username()}) or staff can {action} it")


def check_can_share(*, user: AbstractBaseUser) -> None:
    """NotPermitted unless `user` is staff: only staff share with everyone or make private again."""
    if not (getattr(user, "is_authenticated", False) and user.is_staff):
        raise NotPermitted("only staff can share or unshare datasets and models", field="visibility")


def catalog_set_visibility(*, item: Dataset | ModelAsset, by: AbstractBaseUser, visibility: str) -> bool:
    """Share `item` with everyone or make it private (staff only, audited); True when it changed."""
    check_can_share(user=by)
    if visibility not in Visibility.values:
        raise CatalogRefused(f"unknown visibility {visibility!r} (allowed: {', '.join(Visibility.values)})",
                             field="visibility")
    with transaction.atomic():
        locked = type(item).objects.select_for_update().get(pk=item.pk)
        before = locked.visibility
        if before == visibility:
            item.visibility = visibility
            return False
        locked.visibility = item.visibility = visibility
        locked.save(update_fields=["visibility"])
        audit_record(actor=by, action=f"{_kind(item)}.{'share' if visibility == Visibility.EVERYONE else 'unshare'}",
                     obj=locked, data={"name": locked.name, "owner": locked.owner.get_username(),
                                       "from": before, "to": visibility})
    return True


def catalog_update(*, item: Dataset | ModelAsset, by: AbstractBaseUser, name: str | None = None,
                   visibility: str | None = None) -> Dataset | ModelAsset:
    """Rename (owner or staff) and/or share or unshare (staff) `item`; every check runs before any write."""
    check_can_change(user=by, item=item)
    if visibility is not None and visibility != item.visibility:
        check_can_share(user=by)
    if name is not None:
        clean = "".join(ch for ch in name if ch.isprintable()).strip()[:200]
        if not clean:
            raise CatalogRefused("a name is required", field="name")
        if clean != item.name:
            with transaction.atomic():
                before = item.name
                item.name = clean
                item.save(update_fields=["name"])
                audit_record(actor=by, action=f"{_kind(item)}.rename", obj=item, data={"from": before, "to": clean})
    if visibility is not None and visibility != item.visibility:
        catalog_set_visibility(item=item, by=by, visibility=visibility)
    return item
