"""`{% run_sweep %}`: on a run's page, "part of sweep X" with a link, for whoever may see the sweep (its
owner and staff; a reader of the run sees nothing of it)."""
from django import template

from ..grid import value_text
from ..models import SweepRun

register = template.Library()


@register.inclusion_tag("sweeps/_run_sweep.html", takes_context=True)
def run_sweep(context):
    run, user = context["run"], context["request"].user
    link = SweepRun.objects.select_related("sweep").filter(run_id=run.pk).first()
    if link is None or not (user.is_staff or link.sweep.owner_id == user.pk):
        return {"link": None}
    params = ", ".join(f"{key}={value_text(value)}" for key, value in link.params.items())
    return {"link": link, "params": params}


@register.filter
def axis_summary(axis) -> str:
    """A stored axis in the sweeps list: `× 3` (its number of values) or `∈ [1e-07, 1e-05] log` (a range
    of a random search, its ends as the run names write them)."""
    if "min" in axis:
        scale = " log" if axis.get("scale") == "log" else ""
        kind = " int" if axis.get("type") == "int" else ""
        return f"∈ [{value_text(axis['min'])}, {value_text(axis['max'])}]{scale}{kind}"
    return f"× {len(axis.get('values', []))}"
