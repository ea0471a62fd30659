"""Teams: Django's auth `Group`, which the platform calls a team (`models.Team` is its proxy for the
admin). Reads and writes of teams live here, beside the users they group.

Staff make teams and set their members in the admin (the team's page or the user's); a team's creation
and a change of its name go through `team_save` (audited `team.create`, `team.rename`: the shares and
the audit log name teams by name), every change of a team's members through `team_set_members` /
`user_set_teams` / `team_delete`, which audit it (`team.members`, `user.teams`, `team.delete`) and,
after the commit, tell the open websockets of every
user who joined or left (`sockets.user_changed_send`): each checks its user again, so leaving a team
ends the socket of a run the team was the only way to read. Who reads what through a team is the
runs' and projects' selectors' business (`team_ids_subquery`); which team an owner may name when
sharing is `team_for_sharing`'s (one they are in; any team for staff), whose None is the same for a
team that does not exist and one that is not theirs.
"""
from __future__ import annotations

import logging
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, Group
from django.db import transaction
from django.db.models import QuerySet

from .services import audit_record

log = logging.getLogger(__name__)

MAX_TEAM_NAME_LENGTH = Group._meta.get_field("name").max_length


def clean_team_name(name) -> str:
    """A team name as stored (stripped); ValueError when empty, too long or with a control character
    (a new line, a NUL): the name is typed on the sharing forms and shown on every page that lists it."""
    name = name.strip() if isinstance(name, str) else ""
    if not name:
        raise ValueError("a team needs a name")
    if len(name) > MAX_TEAM_NAME_LENGTH:
        raise ValueError(f"the name is {len(name)} characters, at most {MAX_TEAM_NAME_LENGTH}")
    if any(unicodedata.category(ch) in ("Cc", "Cs") for ch in name):
        raise ValueError("the name cannot contain control characters (new lines, tabs, NUL)")
    return name


def team_ids_subquery(user: AbstractBaseUser) -> QuerySet:
    """The ids of `user`'s teams as a subquery (`.values("group_id")`), read when the query runs: joining
    a team gives its shares at the next request, leaving takes them away."""
    return get_user_model().groups.through.objects.filter(user_id=user.pk).values("group_id")


def teams_of(*, user: AbstractBaseUser) -> list[dict]:
    """`user`'s teams by name, each {"id", "name", "members": the active members' usernames, sorted}
    (the profile page's list: two queries whatever the number of teams)."""
    if not getattr(user, "is_authenticated", False):
        return []
    teams = list(Group.objects.filter(pk__in=team_ids_subquery(user)).order_by("name", "id"))
    members: dict[int, list[str]] = {team.pk: [] for team in teams}
    rows = (get_user_model().groups.through.objects.filter(group_id__in=members, user__is_active=True)
            .values_list("group_id", "user__username").order_by("user__username"))
    for group_id, username in rows:
        members[group_id].append(username)
    return [{"id": team.pk, "name": team.name, "members": members[team.pk]} for team in teams]


def team_names_for_sharing(*, user: AbstractBaseUser) -> list[str]:
    """The names of the teams `user` may share with (theirs; every team for staff), sorted: what the
    sharing forms suggest."""
    if not getattr(user, "is_authenticated", False):
        return []
    teams = Group.objects.all() if user.is_staff else Group.objects.filter(pk__in=team_ids_subquery(user))
    return list(teams.order_by("name").values_list("name", flat=True))


def team_for_sharing(*, by: AbstractBaseUser, name) -> Group | None:
    """The team called `name` (stripped) when `by` may share with it: a member, or staff for any team;
    None otherwise, the same for a team that does not exist and for one `by` is not in (whether another
    team exists is not theirs to learn)."""
    if not isinstance(name, str) or not name.strip() or "\x00" in name:
        return None
    teams = Group.objects.filter(name=name.strip())
    if not getattr(by, "is_staff", False):
        teams = teams.filter(pk__in=team_ids_subquery(by))
    return teams.first()


class TeamNotNamed(ValueError):
    """A list of team names to share with that is malformed or names a team the sharer may not share
    with (the caller raises its own app's input error on its `teams` field with this message)."""


def teams_for_sharing(*, by: AbstractBaseUser, names, already: Iterable[Group] = ()) -> list[Group]:
    """The teams called `names` (a list of strings, each stripped; duplicates once, in the order given)
    that `by` shares with: each one `team_for_sharing` finds, or one of `already` (the teams the thing is
    shared with now, which an owner outside them may keep in a whole list, as staff may have added them).
    TeamNotNamed otherwise, saying "no such team of yours" for a team that does not exist and for one
    `by` is not in alike."""
    if isinstance(names, (str, bytes)) or not isinstance(names, Iterable):
        raise TeamNotNamed("teams must be a list of team names")
    kept = {team.name: team for team in already}
    found: dict[str, Group] = {}
    for name in names:
        if not isinstance(name, str) or not name.strip() or "\x00" in name:
            raise TeamNotNamed("a team name must be a non-empty string without NUL, got "
                               f"{(name if isinstance(name, str) else repr(name))[:60]!r}")
        name = name.strip()
        if name in found:
            continue
        team = kept.get(name) or team_for_sharing(by=by, name=name)
        if team is None:
            raise TeamNotNamed(f"no such team of yours: {name[:MAX_TEAM_NAME_LENGTH]!r}")
        found[name] = team
    return list(found.values())


@dataclass(frozen=True)
class TeamShareChange:
    """A change of the teams a run or a project is shared with, checked before its row is locked:
    `target` the whole new list (None: unchanged), `add` teams to add, `remove` names to take away."""

    target: list[Group] | None
    add: list[Group]
    remove: list[str]

    def apply(self, shared_with_teams) -> None:
        """Make the change on a locked row's `shared_with_teams` manager."""
        if self.target is not None:
            shared_with_teams.set(self.target)
        if self.add:
            shared_with_teams.add(*self.add)
        if self.remove:
            shared_with_teams.remove(*shared_with_teams.filter(name__in=self.remove))


def team_share_change(*, by: AbstractBaseUser, teams: Iterable | None, add: Iterable, remove: Iterable,
                      already: Iterable[Group]) -> TeamShareChange:
    """The sharing forms' and API's `teams` / `add_teams` / `remove_teams` as a TeamShareChange
    (`teams_for_sharing` checks each name; TeamNotNamed otherwise)."""
    return TeamShareChange(
        target=teams_for_sharing(by=by, names=teams, already=already) if teams is not None else None,
        add=teams_for_sharing(by=by, names=add, already=already) if add else [],
        remove=[str(name).strip() for name in remove or () if "\x00" not in str(name)])


def _tell_sockets(user_ids: Iterable[int]) -> None:
    """After the commit, tell each user's open websockets to check their access again."""
    ids = sorted(set(user_ids))
    transaction.on_commit(lambda: [_send_user_changed(user_id) for user_id in ids])


def _send_user_changed(user_id: int) -> None:
    from .sockets import user_changed_send

    try:
        user_changed_send(user_id)
    except Exception as exc:  # Redis down: the change stands; the socket sees it at its next periodic re-check
        log.warning("user %s: user-changed message after a team change not sent: %r", user_id, exc)


def _usernames(users: Iterable) -> list[str]:
    return sorted(u.get_username() for u in users)


def team_save(*, team: Group, by: AbstractBaseUser | None) -> Group:
    """Save `team` (a new one, or one whose name may have changed). Audited as `team.create` (its name)
    or `team.rename` (the name before and after) when the name is new; its members are
    `team_set_members`'s."""
    with transaction.atomic():
        before = None
        if team.pk is not None:
            before = Group.objects.select_for_update().filter(pk=team.pk).values_list("name", flat=True).first()
        team.save()
        row = Group.objects.get(pk=team.pk)  # audited as the auth group, as the other team.* events
        if before is None:
            audit_record(actor=by, action="team.create", obj=row, data={"name": row.name})
        elif before != row.name:
            audit_record(actor=by, action="team.rename", obj=row, data={"from": before, "to": row.name})
    return team


def team_set_members(*, team: Group, members: Iterable, by: AbstractBaseUser | None) -> Group:
    """Make `members` (users) the whole membership of `team`. Audited as `team.members` (the usernames
    before and after) when it changed; the sockets of whoever joined or left check their user again."""
    wanted = {u.pk: u for u in members}
    with transaction.atomic():
        locked = Group.objects.select_for_update().get(pk=team.pk)
        current = {u.pk: u for u in locked.user_set.all()}
        if set(current) != set(wanted):
            locked.user_set.set(list(wanted.values()))
            audit_record(actor=by, action="team.members", obj=locked,
                         data={"team": locked.name, "from": _usernames(current.values()),
                               "to": _usernames(wanted.values())})
            _tell_sockets(set(current) ^ set(wanted))
    return team


def user_set_teams(*, user: AbstractBaseUser, teams: Iterable[Group], by: AbstractBaseUser | None) -> None:
    """Make `teams` the whole list of `user`'s teams (the user's admin page). Audited as `user.teams`
    (the team names before and after) when it changed; the user's sockets check their access again."""
    wanted = {t.pk: t for t in teams}
    with transaction.atomic():
        current = {t.pk: t for t in user.groups.all()}
        if set(current) != set(wanted):
            user.groups.set(list(wanted.values()))
            audit_record(actor=by, action="user.teams", obj=user,
                         data={"user": user.get_username(), "from": sorted(t.name for t in current.values()),
                               "to": sorted(t.name for t in wanted.values())})
            _tell_sockets([user.pk])


def team_delete(*, team: Group, by: AbstractBaseUser | None) -> None:
    """Delete `team`: every share with it goes with it. Audited as `team.delete` (its name and
    members); its members' sockets check their access again."""
    with transaction.atomic():
        locked = Group.objects.select_for_update().get(pk=team.pk)
        members = list(locked.user_set.all())
        audit_record(actor=by, action="team.delete", obj=locked,
                     data={"name": locked.name, "members": _usernames(members)})
        locked.delete()
        _tell_sockets(u.pk for u in members)
