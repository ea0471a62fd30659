"""Reads of the catalog, always narrowed to what the user may see."""
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import QuerySet

from rlstudio.ownership import get_visible_or_404, owned_by_or_staff

from .models import Dataset, ModelAsset


def dataset_list_for(*, user: AbstractBaseUser) -> QuerySet[Dataset]:
    """Datasets the user may see, newest first."""
    return owned_by_or_staff(Dataset.objects.select_related("owner"), user=user).order_by("-created", "-id")


def dataset_get_for(*, user: AbstractBaseUser, dataset_id) -> Dataset:
    """One visible dataset, or Http404."""
    return get_visible_or_404(Dataset.objects.select_related("owner"), user=user, pk=dataset_id)


def model_asset_list_for(*, user: AbstractBaseUser) -> QuerySet[ModelAsset]:
    """Model assets the user may see, newest first."""
    return owned_by_or_staff(ModelAsset.objects.select_related("owner"), user=user).order_by("-created", "-id")


def model_asset_get_for(*, user: AbstractBaseUser, model_id) -> ModelAsset:
    """One visible model asset, or Http404."""
    return get_visible_or_404(ModelAsset.objects.select_related("owner"), user=user, pk=model_id)


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
