"""The run page's export buttons: POST /runs/{id}/exports/ with `step`, POST
/runs/{id}/exports/{eid}/delete/ (owner or staff; a reader 403, anyone else 404), then back to the run
page, where the Exports card shows the state; GET /runs/{id}/exports/card/, that card as it is now (an
HTML fragment the open page refreshes from)."""
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET
from django.urls import reverse
from django.views.decorators.http import require_POST

from rlstudio.runs.selectors import run_get_for
from rlstudio.text import ascii_uint


@login_required
@require_GET
def export_card_view(request, run_id: int):
    """The run page's Exports card as it is now, for whoever may read the run (404 otherwise): the page
    fetches it again while the run is live or an export is under way, and on each status event, so a
    checkpoint saved since it loaded (a stop with a checkpoint) is offered without a reload."""
    from django.middleware.csrf import get_token

    from .templatetags.export_tags import run_exports

    run = run_get_for(user=request.user, run_id=run_id)
    context = run_exports({"run": run, "request": request, "csrf_token": get_token(request)})
    return render(request, "exports/run_section.html", context)


@login_required
@require_POST
def export_start_view(request, run_id: int):
    from rlstudio.runs.services import RunNotPermitted

    from .services import ExportInvalid, ExportRefused, export_new

    run = run_get_for(user=request.user, run_id=run_id)
    raw = request.POST.get("step", "")
    step = ascii_uint(raw, max_digits=9)
    if step is None:
        step = raw[:20]  # export_new refuses it, naming step
    try:
        export, queued = export_new(user=request.user, run=run, data={"step": step})
    except RunNotPermitted as exc:
        raise PermissionDenied(exc.message) from None
    except (ExportInvalid, ExportRefused) as exc:
        messages.error(request, str(exc))
    else:
        if queued:
            messages.success(request, f"Export of step {export.step} queued.")
        else:
            messages.info(request, f"Step {export.step} is already exported ({export.status}).")
    return redirect(reverse("telemetry:run", kwargs={"run_id": run.pk}) + "#exports-card")


@login_required
@require_POST
def export_delete_view(request, run_id: int, export_id: int):
    from rlstudio.catalog.errors import CatalogRefused
    from rlstudio.runs.services import RunNotPermitted

    from .selectors import export_get_for
    from .services import ExportRefused, export_delete

    export = export_get_for(user=request.user, run_id=run_id, export_id=export_id)
    try:
        export_delete(user=request.user, export=export)
    except RunNotPermitted as exc:
        raise PermissionDenied(exc.message) from None
    except (ExportRefused, CatalogRefused) as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Export of step {export.step} deleted.")
    return redirect(reverse("telemetry:run", kwargs={"run_id": run_id}) + "#exports-card")
