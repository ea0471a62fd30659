"""The run page's Summary card: GET /runs/{id}/summary/card/, an HTML fragment with the run's held-out
(validation) metrics at a glance, each one's first, best (with its step) and last value, and the
training reward's (critic/score/mean) first and last, all from every stored metric row
(telemetry.compare.held_out_of and train_reward_of). The run page loads it after the page itself
(static/js/run_summary.js, with the shared fragment_poller.js) and fetches it again while the run is live.
The figures read every stored row (about 0.1 to 0.3 s for 10,000 steps), so they are kept in Django's cache
under the state of the run's rows (compare.rows_state: their count and the sum of their times): a refetch
while nothing new was stored costs one small query."""
from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.cache import cache
from django.shortcuts import render
from django.views.decorators.http import require_GET

from rlstudio.runs.selectors import run_get_for

from .compare import TRAIN_REWARD, held_out_of, rows_state, train_reward_of

CACHE_S = 3600


def summary_figures(run_id: int) -> dict:
    """The card's figures: {"held_out": [{"metric", first/best/last with steps}], "train": ... or None},
    cached until the run's metric rows change (a new step, or a step's row merged with later metrics)."""
    key = f"rlstudio:run-summary:{run_id}:{rows_state([run_id]).get(run_id, '0')}"
    figures = cache.get(key)
    if figures is None:
        held = held_out_of(run_id, first=True)
        figures = {"held_out": [{"metric": metric, **stats} for metric, stats in sorted(held.items())],
                   "train": train_reward_of(run_id)}
        cache.set(key, figures, CACHE_S)
    return figures


@login_required
@require_GET
def summary_card_view(request, run_id: int):
    """The Summary card of a run the user may read (owner, shared with them, staff); anyone else a 404."""
    run = run_get_for(user=request.user, run_id=run_id)
    return render(request, "runs/_summary_card.html", {"run": run, "train_metric": TRAIN_REWARD,
                                                        **summary_figures(run.pk)})
