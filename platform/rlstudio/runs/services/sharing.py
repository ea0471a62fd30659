"""A run's own words and readers: its tags and note, and whom it is shared with (read-only).

The rule: only a run's owner or staff control it: stop, resume, clone, edit its tags and note, share
it or stop sharing it (`check_can_manage`, which the stop / resume / clone services call too). A user
the run is shared with, by name, as a member of a team it is shared with, or with everyone, reads its
page, samples, transcripts and groups and nothing more; their attempts are refused with
`RunNotPermitted` (403). Every change is audited: `run.annotate` (tags / note, before and after) and
`run.share` (visibility, users and teams, before and after).

A sharing change that commits is handed to the `on_access_changed` hooks (the telemetry app registers
one that tells the run's open websockets, which check their user again and close with 4403 for whoever
may no longer read it), so that runs never imports telemetry.
"""
from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from rlstudio.accounts.services import audit_record
from rlstudio.accounts.teams import TeamNotNamed, team_share_change

from ..errors import RunInputInvalid, RunNotPermitted
from ..models import MAX_NOTE_LENGTH, MAX_TAG_LENGTH, MAX_TAGS, Run, RunVisibility
from ..selectors import can_manage, run_shared_teams, run_shared_users

log = logging.getLogger(__name__)
_ACCESS_HOOKS: list[Callable[[int], None]] = []


def on_access_changed(hook: Callable[[int], None]) -> Callable[[int], None]:
    """Register `hook(run_id)` to run after a change of who may read the run commits (idempotent per
    function); a hook that raises is logged and the others still run."""
    if hook not in _ACCESS_HOOKS:
        _ACCESS_HOOKS.append(hook)
    return hook


def _access_changed(run_id: int) -> None:
    for hook in list(_ACCESS_HOOKS):
        try:
            hook(run_id)
        except Exception:  # the change is stored; an open socket then keeps streaming until it reconnects
            log.exception("run %s: access-changed hook %r failed", run_id, hook)


def runs_access_changed(run_ids: Iterable[int]) -> None:
    """Hand each of `run_ids` to the `on_access_changed` hooks once the current transaction commits
    (now, outside one): for a change of who reads them made elsewhere (a project's share, its deletion)."""
    ids = list(run_ids)
    transaction.on_commit(lambda: [_access_changed(run_id) for run_id in ids])


# A tag: letters, digits and _ . : + / - (no spaces, so a tag reads as one word in the list and a URL).
TAG_RE = re.compile(r"^[\w.:+/-]+$")


def check_can_manage(*, user: AbstractBaseUser, run: Run, action: str = "change") -> None:
    """RunNotPermitted unless `user` owns `run` or is staff (`action` says what was refused)."""
    if not can_manage(user=user, run=run):
        raise RunNotPermitted(f"run {run.name!r} is shared with you read-only: only its owner "
                              f"({run.owner.get_username()}) or staff can {action} it")


def clean_tags(tags: Iterable) -> list[str]:
    """Tags as stored: each stripped, in the order given, duplicates dropped; RunInputInvalid (field
    `tags`) for one that is empty, too long or has other characters, or for more than MAX_TAGS."""
    if not isinstance(tags, (list, tuple)):
        raise RunInputInvalid("tags must be a list of strings", field="tags")
    out: list[str] = []
    for tag in tags:
        if not isinstance(tag, str):
            raise RunInputInvalid(f"a tag must be a string, got {repr(tag)[:60]}", field="tags")
        tag = tag.strip()
        if not tag or len(tag) > MAX_TAG_LENGTH or not TAG_RE.match(tag):
            raise RunInputInvalid(f"tag {tag[:60]!r}: 1 to {MAX_TAG_LENGTH} letters, digits or _ . : + / - "
                                  "(no spaces)", field="tags")
        if tag not in out:
            out.append(tag)
    if len(out) > MAX_TAGS:
        raise RunInputInvalid(f"at most {MAX_TAGS} tags, got {len(out)}", field="tags")
    return out


def clean_note(note) -> str:
    """The note as stored (trailing whitespace dropped); RunInputInvalid (field `note`) past MAX_NOTE_LENGTH."""
    if not isinstance(note, str):
        raise RunInputInvalid("note must be a string", field="note")
    note = note.rstrip()
    if len(note) > MAX_NOTE_LENGTH:
        raise RunInputInvalid(f"the note is {len(note)} characters, at most {MAX_NOTE_LENGTH}", field="note")
    if "\x00" in note:
        raise RunInputInvalid("the note cannot contain NUL characters", field="note")
    return note


def run_annotate(*, run: Run, by: AbstractBaseUser, tags: Iterable | None = None, note: str | None = None) -> Run:
    """Set the run's tags and/or note (None: unchanged); owner or staff only; audited when something
    changed (`run.annotate` with each changed field's before and after)."""
    check_can_manage(user=by, run=run, action="edit the tags and note of")
    new_tags = clean_tags(tags) if tags is not None else None
    new_note = clean_note(note) if note is not None else None
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        changed: dict = {}
        if new_tags is not None and new_tags != list(locked.tags):
            changed["tags"] = [list(locked.tags), new_tags]
            locked.tags = new_tags
        if new_note is not None and new_note != locked.note:
            changed["note"] = [locked.note, new_note]
            locked.note = new_note
        if changed:
            locked.save(update_fields=[f for f in ("tags", "note") if f in changed])
            audit_record(actor=by, action="run.annotate", obj=locked, data=changed)
    run.tags, run.note = locked.tags, locked.note
    return run


def _users_named(names: Iterable, *, run: Run) -> list:
    """The active users called `names` (not the run's owner); RunInputInvalid (field `users`) otherwise."""
    if isinstance(names, (str, bytes)) or not isinstance(names, Iterable):
        raise RunInputInvalid("users must be a list of usernames", field="users")
    wanted: list[str] = []
    for name in names:
        if not isinstance(name, str) or not name.strip() or "\x00" in name:
            raise RunInputInvalid(f"a username must be a non-empty string, got {name[:60]!r}"
                                  if isinstance(name, str) else f"a username must be a string, got {name!r}",
                                  field="users")
        if name.strip() not in wanted:
            wanted.append(name.strip())
    found = {u.get_username(): u for u in get_user_model().objects.filter(username__in=wanted, is_active=True)}
    for name in wanted:
        if name not in found:
            raise RunInputInvalid(f"no user named {name!r}", field="users")
        if found[name].pk == run.owner_id:
            raise RunInputInvalid(f"{name} owns the run already", field="users")
    return [found[name] for name in wanted]


def _readers(run: Run) -> dict:
    """Who reads `run` besides its owner and staff, as the audit records it."""
    return {"visibility": run.visibility, "users": run_shared_users(run=run), "teams": run_shared_teams(run=run)}


def run_share(*, run: Run, by: AbstractBaseUser, visibility: str | None = None,
              users: Iterable | None = None, add: Iterable = (), remove: Iterable = (),
              teams: Iterable | None = None, add_teams: Iterable = (), remove_teams: Iterable = ()) -> Run:
    """Change who reads `run` (owner or staff only): `visibility` (`private` | `everyone`), `users`
    (the whole list of usernames it is shared with), or `add` / `remove` usernames to / from that list;
    `teams`, `add_teams`, `remove_teams` the same for team names (a team `by` is in, any team for staff:
    `accounts.teams.teams_for_sharing`; RunInputInvalid on `teams` naming "no such team of yours"
    otherwise); None and empty mean unchanged. Audited as `run.share` with the before and after when it
    changed. Whoever it is shared with, a team's members included, reads it only: its controls stay the
    owner's and staff's."""
    check_can_manage(user=by, run=run, action="share")
    if visibility is not None and visibility not in RunVisibility.values:
        raise RunInputInvalid(f"unknown visibility {visibility!r} (allowed: {', '.join(RunVisibility.values)})",
                              field="visibility")
    target_users = _users_named(users, run=run) if users is not None else None
    to_add = _users_named(add, run=run) if add else []
    to_remove = [str(name).strip() for name in remove or () if "\x00" not in str(name)]
    try:
        team_change = team_share_change(by=by, teams=teams, add=add_teams, remove=remove_teams,
                                        already=run.shared_with_teams.all())
    except TeamNotNamed as exc:
        raise RunInputInvalid(str(exc), field="teams") from None
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        before = _readers(locked)
        if visibility is not None and visibility != locked.visibility:
            locked.visibility = visibility
            locked.save(update_fields=["visibility"])
        if target_users is not None:
            locked.shared_with.set(target_users)
        if to_add:
            locked.shared_with.add(*to_add)
        if to_remove:
            locked.shared_with.remove(*locked.shared_with.filter(username__in=to_remove))
        team_change.apply(locked.shared_with_teams)
        after = _readers(locked)
        if after != before:
            audit_record(actor=by, action="run.share", obj=locked,
                         data={"owner": locked.owner.get_username(), "from": before, "to": after})
            run_id = locked.pk
            transaction.on_commit(lambda: _access_changed(run_id))
    run.visibility = locked.visibility
    return run


def check_project_of(*, owner: AbstractBaseUser, project_id, lock: bool = False) -> None:
    """RunInputInvalid on `project` unless `project_id` is None or the id of a project `owner` owns
    (one of another user's reads the same as none: its existence is not theirs to learn). With `lock`
    (inside a transaction) the project's row is locked so that it stays until the run commits."""
    if project_id is None:
        return
    if isinstance(project_id, bool) or not isinstance(project_id, int):
        raise RunInputInvalid(f"project must be a project id or null, got {str(project_id)[:60]!r}", field="project")
    projects = Run._meta.get_field("project").related_model.objects.filter(pk=project_id, owner_id=owner.pk)
    if lock:
        projects = projects.select_for_update()
    if projects.values_list("pk", flat=True).first() is None:
        raise RunInputInvalid(f"{owner.get_username()} has no project with id {project_id}", field="project")


def run_set_project(*, run: Run, by: AbstractBaseUser, project_id: int | None) -> Run:
    """Move `run` into the project `project_id` of the run's owner, or out of its project (None).

    Only the run's owner or staff move it (RunNotPermitted otherwise), and only into a project the
    run's owner owns (staff act for the owner): a project groups one user's runs, so that its share
    never hands out another user's run. A project that does not exist or is someone else's is the same
    RunInputInvalid on `project`. Audited as `run.project` (before and after) when it changed; the
    run's open websockets are told (its readers through the old project may no longer read it)."""
    check_can_manage(user=by, run=run, action="move")
    check_project_of(owner=run.owner, project_id=project_id)
    with transaction.atomic():
        check_project_of(owner=run.owner, project_id=project_id, lock=True)
        locked = Run.objects.select_for_update().get(pk=run.pk)
        if locked.project_id != project_id:
            before = locked.project_id
            locked.project_id = project_id
            locked.save(update_fields=["project"])
            audit_record(actor=by, action="run.project", obj=locked, data={"from": before, "to": project_id})
            run_id = locked.pk
            transaction.on_commit(lambda: _access_changed(run_id))
    run.project_id = locked.project_id
    return run
