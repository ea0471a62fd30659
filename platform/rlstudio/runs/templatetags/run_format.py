"""Template filters for the runs pages: a size in GiB written as the new-run form writes it."""
from django import template

register = template.Library()


@register.filter
def gib(value, how=""):
    """`value` GiB with two decimals, or "< 0.01 GiB" for a positive size under 0.01 (never "0.00 GiB"
    for something that is not nothing): the same rule as static/js/run_form.js's gib(), so the run page
    and the new-run form write one estimate alike. `how="abs"` writes the size without its sign
    ("needs 0.50 GiB more")."""
    if value is None or value == "":
        return ""
    x = float(value)
    if how == "abs":
        x = abs(x)
    return ("< 0.01" if 0 < x < 0.01 else f"{x:.2f}") + " GiB"
