"""Pages of the catalog: datasets (list, upload, detail with preview, statistics and reward check)
and models (list, register, detail with its evaluations, delete); share / unshare for staff. Every
write goes through the same services as the API; a refused one (NotPermitted, CatalogRefused) comes
back as a message, and the controls a user may not use are not shown."""
import json

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from rlstudio.ownership import owned_by_or_staff
from rlstudio.paging import paged
from rlstudio.sorting import sort_headers, sort_param, sorted_by

from .presets import PRESETS
from .rewardcheck import CheckError, reward_check, reward_names
from .selectors import (DATASET_SORTS, LIST_DEFAULT_SORT, MODEL_SORTS, dataset_get_for, dataset_list_for,
                        dataset_rows, model_asset_get_for, model_asset_list_for, row_view)
from .services.datasets import dataset_delete
from .services.model_assets import model_delete, model_register
from .services.validation import dataset_compute_stats
from .errors import CatalogRefused, NotPermitted
from .sharing import can_change, catalog_set_visibility, check_can_change
from .storage import storage_summary

PREVIEW_ROWS = 5


def _limits() -> dict:
    return {"max_upload_bytes": settings.RLSTUDIO_MAX_UPLOAD_BYTES, "max_line_bytes": settings.RLSTUDIO_MAX_LINE_BYTES,
            "max_nesting_depth": settings.RLSTUDIO_MAX_NESTING_DEPTH,
            "max_decompressed_bytes": settings.RLSTUDIO_MAX_DECOMPRESSED_BYTES}


@login_required
def dataset_list(request):
    sort = sort_param(request.GET.get("sort"), DATASET_SORTS, LIST_DEFAULT_SORT)
    page = paged(sorted_by(dataset_list_for(user=request.user), DATASET_SORTS, sort), request.GET)
    return render(request, "catalog/dataset_list.html", {
        "datasets": list(page.rows), "paged": page, "storage": storage_summary(owner=request.user),
        "headers": sort_headers(sort, DATASET_SORTS), "sort": sort})


@login_required
def dataset_upload_page(request):
    return render(request, "catalog/dataset_upload.html", {
        "presets": PRESETS, "limits": _limits(), "models": model_asset_list_for(user=request.user).filter(kind="policy")[:100],
    })


def _registries() -> tuple[list[str], list[str]]:
    from trainer.tools.base import registered_tools

    return reward_names(), registered_tools()  # built-in and operator-registered rewards


@login_required
def dataset_detail(request, dataset_id: int):
    dataset = dataset_get_for(user=request.user, dataset_id=dataset_id)
    rewards, tools = _registries()
    check = None
    check_error = ""
    # The check's form starts at the API's default reward and, once submitted, shows what was checked.
    picked_reward, picked, picked_model = "default", [], ""
    if request.method == "POST" and request.POST.get("action") == "reward_check":
        picked_reward = request.POST.get("reward") or "default"
        picked = [t for t in request.POST.getlist("tools") if t in tools]
        picked_model = request.POST.get("model", "")
        parser = "hermes"
        try:
            if picked_model:  # tool calls written in that model's chat format
                parser = model_asset_get_for(user=request.user, model_id=picked_model).tool_parser or parser
            check = reward_check(dataset_rows(dataset=dataset, offset=0, limit=3),
                                 reward_name=picked_reward, tool_names=picked, parser=parser)
        except CheckError as exc:
            check_error = str(exc)
        except (Http404, ValueError):
            check_error = "no such model"
    elif request.method == "POST" and request.POST.get("action") == "stats":
        try:
            check_can_change(user=request.user, item=dataset, action="recompute the statistics of")
            model = model_asset_get_for(user=request.user, model_id=request.POST.get("model"))
            mpl = max(1, min(1 << 20, int(request.POST.get("max_prompt_length") or 1024)))
            dataset_compute_stats(dataset=dataset, model=model, max_prompt_length=mpl)
            return redirect("catalog:dataset_detail", dataset_id=dataset.pk)
        except NotPermitted as exc:
            messages.error(request, exc.message)
            return redirect("catalog:dataset_detail", dataset_id=dataset.pk)
        except CatalogRefused as exc:
            messages.error(request, exc.message)
        except ValueError as exc:
            messages.error(request, str(exc))
        except Exception as exc:  # Http404 for a model that is not the user's
            messages.error(request, f"statistics failed: {exc}")
    prompt_stats = (dataset.stats or {}).get("prompt_tokens") or {}
    return render(request, "catalog/dataset_detail.html", {
        "dataset": dataset,
        "preview": [row_view(r) for r in dataset_rows(dataset=dataset, offset=0, limit=PREVIEW_ROWS)],
        "prompt_stats": prompt_stats,
        "histogram": prompt_stats.get("histogram"),
        "stats_error": (dataset.stats or {}).get("error", ""),
        "rewards": rewards, "tools": tools, "check": check, "check_error": check_error,
        "picked_reward": picked_reward, "picked_tools": picked, "picked_model": picked_model,
        "models": model_asset_list_for(user=request.user).filter(tokenizer_ok=True, kind="policy")[:100],
        **_runs_from(owned_by_or_staff(dataset.runs.order_by("-created"), user=request.user)),
        "can_change": can_change(user=request.user, item=dataset),
    })


@login_required
@require_POST
def dataset_delete_view(request, dataset_id: int):
    dataset = dataset_get_for(user=request.user, dataset_id=dataset_id)
    try:
        dataset_delete(dataset=dataset, by=request.user)
    except (NotPermitted, CatalogRefused) as exc:
        messages.error(request, exc.message)
        return redirect("catalog:dataset_detail", dataset_id=dataset.pk)
    messages.success(request, f"Deleted dataset {dataset.name}.")
    return redirect("catalog:dataset_list")


@login_required
def model_list(request):
    error, field = "", ""
    if request.method == "POST":
        try:
            model = model_register(owner=request.user, name=request.POST.get("name", ""),
                                   path=request.POST.get("path", ""))
            if model.owner_id != request.user.pk:
                messages.info(request, f"That folder is already shared as model {model.name!r}: use it as it is.")
            return redirect("catalog:model_list")
        except CatalogRefused as exc:
            error, field = exc.message, exc.field or ""
    sort = sort_param(request.GET.get("sort"), MODEL_SORTS, LIST_DEFAULT_SORT)
    page = paged(sorted_by(model_asset_list_for(user=request.user), MODEL_SORTS, sort), request.GET)
    return render(request, "catalog/model_list.html", {
        "models": list(page.rows), "paged": page, "headers": sort_headers(sort, MODEL_SORTS), "sort": sort, "register_error": error, "register_field": field,
        "model_roots": settings.RLSTUDIO_MODEL_ROOTS, "json": json,
    })


RUNS_SHOWN = 20  # a detail page names this many of the runs on a dataset or model; the runs list has them all


def _runs_from(runs) -> dict:
    """The newest RUNS_SHOWN runs of a queryset and how many there are (the page links the rest)."""
    return {"runs": list(runs[:RUNS_SHOWN]), "runs_total": runs.count()}


@login_required
def model_detail(request, model_id: int):
    """One model the user may see: its catalog record and (the evaluations app's card, through its
    template tag) its evaluations and the form to evaluate it."""
    model = model_asset_get_for(user=request.user, model_id=model_id)
    return render(request, "catalog/model_detail.html", {
        "model": model, "can_change": can_change(user=request.user, item=model),
        **_runs_from(owned_by_or_staff(model.runs.order_by("-created"), user=request.user)),
    })


@login_required
@require_POST
def model_delete_view(request, model_id: int):
    model = model_asset_get_for(user=request.user, model_id=model_id)
    try:
        model_delete(model=model, by=request.user)
    except (NotPermitted, CatalogRefused) as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Deleted model {model.name}.")
    return redirect("catalog:model_list")


@login_required
@require_POST
def visibility_view(request, kind: str, item_id: int):
    """Staff's share / unshare control: POST visibility=everyone|private."""
    if kind == "datasets":
        item = dataset_get_for(user=request.user, dataset_id=item_id)
        back = redirect("catalog:dataset_detail", dataset_id=item.pk)
    else:
        item = model_asset_get_for(user=request.user, model_id=item_id)
        back = redirect("catalog:model_list")
    try:
        if catalog_set_visibility(item=item, by=request.user, visibility=request.POST.get("visibility", "")):
            now = "shared with everyone" if item.visibility == "everyone" else "private"
            messages.success(request, f"{item.name} is now {now}.")
    except (NotPermitted, CatalogRefused) as exc:
        messages.error(request, exc.message)
    return back
