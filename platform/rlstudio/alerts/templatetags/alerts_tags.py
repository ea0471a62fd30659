"""Template tags that put alerts on other apps' pages without those apps importing alerts:

    {% notification_centre %}   the page header's bell, its panel and its script (base.html)
    {% run_alerts run %}        the run page's card: budget, a pause's notice with Resume, firings (also
                                the chart markers, as JSON for run_live.js), the rules that apply
    {% alert_defaults %}        the new-run form's list of the rules every new run gets
    {% budget_summary %}        the quota page's GPU-hour budgets (the month, each active run)
"""
from django import template

from rlstudio.runs.selectors import can_manage

from .. import rules as R
from .. import selectors as sel

register = template.Library()


@register.inclusion_tag("alerts/_centre.html", takes_context=True)
def notification_centre(context):
    request = context.get("request")
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"show": False}
    return {"show": True, "unread": sel.unread_count(user=user), "csrf_token": context.get("csrf_token")}


@register.inclusion_tag("alerts/_run_card.html", takes_context=True)
def run_alerts(context, run):
    request = context.get("request")
    user = request.user
    manage = can_manage(user=user, run=run)
    own = run.owner_id == user.pk
    firings = sel.firings_for_run(run=run)
    marks = [{"id": f.pk, "step": f.step, "kind": f.kind, "metric": f.metric, "message": f.message,
              "paused": f.paused} for f in firings if f.step is not None]
    rules = []
    if own:
        from ..services import run_rules

        rules = run_rules(run, cached=False)
    return {"run": run, "budget": sel.run_budget(run=run), "firings": firings[::-1][:20], "n_firings": len(firings),
            "marks": marks, "rules": rules, "own": own, "can_manage": manage, "catalogue": list(R.CATALOGUE.values()),
            "ops": R.OPS, "webhooks": list(sel.webhooks_available()) if own else [],
            "csrf_token": context.get("csrf_token"), "next": request.get_full_path()}


@register.inclusion_tag("alerts/_defaults.html", takes_context=True)
def alert_defaults(context):
    user = context["request"].user
    return {"defaults": [r for r in sel.rules_for(user=user, defaults_only=True) if r.enabled]}


@register.inclusion_tag("alerts/_budget.html", takes_context=True)
def budget_summary(context):
    user = context["request"].user
    return {"month": sel.month_budget(user=user), "runs": sel.active_run_budgets(user=user)}


@register.filter
def kind_title(kind: str) -> str:
    spec = R.CATALOGUE.get(kind)
    return spec.title if spec else kind


@register.filter
def rule_text(rule) -> str:
    """One line saying what a rule watches."""
    spec = R.CATALOGUE[rule.kind]
    if rule.kind == "threshold":
        cond = f"{rule.metric} {rule.op} {rule.threshold:g}" + (f" for {rule.window} steps" if rule.window > 1 else "")
    elif spec.source == "metrics":
        cond = f"{rule.metric}: threshold {rule.threshold:g}, window {rule.window}"
    else:
        cond = f"{rule.threshold:g} {spec.unit}"
    acts = ["notify"] + (["e-mail"] if rule.email else []) + ([f"webhook {rule.webhook.name}"] if rule.webhook_id
                                                              else []) + (["pause"] if rule.pause else [])
    return f"{spec.title} — {cond} → {', '.join(acts)}"
