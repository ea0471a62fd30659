"""The "Launch the demo" button's POST: launch the saved demo config for the logged-in user."""
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from rlstudio.runs.services import RunInputInvalid, RunRefused

from .services import DemoUnavailable, demo_launch


@require_POST
@login_required
def demo_launch_view(request):
    """One click: copy the demo kit into the user's account if needed, then launch (CSRF-checked POST)."""
    try:
        run = demo_launch(user=request.user)
    except (DemoUnavailable, RunInputInvalid, RunRefused) as exc:
        messages.error(request, f"The demo was not launched: {exc}")
        return redirect("runs:list")
    messages.success(request, f"Demo run “{run.name}” is {run.status}.")
    return redirect("telemetry:run", run_id=run.pk)
