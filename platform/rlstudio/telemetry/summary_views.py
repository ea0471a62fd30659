"""The run page's Summary card: GET /runs/{id}/summary/card/, an HTML fragment with the run's held-out
(validation) metrics at a glance, each one's first, best (with its step) and last value, the
training reward's (critic/score/mean) first and last, all from every stored metric row, and the hints
of the last steps when the run cannot learn (telemetry.hints)
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
from .hints import WINDOW, run_hints
from .models import MetricRow

CACHE_S = 3600


def summary_figures(run_id: int, *, max_response_length=None) -> dict:
    """The card's figures: {"held_out": [{"metric", first/best/last with steps}], "train": ... or None,
    "hints": telemetry.hints.run_hints of the last steps}, cached until the run's metric rows change (a
    new step, or a step's row merged with later metrics)."""
    key = f"rlstudio:run-summary:{run_id}:{rows_state([run_id]).get(run_id, '0')}"
    figures = cache.get(key)
    if figures is None:
        held = held_out_of(run_id, first=True)
        last = MetricRow.objects.filter(run_id=run_id).order_by("-step").values_list("metrics", flat=True)[:WINDOW]
        figures = {"held_out": [{"metric": metric, **stats} for metric, stats in sorted(held.items())],
                   "train": train_reward_of(run_id),
                   "hints": run_hints(list(last)[::-1], max_response_length=max_response_length)}
        cache.set(key, figures, CACHE_S)
    return figures


@login_required
@require_GET
def summary_card_view(request, run_id: int):
    """The Summary card of a run the user may read (owner, shared with them, staff); anyone else a 404."""
    run = run_get_for(user=request.user, run_id=run_id)
    limit = (run.config.get("data") or {}).get("max_response_length") if isinstance(run.config, dict) else None
    return render(request, "runs/_summary_card.html", {"run": run, "train_metric": TRAIN_REWARD,
                                                        **summary_figures(run.pk, max_response_length=limit)})
