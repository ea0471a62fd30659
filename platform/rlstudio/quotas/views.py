"""The staff quota page (/quotas/admin/): the cluster, each user's usage against their quota, each
quota'd team's usage against its shared limits, the queue,
and the admin's actions (set a quota, move or cancel a queued run). Staff only; actions are POSTs
(CSRF) handed to the services, which check staff again and audit."""
from __future__ import annotations

from dataclasses import asdict

from django.contrib import messages
from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpResponseBadRequest
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_GET, require_POST

from rlstudio.runs.models import Run
from rlstudio.runs.services import RunRefused, run_queue_move
from rlstudio.runs.services.admission import QUEUE_MOVES

from .forms import QuotaForm
from .selectors import quota_admin_overview
from .services import QUOTA_FIELDS, QuotaInvalid, queue_cancel, quota_set
from .team_quotas import team_usages_all


def _page(request, form: QuotaForm, *, status: int = 200):
    overview = quota_admin_overview()
    chart = {"users": [asdict(u) for u in overview.users]}
    return render(request, "quotas/admin.html", {"overview": overview, "teams": team_usages_all(), "form": form,
                                                 "chart": chart}, status=status)


@staff_member_required
@require_GET
def quota_admin(request):
    """The page; `?user=<username>` fills the form with that user's quota now."""
    initial = {}
    username = request.GET.get("user", "")
    if username:
        row = next((u for u in quota_admin_overview().users if u.username == username), None)
        if row is not None:
            initial = {"user": row.username, **{f: getattr(row, f) for f in QUOTA_FIELDS}}
    return _page(request, QuotaForm(initial=initial))


@staff_member_required
@require_POST
def quota_admin_set(request):
    form = QuotaForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            quota = quota_set(user=data["user"], by=request.user, **{f: data[f] for f in QUOTA_FIELDS})
        except QuotaInvalid as exc:
            form.add_error(exc.field, str(exc))
        else:
            messages.success(request, f"Quota of {data['user'].get_username()} saved: {quota}.")
            return redirect(reverse("quotas:admin") + "?" + urlencode({"user": data["user"].get_username()}))
    return _page(request, form, status=400)


@staff_member_required
@require_POST
def queue_move(request, run_id: int):
    run = get_object_or_404(Run, pk=run_id)
    to = request.POST.get("to", "")
    if to not in QUEUE_MOVES:
        return HttpResponseBadRequest(f"to: must be one of {', '.join(QUEUE_MOVES)}")
    try:
        run_queue_move(run=run, by=request.user, to=to)
    except RunRefused as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Run #{run.pk} ({run.name}) moved to the {to} of the queue.")
    return redirect("quotas:admin")


@staff_member_required
@require_POST
def queue_cancel_view(request, run_id: int):
    run = get_object_or_404(Run, pk=run_id)
    try:
        queue_cancel(run=run, by=request.user)
    except RunRefused as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Run #{run.pk} ({run.name}) cancelled.")
    return redirect("quotas:admin")
