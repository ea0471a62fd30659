"""Writes of the projects app: create, rename / describe, share read-only, delete a project, and move
a run into or out of one.

The rule: only a project's owner or staff change it (`ProjectNotPermitted` for a user it is shared
with, by name or through a team, who reads it and its runs, nothing more). Its runs are one owner's: a run goes only into a
project of its own owner (`rlstudio.runs.services.run_set_project` decides, the runs app owning the
run). Deleting a project leaves its runs, out of any project. An owner keeps at most
RLSTUDIO_MAX_PROJECTS_PER_USER projects (staff included). Every change is audited (`project.*`); a
change of who reads a project's runs (its share, its deletion) is handed to the runs app's
`on_access_changed` hooks for each of its runs, so that their open websockets check their user again.
"""
from __future__ import annotations

import unicodedata
from collections.abc import Iterable

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, connection, transaction

from rlstudio.accounts.services import audit_record
from rlstudio.accounts.teams import TeamNotNamed, team_share_change
from rlstudio.runs.services import runs_access_changed

from .errors import ProjectInputInvalid, ProjectNotPermitted
from .models import MAX_PROJECT_DESCRIPTION_LENGTH, MAX_PROJECT_NAME_LENGTH, Project
from .selectors import can_manage_project, project_shared_teams, project_shared_users

# pg_advisory_xact_lock key space of "one owner's project creations" (the cap is counted under it).
_PROJECT_CREATE_LOCK_SPACE = 7301


def check_can_manage_project(*, user: AbstractBaseUser, project: Project, action: str = "change") -> None:
    """ProjectNotPermitted unless `user` owns `project` or is staff (`action` says what was refused)."""
    if not can_manage_project(user=user, project=project):
        raise ProjectNotPermitted(f"project {project.name!r} is shared with you read-only: only its owner "
                                  f"({project.owner.get_username()}) or staff can {action} it")


def clean_name(name) -> str:
    """A project name as stored (stripped); ProjectInputInvalid (field `name`) when it is not a string,
    empty, longer than MAX_PROJECT_NAME_LENGTH, or has a control character (a new line, a NUL)."""
    if not isinstance(name, str):
        raise ProjectInputInvalid("name must be a string", field="name")
    name = name.strip()
    if not name:
        raise ProjectInputInvalid("name cannot be empty", field="name")
    if len(name) > MAX_PROJECT_NAME_LENGTH:
        raise ProjectInputInvalid(f"the name is {len(name)} characters, at most {MAX_PROJECT_NAME_LENGTH}",
                                  field="name")
    if any(unicodedata.category(ch) in ("Cc", "Cs") for ch in name):
        raise ProjectInputInvalid("the name cannot contain control characters (new lines, tabs, NUL)",
                                  field="name")
    return name


def clean_description(description) -> str:
    """A description as stored (trailing whitespace dropped); ProjectInputInvalid (field
    `description`) when not a string, past MAX_PROJECT_DESCRIPTION_LENGTH, or with a NUL or surrogate."""
    if not isinstance(description, str):
        raise ProjectInputInvalid("description must be a string", field="description")
    description = description.rstrip()
    if len(description) > MAX_PROJECT_DESCRIPTION_LENGTH:
        raise ProjectInputInvalid(f"the description is {len(description)} characters, at most "
                                  f"{MAX_PROJECT_DESCRIPTION_LENGTH}", field="description")
    if "\x00" in description or any(unicodedata.category(ch) == "Cs" for ch in description):
        raise ProjectInputInvalid("the description cannot contain NUL characters", field="description")
    return description


def project_create(*, owner: AbstractBaseUser, name, description="") -> Project:
    """A new project of `owner`; ProjectInputInvalid on `name` for a name they already use or past
    their RLSTUDIO_MAX_PROJECTS_PER_USER (counted under a per-owner advisory lock, so two creations at
    once cannot both pass the cap). Audited as `project.create`."""
    name, description = clean_name(name), clean_description(description)
    with transaction.atomic():
        with connection.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s, %s)", [_PROJECT_CREATE_LOCK_SPACE, owner.pk])
        if Project.objects.filter(owner=owner, name=name).exists():
            raise ProjectInputInvalid(f"you already have a project named {name!r}", field="name")
        cap = settings.RLSTUDIO_MAX_PROJECTS_PER_USER
        held = Project.objects.filter(owner=owner).count()
        if held >= cap:
            raise ProjectInputInvalid(f"you already have {held} projects, the most one user may keep "
                                      f"(RLSTUDIO_MAX_PROJECTS_PER_USER is {cap}); delete one first",
                                      field="name")
        project = Project.objects.create(owner=owner, name=name, description=description)
        audit_record(actor=owner, action="project.create", obj=project, data={"name": name})
    return project


def project_update(*, project: Project, by: AbstractBaseUser, name=None, description=None) -> Project:
    """Rename and/or describe `project` (None: unchanged); owner or staff only; a name its owner
    already uses for another project is a ProjectInputInvalid on `name`. Audited as `project.update`
    with each changed field's before and after."""
    check_can_manage_project(user=by, project=project, action="edit")
    new_name = clean_name(name) if name is not None else None
    new_description = clean_description(description) if description is not None else None
    try:
        with transaction.atomic():
            locked = Project.objects.select_for_update().get(pk=project.pk)
            changed: dict = {}
            if new_name is not None and new_name != locked.name:
                if Project.objects.filter(owner_id=locked.owner_id, name=new_name).exclude(pk=locked.pk).exists():
                    raise ProjectInputInvalid(f"{locked.owner.get_username()} already has a project named "
                                              f"{new_name!r}", field="name")
                changed["name"] = [locked.name, new_name]
                locked.name = new_name
            if new_description is not None and new_description != locked.description:
                changed["description"] = [locked.description, new_description]
                locked.description = new_description
            if changed:
                locked.save(update_fields=list(changed))
                audit_record(actor=by, action="project.update", obj=locked, data=changed)
    except IntegrityError:  # a rename raced another one to the same name
        raise ProjectInputInvalid(f"a project named {new_name!r} exists already", field="name") from None
    project.name, project.description = locked.name, locked.description
    return project


def _users_named(names: Iterable, *, project: Project, field: str = "users") -> list:
    """The active users called `names` (not the project's owner); ProjectInputInvalid on `field`."""
    if isinstance(names, (str, bytes)) or not isinstance(names, Iterable):
        raise ProjectInputInvalid("users must be a list of usernames", field=field)
    wanted: list[str] = []
    for name in names:
        if not isinstance(name, str) or not name.strip() or "\x00" in name:
            raise ProjectInputInvalid(f"a username must be a non-empty string, got {str(name)[:60]!r}", field=field)
        if name.strip() not in wanted:
            wanted.append(name.strip())
    found = {u.get_username(): u for u in get_user_model().objects.filter(username__in=wanted, is_active=True)}
    for name in wanted:
        if name not in found:
            raise ProjectInputInvalid(f"no user named {name[:150]!r}", field=field)
        if found[name].pk == project.owner_id:
            raise ProjectInputInvalid(f"{name} owns the project already", field=field)
    return [found[name] for name in wanted]


def project_share(*, project: Project, by: AbstractBaseUser, users: Iterable | None = None,
                  add: Iterable = (), remove: Iterable = (), teams: Iterable | None = None,
                  add_teams: Iterable = (), remove_teams: Iterable = ()) -> Project:
    """Change who reads `project` and every run in it (owner or staff only): `users` (the whole list of
    usernames), or `add` / `remove` usernames; `teams`, `add_teams`, `remove_teams` the same for team
    names (a team `by` is in, any team for staff; ProjectInputInvalid on `teams`, "no such team of
    yours", otherwise); None and empty mean unchanged. Audited as `project.share` (the usernames
    `from` / `to`, the team names `teams_from` / `teams_to`) when it changed; the project's runs' open
    websockets are told."""
    check_can_manage_project(user=by, project=project, action="share")
    target = _users_named(users, project=project) if users is not None else None
    to_add = _users_named(add, project=project) if add else []
    to_remove = [str(name).strip() for name in remove or () if "\x00" not in str(name)]
    try:
        team_change = team_share_change(by=by, teams=teams, add=add_teams, remove=remove_teams,
                                        already=project.shared_with_teams.all())
    except TeamNotNamed as exc:
        raise ProjectInputInvalid(str(exc), field="teams") from None
    with transaction.atomic():
        locked = Project.objects.select_for_update().get(pk=project.pk)
        before = project_shared_users(project=locked)
        teams_before = project_shared_teams(project=locked)
        if target is not None:
            locked.shared_with.set(target)
        if to_add:
            locked.shared_with.add(*to_add)
        if to_remove:
            locked.shared_with.remove(*locked.shared_with.filter(username__in=to_remove))
        team_change.apply(locked.shared_with_teams)
        after = project_shared_users(project=locked)
        teams_after = project_shared_teams(project=locked)
        if (after, teams_after) != (before, teams_before):
            audit_record(actor=by, action="project.share", obj=locked,
                         data={"owner": locked.owner.get_username(), "from": before, "to": after,
                               "teams_from": teams_before, "teams_to": teams_after})
            runs_access_changed(locked.runs.values_list("pk", flat=True))
    return project


def project_delete(*, project: Project, by: AbstractBaseUser) -> list[int]:
    """Delete `project` (owner or staff only); its runs stay, out of any project (their ids are
    returned). Audited as `project.delete`; the runs' open websockets are told (the project's readers
    no longer read them)."""
    check_can_manage_project(user=by, project=project, action="delete")
    with transaction.atomic():
        locked = Project.objects.select_for_update().get(pk=project.pk)
        run_ids = list(locked.runs.values_list("pk", flat=True))
        audit_record(actor=by, action="project.delete", obj=locked,
                     data={"name": locked.name, "owner": locked.owner.get_username(), "runs": run_ids})
        locked.delete()
        runs_access_changed(run_ids)
    return run_ids
