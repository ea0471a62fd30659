"""Pages of the catalog: datasets (list and detail) and models (list)."""
import json

from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from rlstudio.ownership import owned_by_or_staff

from .selectors import dataset_get_for, dataset_list_for, model_asset_list_for


@login_required
def dataset_list(request):
    return render(request, "catalog/dataset_list.html", {"datasets": dataset_list_for(user=request.user)[:500]})


@login_required
def dataset_detail(request, dataset_id: int):
    dataset = dataset_get_for(user=request.user, dataset_id=dataset_id)
    return render(
        request,
        "catalog/dataset_detail.html",
        {
            "dataset": dataset,
            "columns_json": json.dumps(dataset.columns, indent=2),
            "stats_json": json.dumps(dataset.stats, indent=2, sort_keys=True),
            "runs": owned_by_or_staff(dataset.runs.order_by("-created"), user=request.user),
        },
    )


@login_required
def model_list(request):
    return render(request, "catalog/model_list.html", {"models": model_asset_list_for(user=request.user)[:500]})
