"""The playground page: pick one or two targets the user may use, the settings and a system prompt,
then chat (static/js/playground.js talks to the API and the websocket)."""
from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from .selectors import target_options_for
from .services import DEFAULT_SETTINGS, MAX_NEW_TOKENS, MAX_TURNS, max_seconds


@login_required
def playground(request):
    options = target_options_for(user=request.user)
    return render(request, "playground/playground.html", {
        "models": options["models"], "checkpoints": options["checkpoints"],
        "defaults": DEFAULT_SETTINGS, "max_new_tokens": MAX_NEW_TOKENS, "max_turns": MAX_TURNS,
        "max_seconds": max_seconds(), "preselect": request.GET.get("target", "")[:60]})
