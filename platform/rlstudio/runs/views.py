"""Pages of the runs app: the runs list (home page) and a run's detail."""
import json

from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.utils import timezone

from rlstudio.catalog.selectors import dataset_list_for

from .models import RunStatus
from .selectors import latest_reward, run_get_for, run_list_for


def _duration(run) -> str:
    """Wall time from start to finish (or to now while it runs), as H:MM:SS."""
    if run.started is None:
        return ""
    seconds = int(((run.finished or timezone.now()) - run.started).total_seconds())
    hours, rest = divmod(max(seconds, 0), 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}"


def _row(run) -> dict:
    progress = None
    if run.total_steps:
        progress = min(100, round(100 * run.step / run.total_steps))
    return {"run": run, "reward": latest_reward(run), "duration": _duration(run), "progress": progress}


@login_required
def run_list(request):
    status = request.GET.get("status") or None
    if status not in RunStatus.values:
        status = None
    runs = run_list_for(user=request.user, status=status)[:500]
    return render(
        request,
        "runs/run_list.html",
        {
            "rows": [_row(r) for r in runs],
            "status": status,
            "statuses": RunStatus.values,
            "has_datasets": dataset_list_for(user=request.user).exists(),
        },
    )


@login_required
def run_detail(request, run_id: int):
    run = run_get_for(user=request.user, run_id=run_id)
    return render(
        request,
        "runs/run_detail.html",
        {
            "row": _row(run),
            "run": run,
            "config_json": json.dumps(run.config, indent=2, sort_keys=True),
            "metrics_json": json.dumps(run.latest_metrics, indent=2, sort_keys=True) if run.latest_metrics else "",
        },
    )
