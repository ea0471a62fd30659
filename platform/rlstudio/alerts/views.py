"""The alerts page (/alerts/: notifications, rules, where each lifecycle event goes) and the form
POSTs of it and of the run page's alerts card. Thin: read through the selectors, write through the
services, then redirect (back to `next` when it is a path of this site)."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from . import rules as R
from . import selectors as sel
from .models import CHANNELS, LIFECYCLE_EVENTS
from .services import (AlertInvalid, email_enabled, notifications_mark_read, rule_create, rule_delete, rule_update,
                       rules_add_recommended, settings_update)


def _back(request, default: str = ""):
    target = request.POST.get("next") or default or reverse("alerts:page")
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}, require_https=False) \
            or not target.startswith("/"):
        target = reverse("alerts:page")
    return HttpResponseRedirect(target)


@login_required
@require_GET
def alerts_page(request):
    user = request.user
    rules = list(sel.rules_for(user=user).order_by("run_id", "kind", "id"))
    prefs = sel.settings_of(user=user)
    routes = [{"event": e, "channels": [(c, c in prefs.routes.get(e, ())) for c in CHANNELS]}
              for e in LIFECYCLE_EVENTS]
    return render(request, "alerts/alerts.html", {
        "notifications": sel.notifications_for(user=user)[:100],
        "defaults": [r for r in rules if r.run_id is None],
        "run_rules": [r for r in rules if r.run_id is not None],
        "catalogue": list(R.CATALOGUE.values()), "ops": R.OPS,
        "webhooks": list(sel.webhooks_available()), "prefs": prefs, "routes": routes,
        "email_enabled": email_enabled(),
        # e-mail boxes are shown off (their settings kept) while nothing can be mailed to this user
        "can_email": email_enabled() and bool(user.email),
    })


def _form_rule(post) -> dict:
    data = {"kind": post.get("kind", "")}
    for name in ("metric", "op", "threshold", "window"):
        if post.get(name, "") != "":
            data[name] = post[name]
    if "window" in data:
        try:
            data["window"] = int(data["window"])
        except ValueError:
            raise AlertInvalid("window", "must be an integer") from None
    for name in ("email", "pause"):
        data[name] = post.get(name) == "1"
    data["webhook"] = post.get("webhook") or None
    return data


@login_required
@require_POST
def rule_add(request):
    run = None
    try:
        if request.POST.get("run"):
            run = sel.own_run_for(user=request.user, run_id=request.POST["run"])
        rule = rule_create(owner=request.user, data=_form_rule(request.POST), run=run)
    except AlertInvalid as exc:
        messages.error(request, f"Rule not added: {exc.field}: {exc.message}")
    else:
        where = f"run “{run.name}”" if run else "all your runs (a default)"
        messages.success(request, f"Rule added for {where}: {R.CATALOGUE[rule.kind].title}.")
    return _back(request)


@login_required
@require_POST
def rule_remove(request, rule_id: int):
    rule_delete(rule=sel.rule_get_for(user=request.user, rule_id=rule_id), by=request.user)
    messages.success(request, "Rule deleted.")
    return _back(request)


@login_required
@require_POST
def rule_toggle(request, rule_id: int):
    rule = sel.rule_get_for(user=request.user, rule_id=rule_id)
    rule_update(rule=rule, by=request.user, data={"enabled": not rule.enabled})
    return _back(request)


@login_required
@require_POST
def rules_recommended(request):
    made = rules_add_recommended(owner=request.user)
    messages.success(request, f"{len(made)} recommended rule{'s' if len(made) != 1 else ''} added as defaults.")
    return _back(request)


@login_required
@require_POST
def settings_save(request):
    routes = {e: [c for c in CHANNELS if request.POST.get(f"{e}:{c}") == "1"] for e in LIFECYCLE_EVENTS}
    try:
        settings_update(user=request.user, routes=routes, webhook=request.POST.get("webhook") or None)
    except AlertInvalid as exc:
        messages.error(request, f"Not saved: {exc.field}: {exc.message}")
    else:
        messages.success(request, "Notification settings saved.")
    return _back(request)


@login_required
@require_POST
def notifications_read(request):
    notifications_mark_read(user=request.user)
    return _back(request)
