"""`{% demo_launcher %}`: the demo's button (or why it cannot be pressed yet) on the runs page.

A tag rather than view context so the runs list view stays as it is: the state comes from
rlstudio.demo.services.demo_state() (a small file read and one query).
"""
from django import template

from rlstudio.demo.services import demo_state

register = template.Library()


@register.inclusion_tag("demo/_demo.html", takes_context=True)
def demo_launcher(context, compact: bool = False):
    return {"demo": demo_state(), "compact": compact, "request": context.get("request"),
            "csrf_token": context.get("csrf_token")}
