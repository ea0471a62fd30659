"""Reads of the catalog, always narrowed to what the user may see: their own objects, the ones shared
with everyone, or everything for staff. Another user's private object looks absent (Http404), so an
id can never reach it. What a user may change is `rlstudio.catalog.sharing`'s business."""
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import F, Q, QuerySet
from django.http import Http404

from rlstudio.sorting import SortColumn

from .models import Dataset, ModelAsset, Visibility

# The datasets and models list pages' columns that sort (rlstudio.sorting), in the tables' order; the
# default is newest first ("-created"). Counts, sizes and dates sort descending at the first click.
DATASET_SORTS = {
    "name": SortColumn("Name", lambda: F("name")),
    "owner": SortColumn("Owner", lambda: F("owner__username")),
    "visibility": SortColumn("Visibility", lambda: F("visibility")),
    "status": SortColumn("Status", lambda: F("status")),
    "preset": SortColumn("Preset", lambda: F("preset")),
    "split": SortColumn("Split", lambda: F("split")),
    "format": SortColumn("Format", lambda: F("format")),
    "rows": SortColumn("Rows", lambda: F("num_rows"), desc_first=True, num=True),
    "size": SortColumn("Size", lambda: F("size_bytes"), desc_first=True, num=True),
    "created": SortColumn("Created", lambda: F("created"), desc_first=True),
}
MODEL_SORTS = {
    "name": SortColumn("Name", lambda: F("name")),
    "kind": SortColumn("Kind", lambda: F("kind")),
    "owner": SortColumn("Owner", lambda: F("owner__username")),
    "visibility": SortColumn("Visibility", lambda: F("visibility")),
    "path": SortColumn("Path", lambda: F("path")),
    "source": SortColumn("Source", lambda: F("source")),
    "chat": SortColumn("Chat format", lambda: F("chat_family")),
    "parameters": SortColumn("Parameters", lambda: F("num_parameters"), desc_first=True, num=True),
    "weights": SortColumn("Weights", lambda: F("architecture")),
    "created": SortColumn("Created", lambda: F("created"), desc_first=True),
}
LIST_DEFAULT_SORT = "-created"


def visible_to(queryset: QuerySet, *, user: AbstractBaseUser) -> QuerySet:
    """`queryset` (datasets or models) narrowed to the user's own, the shared ones, or all for staff."""
    if not getattr(user, "is_authenticated", False):
        return queryset.none()
    if user.is_staff:
        return queryset
    return queryset.filter(Q(owner=user) | Q(visibility=Visibility.EVERYONE))


def _get_visible(queryset: QuerySet, *, user: AbstractBaseUser, pk):
    try:
        obj = visible_to(queryset, user=user).filter(pk=pk).first()
    except (TypeError, ValueError):  # a malformed id looks like a missing one
        obj = None
    if obj is None:
        raise Http404("Not found")
    return obj


def dataset_list_for(*, user: AbstractBaseUser) -> QuerySet[Dataset]:
    """Datasets the user may see (own, shared; staff: all), newest first."""
    return visible_to(Dataset.objects.select_related("owner"), user=user).order_by("-created", "-id")


def dataset_get_for(*, user: AbstractBaseUser, dataset_id) -> Dataset:
    """One visible dataset, or Http404."""
    return _get_visible(Dataset.objects.select_related("owner"), user=user, pk=dataset_id)


def model_asset_list_for(*, user: AbstractBaseUser) -> QuerySet[ModelAsset]:
    """Model assets the user may see (own, shared; staff: all), newest first."""
    return visible_to(ModelAsset.objects.select_related("owner"), user=user).order_by("-created", "-id")


def model_asset_get_for(*, user: AbstractBaseUser, model_id) -> ModelAsset:
    """One visible model asset, or Http404."""
    return _get_visible(ModelAsset.objects.select_related("owner"), user=user, pk=model_id)


def model_asset_default_for(*, user: AbstractBaseUser) -> ModelAsset | None:
    """The model whose tokenizer measures a new upload's prompts when none was picked: the user's newest
    with a tokenizer, else the newest shared one."""
    models = ModelAsset.objects.filter(tokenizer_ok=True, kind=ModelAsset.Kind.POLICY).order_by("-created", "-id")
    return models.filter(owner=user).first() or models.filter(visibility=Visibility.EVERYONE).first()


def dataset_rows(*, dataset: Dataset, offset: int, limit: int) -> list[dict]:
    """Converted rows [offset, offset+limit) of a ready dataset, as the trainer will read them."""
    from pathlib import Path

    from .conversion import read_converted

    if dataset.status != Dataset.Status.READY or not dataset.converted_path:
        return []
    return read_converted(Path(dataset.converted_path), list(dataset.row_index), offset=offset, limit=limit)


def row_view(row: dict) -> dict:
    """A converted row as the API shows it: prompt messages, ground truth, tools, data source."""
    extra = row.get("extra_info") or {}
    reward_model = row.get("reward_model") or {}
    return {
        "prompt": row.get("prompt"),
        "ground_truth": reward_model.get("ground_truth") if isinstance(reward_model, dict) else None,
        "tools": extra.get("tools") or [],
        "data_source": row.get("data_source", ""),
    }
