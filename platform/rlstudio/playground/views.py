"""The playground page: pick one or two targets the user may use, the settings and a system prompt,
then chat (static/js/playground.js talks to the API and the websocket).

`?target=model:<id>` or `?target=run:<id>:<step>` (the run page's and the Models page's "Talk to it"
links) preselects that target in the first picker when it is one the user may use; anything else is
ignored and the page renders as without it."""
from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from .selectors import target_option_for, target_options_for
from .services import DEFAULT_SETTINGS, MAX_NEW_TOKENS, MAX_TURNS, max_seconds


@login_required
def playground(request):
    options = target_options_for(user=request.user)
    wanted, preselect = request.GET.get("target", "")[:60], ""
    if wanted:
        listed = {o.value for group in options.values() for o in group}
        if wanted in listed:
            preselect = wanted
        else:  # a target the user may use beyond the page's newest ones (an older run, the 101st model)
            found = target_option_for(user=request.user, value=wanted)
            if found is not None:
                group, option = found
                options[group].insert(0, option)
                preselect = option.value
    return render(request, "playground/playground.html", {
        "models": options["models"], "checkpoints": options["checkpoints"],
        "defaults": DEFAULT_SETTINGS, "max_new_tokens": MAX_NEW_TOKENS, "max_turns": MAX_TURNS,
        "max_seconds": max_seconds(), "preselect": preselect})
