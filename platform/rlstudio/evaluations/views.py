"""The Evaluations card as a fragment, on a run's page and on a catalog model's page:

- GET /runs/{id}/evaluations/card/ (whoever may read the run; 404 otherwise). The open page fetches it
  again while an evaluation is queued or running, while the run is live and on each status event, and
  takes the list, the checkpoints offered and the newest finished evaluation from it, so a finished
  evaluation or a new checkpoint shows without a reload.
- GET /models/{id}/evaluations/card/ (whoever may see the model, `model_asset_get_for`; 404
  otherwise), with the user's own evaluations of it (staff: all) as the model page shows them. The open
  page fetches it again while one of them is queued or running and after one is asked for or stopped."""
from django.contrib.auth.decorators import login_required
from django.middleware.csrf import get_token
from django.shortcuts import render
from django.views.decorators.http import require_GET

from rlstudio.catalog.selectors import model_asset_get_for
from rlstudio.runs.selectors import run_get_for


@login_required
@require_GET
def evaluation_card_view(request, run_id: int):
    """The card as `{% run_evaluations %}` renders it on the run page, for the run's readers."""
    from .templatetags.evaluation_tags import run_evaluations

    run = run_get_for(user=request.user, run_id=run_id)
    context = run_evaluations({"run": run, "request": request, "csrf_token": get_token(request)})
    return render(request, "evaluations/run_section.html", context)


@login_required
@require_GET
def model_evaluation_card_view(request, model_id: int):
    """The card as `{% model_evaluations %}` renders it on a catalog model's page, for whoever sees it."""
    from .templatetags.evaluation_tags import model_evaluations

    model = model_asset_get_for(user=request.user, model_id=model_id)
    context = model_evaluations({"model": model, "request": request, "csrf_token": get_token(request)})
    return render(request, "evaluations/model_section.html", context)
