"""The run page's Summary card: GET /runs/{id}/summary/card/, an HTML fragment with the run's held-out
(validation) metrics at a glance, each one's first, best (with its step) and last value, and the
training reward's (critic/score/mean) first and last, all from every stored metric row
(telemetry.compare.held_out_of and train_reward_of). The run page loads it after the page itself
(static/js/run_summary.js, with the shared fragment_poller.js) and fetches it again while the run is live."""
from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.views.decorators.http import require_GET

from rlstudio.runs.selectors import run_get_for

from .compare import TRAIN_REWARD, held_out_of, train_reward_of


@login_required
@require_GET
def summary_card_view(request, run_id: int):
    """The Summary card of a run the user may read (owner, shared with them, staff); anyone else a 404."""
    run = run_get_for(user=request.user, run_id=run_id)
    held = held_out_of(run.pk, first=True)
    return render(request, "runs/_summary_card.html", {
        "run": run,
        "held_out": [{"metric": metric, **stats} for metric, stats in sorted(held.items())],
        "train_metric": TRAIN_REWARD,
        "train": train_reward_of(run.pk),
    })
