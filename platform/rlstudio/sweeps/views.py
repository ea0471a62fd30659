"""Pages of sweeps: the list (paged), the form that launches one, a sweep's table and its charts (the
metric against each axis, chart.py), "stop all" and "delete".
Owner and staff only (anyone else: 404). Views translate; `services` and `selectors` decide."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from rlstudio.paging import paged
from rlstudio.runs.errors import RunInputInvalid, RunRefused

from .chart import sweep_chart
from .grid import value_text
from .sample import axis_text
from .selectors import REWARD, metric_label, sweep_get_for, sweep_list_for, sweep_table


@login_required
def sweep_list(request):
    """The user's sweeps (staff: everyone's), newest first, 50 a page."""
    return render(request, "sweeps/sweep_list.html", {"paged": paged(sweep_list_for(user=request.user), request.GET)})


def _form(request, data=None):
    from rlstudio.catalog.selectors import dataset_list_for, model_asset_list_for
    from rlstudio.runs.selectors import run_config_list_for
    from trainer.recipes import REGISTRY

    from .forms import SweepForm

    return SweepForm(data, datasets=dataset_list_for(user=request.user).filter(status="ready"),
                     models=model_asset_list_for(user=request.user).filter(kind="policy"),
                     configs=run_config_list_for(user=request.user), presets=list(REGISTRY),
                     initial={"preset": "cpu_smoke", "gpus": 0})


@login_required
def sweep_new(request):
    """GET: the sweep form. POST: launch the sweep (all its runs, or none), then its page; a refusal
    is shown on the field it names."""
    from .services import SweepInputs, sweep_launch

    form = _form(request, request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        d = form.cleaned_data
        saved = d["saved_config"].config if d.get("saved_config") else None
        inputs = SweepInputs(dataset=d["dataset"], val_dataset=d.get("val_dataset"), model=d["model"], gpus=d["gpus"],
                             preset=None if saved else d["preset"], saved=saved, overrides=form.override_list(),
                             retention=form.retention())
        try:
            sweep = sweep_launch(owner=request.user, name=d["name"], axes=d["axes"], inputs=inputs, mode=d["mode"],
                                 runs=d.get("runs"), seed=d.get("seed"))
        except RunInputInvalid as exc:
            form.add_error(form.field_for_error(exc.field), form.error_text(exc.field, str(exc)))
        except RunRefused as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, f"Sweep “{sweep.name}” launched: {sweep.sweep_runs.count()} runs.")
            return redirect("sweeps:detail", sweep_id=sweep.pk)
    return render(request, "sweeps/sweep_form.html", {"form": form, "queue_room": _queue_room(request.user)},
                  status=400 if form.errors else 200)


def _queue_room(user) -> dict[str, int]:
    """How many runs `user` may still queue (every run of a sweep is queued at once, and a sweep of more
    is refused whole: quotas.services.check_queue_cap) and the most runs a sweep may make: the form
    says them beside the sweep's size."""
    from rlstudio.quotas.selectors import quota_for
    from rlstudio.runs.models import Run, RunStatus

    from .services import max_sweep_runs

    limit = quota_for(user=user).max_queued_runs
    queued = Run.objects.filter(owner=user, status=RunStatus.QUEUED).count()
    return {"limit": limit, "queued": queued, "room": max(limit - queued, 0), "max_runs": max_sweep_runs()}


@login_required
def sweep_detail(request, sweep_id: int):
    """A sweep's table: one row per run with its axis values (for random search, the values drawn), the
    best run marked on `?metric=`, and the charts of that metric against each axis."""
    sweep = sweep_get_for(user=request.user, sweep_id=sweep_id)
    return render(request, "sweeps/sweep_detail.html", _sweep_page(request, sweep))


@login_required
def sweep_live(request, sweep_id: int):
    """The sweep page's live part (its table and the charts' data) as a fragment, which
    static/js/sweep_chart.js fetches again while a run of the sweep has not ended."""
    sweep = sweep_get_for(user=request.user, sweep_id=sweep_id)
    return render(request, "sweeps/_sweep_live.html", _sweep_page(request, sweep))


def _sweep_page(request, sweep) -> dict:
    """The context of the sweep page and of its live part: the table on `?metric=` and the charts' data."""
    table = sweep_table(user=request.user, sweep=sweep, metric=request.GET.get("metric"))
    keys = [axis["key"] for axis in sweep.axes]
    rows = [{"row": row, "values": [value_text(row.params.get(k)) for k in keys],
             "metric_value": row.value_of(table.metric)} for row in table.rows]
    axes = [(axis["key"], axis_text(axis)) for axis in sweep.axes]
    live = any(not row.run.is_terminal for row in table.rows)
    label = metric_label(table.metric)
    return {
        "sweep": sweep, "table": table, "keys": keys, "rows": rows, "live": live, "axes": axes,
        "metric_choices": [(m, metric_label(m)) for m in table.metrics], "metric_label": label,
        "metric_column": table.metric != REWARD,  # the latest reward has its column already
        "compare_ids": ",".join(str(i) for i in table.run_ids[:20]),
        "chart": sweep_chart(axes=sweep.axes, rows=rows, metric_label=label),
    }


@login_required
@require_POST
def sweep_stop_view(request, sweep_id: int):
    """Stop every run of the sweep that has not ended (owner or staff)."""
    from .services import sweep_stop

    sweep = sweep_get_for(user=request.user, sweep_id=sweep_id)
    done = sweep_stop(sweep=sweep, by=request.user)
    messages.success(request, f"Stopping {len(done.stopped)} run(s) of the sweep.")
    for run_id, why in done.refused.items():
        messages.warning(request, f"Run #{run_id}: {why}")
    return redirect("sweeps:detail", sweep_id=sweep.pk)


@login_required
@require_POST
def sweep_delete_view(request, sweep_id: int):
    """Delete the sweep, not its runs (owner or staff); refused while a run of it has not ended."""
    from .services import sweep_delete

    sweep = sweep_get_for(user=request.user, sweep_id=sweep_id)
    try:
        grouped = sweep_delete(sweep=sweep, by=request.user)
    except RunRefused as exc:
        messages.error(request, str(exc))
        return redirect("sweeps:detail", sweep_id=sweep.pk)
    messages.success(request, f"Sweep “{sweep.name}” deleted; its {grouped} run(s) stay on the runs list.")
    return redirect("sweeps:list")
