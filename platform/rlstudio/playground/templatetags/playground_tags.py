"""`{% talk_url model=m %}` / `{% talk_url run=run step=s %}`: the address of the playground with that
target preselected (the "Talk to it" links of the Models page and the run page). The page itself checks
that the user may use the target; this only writes the address."""
from urllib.parse import urlencode

from django import template
from django.urls import reverse

from ..selectors import checkpoint_target, model_target

register = template.Library()


@register.simple_tag
def talk_url(*, model=None, run=None, step=None) -> str:
    """/playground/?target=model:<id> or /playground/?target=run:<id>:<step> (escaped by the template)."""
    target = model_target(model.pk) if model is not None else checkpoint_target(run.pk, step)
    return f"{reverse('playground:page')}?{urlencode({'target': target}, safe=':')}"
