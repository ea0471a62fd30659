"""A run's controls, as POSTs from its page: stop, resume, clone, fork, delete (one, or many picked on
the runs list), its tags and note, its project and whom it is shared with; and the controls card the
run page refreshes live. Each POST is owner-or-staff only (a reader gets 403) and calls one service."""
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_POST

from .selectors import run_get_for, run_list_for

# The session key of a refused tags-and-note form: what was typed, shown again by the run page.
ANNOTATE_DRAFT = "run_annotate_draft"


def _control(request, run_id: int, do):
    """POST-only handler shell: the run must be visible (else 404) and the user its owner or staff
    (else 403: a run shared with them is read-only); refusals become messages, wrong input's naming
    its field ("teams: no such team of yours: ...")."""
    from django.contrib import messages
    from django.http import HttpResponseNotAllowed
    from django.shortcuts import redirect

    from .services import RunInputInvalid, RunNotPermitted, RunRefused

    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    run = run_get_for(user=request.user, run_id=run_id)
    try:
        target = do(run)
    except RunNotPermitted as exc:
        raise PermissionDenied(exc.message) from None
    except RunInputInvalid as exc:  # named by its field, as the project page's and the API's errors are
        messages.error(request, f"{exc.field}: {exc}" if exc.field else str(exc))
        target = run
    except RunRefused as exc:
        messages.error(request, str(exc))
        target = run
    return redirect("telemetry:run", run_id=target.pk)


@login_required
@require_POST
def run_annotate_view(request, run_id: int):
    """POST `tags` (separated by spaces or commas) and `note`: the run page's tags-and-note form. A
    refused one leaves what was typed in the session (ANNOTATE_DRAFT) for the run page's form."""
    from django.contrib import messages

    from .services import RunInputInvalid, run_annotate

    typed = {"tags": request.POST.get("tags", ""), "note": request.POST.get("note", "")}
    tags = [t for t in typed["tags"].replace(",", " ").split() if t]

    def do(run):
        try:
            run_annotate(run=run, by=request.user, tags=tags, note=typed["note"])
        except RunInputInvalid:
            request.session[ANNOTATE_DRAFT] = {"run": run.pk, **typed}
            raise
        messages.success(request, "Tags and note saved.")
        return run

    return _control(request, run_id, do)


@login_required
@require_POST
def run_project_view(request, run_id: int):
    """POST `project` (an id of one of the run owner's projects, or empty: out of its project): the run
    page's "Move to project" control (owner or staff)."""
    from django.contrib import messages

    from .services import RunInputInvalid, run_set_project

    raw = (request.POST.get("project") or "").strip()

    def do(run):
        try:
            project_id = int(raw) if raw else None
        except ValueError:
            raise RunInputInvalid(f"project must be a project id, got {raw[:40]!r}", field="project") from None
        run_set_project(run=run, by=request.user, project_id=project_id)
        messages.success(request, "Moved into the project." if project_id else "Taken out of its project.")
        return run

    return _control(request, run_id, do)


@login_required
@require_POST
def run_share_view(request, run_id: int):
    """POST the run page's sharing forms: `visibility` (private | everyone), `add` (a username to
    share with) and/or `remove` (a username to stop sharing with), `add_team` / `remove_team` (a team's
    name: one the user is in, any for staff)."""
    from django.contrib import messages

    from .services import run_share

    visibility = request.POST.get("visibility") or None
    add = [request.POST["add"].strip()] if request.POST.get("add", "").strip() else []
    remove = [request.POST["remove"]] if request.POST.get("remove") else []
    add_team = [request.POST["add_team"].strip()] if request.POST.get("add_team", "").strip() else []
    remove_team = [request.POST["remove_team"]] if request.POST.get("remove_team") else []

    def do(run):
        run_share(run=run, by=request.user, visibility=visibility, add=add, remove=remove,
                  add_teams=add_team, remove_teams=remove_team)
        if add:
            messages.success(request, f"Shared with {add[0]} (read-only).")
        elif remove:
            messages.success(request, f"No longer shared with {remove[0]}.")
        elif add_team:
            messages.success(request, f"Shared with the team {add_team[0]} (read-only, for its members).")
        elif remove_team:
            messages.success(request, f"No longer shared with the team {remove_team[0]}.")
        elif visibility:
            messages.success(request, "Shared with everyone (read-only)." if visibility == "everyone"
                             else "No longer shared with everyone.")
        return run

    return _control(request, run_id, do)


@login_required
def run_stop_view(request, run_id: int):
    from .services import run_stop

    # An unticked "save a checkpoint first" box is absent from the POST: then the run is killed now.
    checkpoint = request.POST.get("checkpoint") == "1"
    force = request.POST.get("force") == "1"
    return _control(request, run_id,
                    lambda run: run_stop(run=run, by=request.user, checkpoint=checkpoint, force=force))


@login_required
def run_resume_view(request, run_id: int):
    from .services import run_resume

    return _control(request, run_id, lambda run: run_resume(run=run, by=request.user))


@login_required
def run_clone_view(request, run_id: int):
    from .services import run_clone

    return _control(request, run_id, lambda run: run_clone(run=run, by=request.user))


# The Fork form's "further changes" textarea: at most this many key=value lines.
MAX_FORK_LINES = 100


def fork_form_overrides(post) -> list[str]:
    """The Fork form's changes as `key=value` overrides: each input of FORK_FORM_FIELDS that is not
    empty, then each line of the `overrides` textarea (blank lines and `#` comments skipped); a line
    without `=` is RunInputInvalid on `overrides`."""
    from .forms import override_lines
    from .selectors import FORK_FORM_FIELDS
    from .services import RunInputInvalid

    out = [f"{key}={post.get(name).strip()}" for name, key, _label, _switch in FORK_FORM_FIELDS
           if (post.get(name) or "").strip()]
    lines = override_lines(post.get("overrides"))
    if len(lines) > MAX_FORK_LINES:
        raise RunInputInvalid(f"at most {MAX_FORK_LINES} key=value lines", field="overrides")
    for line in lines:
        if "=" not in line:
            raise RunInputInvalid(f"{line[:80]!r} is not key=value", field="overrides")
        out.append(line)
    return out


@login_required
@require_POST
def run_fork_view(request, run_id: int):
    """POST the run page's Fork form: `step` (a kept checkpoint's), `name` (optional), the inputs of
    FORK_FORM_FIELDS (empty: unchanged) and `overrides` (key=value lines). The new run's page, or back
    to this run's with a message naming the key refused (owner or staff; a reader gets 403)."""
    from django.contrib import messages

    from .services import RunInputInvalid, run_fork

    def do(run):
        try:
            new = run_fork(run=run, by=request.user, step=request.POST.get("step") or None,
                           name=(request.POST.get("name") or "").strip()[:200] or None,
                           overrides=fork_form_overrides(request.POST))
        except RunInputInvalid as exc:
            # The field leads unless the message names it already ("a fork cannot change <key>: ...").
            named = not exc.field or exc.field in str(exc)
            messages.error(request, f"Not forked: {exc}" if named else f"Not forked: {exc.field}: {exc}")
            return run
        messages.success(request, f"Run “{new.name}” is {new.status}.")
        return new

    return _control(request, run_id, do)


@login_required
@require_POST
def run_delete_view(request, run_id: int):
    """POST: delete a finished run (the run page's Delete button, confirmed in the browser), then the
    runs list with a message; a refusal (RunRefused: what to do first) goes back to the run page."""
    from django.contrib import messages
    from django.shortcuts import redirect

    from .services import RunNotPermitted, RunRefused, run_delete

    run = run_get_for(user=request.user, run_id=run_id)
    try:
        run_delete(run=run, by=request.user)
    except RunNotPermitted as exc:
        raise PermissionDenied(exc.message) from None
    except RunRefused as exc:
        messages.error(request, f"Run “{run.name}” was not deleted: {exc}")
        return redirect("telemetry:run", run_id=run.pk)
    messages.success(request, f"Run “{run.name}” (#{run_id}) was deleted.")
    return redirect("runs:list")


def _picked_ids(values) -> list:
    """The run ids a form sent (`ids=1&ids=2`, or `ids=1,2`): each an integer, or the text as sent
    when it is not one (`clean_run_ids` then names it)."""
    ids: list = []
    for value in values:
        for part in str(value).split(","):
            part = part.strip()
            if part:
                ids.append(int(part) if part.isascii() and part.isdigit() and len(part) <= 40 else part[:40])
    return ids


@login_required
def run_bulk_delete_view(request):
    """The runs list's Delete selected. GET ?ids=…: the confirm page, naming each picked run and, for
    any that cannot be deleted, why (then nothing is offered but picking only those that can). POST
    `ids` (a CSRF-protected form): delete them all or none (`runs_delete`), then the runs list with
    what was deleted, or back to the confirm page saying why nothing was."""
    from django.contrib import messages
    from django.http import HttpResponseNotAllowed
    from django.shortcuts import redirect

    from .services import (
        RunInputInvalid,
        RunsNotDeleted,
        bulk_delete_max,
        bulk_delete_refusals,
        clean_run_ids,
        runs_delete,
    )

    if request.method not in ("GET", "POST"):
        return HttpResponseNotAllowed(["GET", "POST"])
    source = request.POST if request.method == "POST" else request.GET
    ids = _picked_ids(source.getlist("ids"))
    try:
        ids = clean_run_ids(ids)
    except RunInputInvalid as exc:
        if request.method == "POST":
            messages.error(request, f"Nothing was deleted: {exc}")
            return redirect("runs:list")
        return render(request, "runs/run_bulk_delete.html", {"error": str(exc), "limit": bulk_delete_max()},
                      status=400)
    if request.method == "POST":
        try:
            deleted = runs_delete(run_ids=ids, by=request.user)
        except RunsNotDeleted as exc:
            messages.error(request, f"Nothing was deleted: {len(exc.refusals)} of the {exc.total} runs "
                                    "cannot be deleted (below: why).")
            return redirect(f"{request.path}?{urlencode({'ids': ','.join(map(str, ids))})}")
        names = ", ".join(f"“{name}” (#{run_id})" for run_id, name in deleted)
        messages.success(request, f"{len(deleted)} run{'s' if len(deleted) != 1 else ''} deleted: {names}.")
        return redirect("runs:list")
    refusals = {r.run_id: r for r in bulk_delete_refusals(run_ids=ids, by=request.user)}
    shown = {r.pk: r for r in run_list_for(user=request.user).filter(pk__in=ids)}
    items = [{"id": run_id, "run": shown.get(run_id), "refusal": refusals.get(run_id)} for run_id in ids]
    deletable = [run_id for run_id in ids if run_id not in refusals]
    return render(request, "runs/run_bulk_delete.html", {
        "items": items, "refused": len(refusals), "ids": ",".join(map(str, ids)),
        "deletable_qs": urlencode({"ids": ",".join(map(str, deletable))}) if deletable else "",
        "deletable_count": len(deletable),
    })


@login_required
@require_GET
def run_controls_view(request, run_id: int):
    """GET: the run page's controls card (badge, progress, buttons) as it is now, as an HTML fragment.

    The run page refreshes its controls from this while the run is live and whenever a status event
    arrives: a stop asked for, a reconcile that found the job gone, a force stop whose killed trainer
    reports nothing, all change the buttons without a reload. Owner or staff only (404 otherwise)."""
    from .selectors import run_header_context

    run = run_get_for(user=request.user, run_id=run_id)
    return render(request, "runs/_controls.html", run_header_context(run=run, user=request.user))
