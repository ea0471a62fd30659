"""Reads of the projects app, always narrowed to what the user may see.

A project is seen by its owner, by staff, by the users it is shared with and by the members of a team
it is shared with (members at the time of the request); anyone else gets a 404,
exactly as for a project that does not exist. Seeing is reading: who may change a project (rename,
describe, share, delete) is `can_manage_project`'s answer, the owner and staff. The runs of a project
a user sees are `rlstudio.runs.selectors.run_list_for` narrowed to it (the project's share is one of
the things `visible_runs` counts).
"""
from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Count, Q, QuerySet
from django.http import Http404

from rlstudio.accounts.teams import team_ids_subquery

from .models import Project


def _shared_with(user: AbstractBaseUser) -> Q:
    """The projects shared with `user` by name or with a team they are in, as subqueries (no project
    comes twice; a team's members are read when the query runs)."""
    by_name = Project.shared_with.through.objects.filter(user_id=user.pk).values("project_id")
    by_team = Project.shared_with_teams.through.objects.filter(group_id__in=team_ids_subquery(user))
    return Q(pk__in=by_name) | Q(pk__in=by_team.values("project_id"))


def visible_projects(queryset: QuerySet[Project], *, user: AbstractBaseUser) -> QuerySet[Project]:
    """`queryset` narrowed to the projects `user` may read: their own and the ones shared with them (by
    name or with their team); every project for staff; none for an anonymous user."""
    if not getattr(user, "is_authenticated", False):
        return queryset.none()
    if user.is_staff:
        return queryset
    return queryset.filter(Q(owner=user) | _shared_with(user))


def can_manage_project(*, user: AbstractBaseUser, project: Project) -> bool:
    """True when `user` changes `project` (name, description, share, delete): its owner or staff."""
    return bool(getattr(user, "is_authenticated", False) and (user.is_staff or project.owner_id == user.pk))


def project_access(*, user: AbstractBaseUser, project: Project) -> str:
    """Why `user` sees `project`: "owner", "staff" or "shared" (read-only)."""
    if project.owner_id == getattr(user, "pk", None):
        return "owner"
    return "staff" if getattr(user, "is_staff", False) else "shared"


def project_list_for(*, user: AbstractBaseUser, scope: str = "") -> QuerySet[Project]:
    """Projects the user sees, newest first, each with `run_count` (every run in it: a project's runs
    are its readers' to see). `scope` "mine" keeps their own, "shared" the ones shared with them (by
    name or with their team)."""
    qs = visible_projects(Project.objects.select_related("owner"), user=user)
    if scope == "mine":
        qs = qs.filter(owner=user)
    elif scope == "shared":
        qs = qs.exclude(owner=user).filter(_shared_with(user))
    return qs.annotate(run_count=Count("runs")).order_by("-created", "-id")


PROJECT_SCOPES = ("", "mine", "shared")


def project_get_for(*, user: AbstractBaseUser, project_id) -> Project:
    """One visible project (with `run_count`), or Http404 (also for a malformed id)."""
    try:
        project = project_list_for(user=user).filter(pk=project_id).first()
    except (TypeError, ValueError):
        project = None
    if project is None:
        raise Http404("Not found")
    return project


def project_shared_users(*, project: Project) -> list[str]:
    """Usernames the project is shared with, sorted."""
    return sorted(project.shared_with.values_list("username", flat=True))


def project_shared_teams(*, project: Project) -> list[str]:
    """Names of the teams the project is shared with, sorted."""
    return sorted(project.shared_with_teams.values_list("name", flat=True))
