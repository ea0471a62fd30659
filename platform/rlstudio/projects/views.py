"""Pages of projects: the list (with the new-project form), a project's page (its runs as the runs
list shows them, a link comparing them, its description, and for its owner and staff the edit, share
and delete forms), and those forms' POSTs. Thin: the services decide, refusals become messages (a
read-only user's POST is a 403; a project the user does not see is a 404)."""
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from rlstudio.accounts.teams import team_names_for_sharing
from rlstudio.paging import paged
from rlstudio.runs.selectors import RunFilter, run_list_for
from rlstudio.runs.views import run_list_page

from .errors import ProjectInputInvalid, ProjectNotPermitted
from .selectors import (
    PROJECT_SCOPES,
    can_manage_project,
    project_access,
    project_get_for,
    project_list_for,
    project_shared_teams,
    project_shared_users,
)
from .services import project_create, project_delete, project_share, project_update


@login_required
def project_list(request):
    """GET: the projects the user sees (paged; `scope` mine / shared). POST: create one (`name`,
    `description`); a refused one shows its reason under the field it names, what was typed kept."""
    error = field = None
    if request.method == "POST":
        try:
            project = project_create(owner=request.user, name=request.POST.get("name", ""),
                                     description=request.POST.get("description", ""))
        except ProjectInputInvalid as exc:
            error, field = str(exc), exc.field
        else:
            messages.success(request, f"Project “{project.name}” created.")
            return redirect("projects:detail", project_id=project.pk)
    scope = request.GET.get("scope") or ""
    scope = scope if scope in PROJECT_SCOPES else ""
    page = paged(project_list_for(user=request.user, scope=scope), request.GET)
    return render(request, "projects/project_list.html", {
        "projects": list(page.rows), "paged": page, "scope": scope, "error": error, "error_field": field,
    }, status=400 if error else 200)


@login_required
def project_detail(request, project_id: int):
    """A project's page: its head (description, share, controls) over the runs list narrowed to it."""
    from rlstudio.telemetry.compare import MAX_RUNS

    project = project_get_for(user=request.user, project_id=project_id)
    manage = can_manage_project(user=request.user, project=project)
    newest = list(run_list_for(user=request.user, flt=RunFilter(project=project.pk))
                  .values_list("pk", flat=True)[:MAX_RUNS])
    return run_list_page(request, project=project.pk, extra={
        "project": project,
        "project_can_manage": manage,
        "project_access": project_access(user=request.user, project=project),
        "project_shared_users": project_shared_users(project=project) if manage else [],
        "project_shared_teams": project_shared_teams(project=project) if manage else [],
        "team_choices": team_names_for_sharing(user=request.user) if manage else [],
        "compare_ids": ",".join(str(pk) for pk in newest),
        "compare_max": MAX_RUNS,
    })


def _control(request, project_id: int, do):
    """POST shell: the project must be visible (404) and the user its owner or staff (403)."""
    project = project_get_for(user=request.user, project_id=project_id)
    try:
        target = do(project)
    except ProjectNotPermitted as exc:
        raise PermissionDenied(exc.message) from None
    except ProjectInputInvalid as exc:
        messages.error(request, f"{exc.field}: {exc}")
        target = project
    return redirect(target) if isinstance(target, str) else redirect("projects:detail", project_id=project.pk)


@login_required
@require_POST
def project_edit_view(request, project_id: int):
    """POST `name` and `description`: rename / describe the project."""
    def do(project):
        project_update(project=project, by=request.user, name=request.POST.get("name", project.name),
                       description=request.POST.get("description", project.description))
        messages.success(request, "Project saved.")
        return project

    return _control(request, project_id, do)


@login_required
@require_POST
def project_share_view(request, project_id: int):
    """POST `add` (a username to share with) and/or `remove` (one to stop sharing with); `add_team` /
    `remove_team` the same for a team's name (one the user is in, any for staff)."""
    add = [n for n in [request.POST.get("add", "").strip()] if n]
    remove = [n for n in [request.POST.get("remove", "").strip()] if n]
    add_team = [n for n in [request.POST.get("add_team", "").strip()] if n]
    remove_team = [n for n in [request.POST.get("remove_team", "").strip()] if n]

    def do(project):
        project_share(project=project, by=request.user, add=add, remove=remove, add_teams=add_team,
                      remove_teams=remove_team)
        if add:
            messages.success(request, f"Shared with {add[0]} (read-only: the project and every run in it).")
        elif remove:
            messages.success(request, f"No longer shared with {remove[0]}.")
        elif add_team:
            messages.success(request, f"Shared with the team {add_team[0]} (read-only, for its members: the "
                                      "project and every run in it).")
        elif remove_team:
            messages.success(request, f"No longer shared with the team {remove_team[0]}.")
        return project

    return _control(request, project_id, do)


@login_required
@require_POST
def project_delete_view(request, project_id: int):
    """POST: delete the project; its runs stay, out of any project."""
    def do(project):
        name = project.name
        kept = project_delete(project=project, by=request.user)
        messages.success(request, f"Project “{name}” deleted; its {len(kept)} run(s) stay, in no project.")
        return "projects:list"

    return _control(request, project_id, do)
