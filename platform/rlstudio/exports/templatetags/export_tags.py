"""`{% run_exports %}`: the run page's "Exports" card (the run's exports with their state, a failed
one's error (and its error log for whoever manages the run), catalog model and download link; its
checkpoints, each with a "Talk to it" link to the playground and, for whoever manages the run, an
Export button)."""
from django import template

from rlstudio.runs.checkpoints import checkpoint_steps
from rlstudio.runs.selectors import can_manage

from ..models import ACTIVE_EXPORT_STATUSES, Export

register = template.Library()


@register.inclusion_tag("exports/run_section.html", takes_context=True)
def run_exports(context):
    """Context of the card for `run` (already checked readable by the run page's view)."""
    run, user = context["run"], context["request"].user
    exports = list(Export.objects.filter(run=run).select_related("model").order_by("step")[:100])
    manage = can_manage(user=user, run=run)
    for e in exports:
        e.error_detail = e.error_log if manage else ""  # export_error_log_for's rule, the run known
    done = {e.step: e for e in exports}
    steps = [{"step": s, "export": done.get(s)} for s in checkpoint_steps(run)]  # "Talk to it" for every reader
    active = any(e.status in ACTIVE_EXPORT_STATUSES for e in exports)
    return {"run": run, "can_manage": manage, "exports": exports, "steps": steps, "exports_active": active,
            "csrf_token": context.get("csrf_token")}
