"""`rlstudio runs share ID` and `rlstudio projects share ID`: whom a run or a project (and every run in it)
is shared with, read-only, and changes to it. Without a flag: GET .../sharing/. With flags: one PATCH of
.../sharing/ with the names added and taken away (and a run's `visibility`), which the server applies at
once under the object's lock, so a change someone else made meanwhile stays. Before it, the command reads
the sharing once to refuse removing a name that is not there (a typo would otherwise pass for done)."""
from __future__ import annotations

import argparse

from .client import Client, ClientError
from .common import emit_json, out
from .output import cell


# The PATCH's fields and the flags they come from.
FLAG_OF = {"add_users": "--add-user", "remove_users": "--remove-user", "add_teams": "--add-team",
           "remove_teams": "--remove-team", "visibility": "--visibility"}


def add_share_flags(parser: argparse.ArgumentParser, *, visibility: bool) -> None:
    """The flags of both share commands (and a run's --visibility)."""
    for verb in ("add", "remove"):
        parser.add_argument(f"--{verb}-user", action="append", metavar="USER[,USER...]",
                            help=f"{verb} a username (repeat it, or separate with commas)")
        parser.add_argument(f"--{verb}-team", action="append", metavar="TEAM",
                            help=f"{verb} a team by its whole name (one you are in; repeat it for several: "
                                 "a team's name may hold a comma)")
    if visibility:
        parser.add_argument("--visibility", choices=("private", "everyone"),
                            help="everyone: every signed-in user reads the run; private: its owner, staff and "
                                 "the users and teams it is shared with")
    parser.add_argument("--json", action="store_true")


def _names(values: list[str] | None, *, commas: bool = True) -> list[str]:
    """Repeated (and, with `commas`, comma-separated) names, in order, each once. Team names are not
    split: one may hold a comma (a username cannot)."""
    parts = (n for v in values or [] for n in (v.split(",") if commas else [v]))
    return list(dict.fromkeys(n.strip() for n in parts if n.strip()))


def _not_there(what: str, current: list[str], remove: list[str], flag: str) -> None:
    missing = [n for n in remove if n not in current]
    if missing:
        raise ClientError(f"the {what} is not shared with {', '.join(missing)} (it is with: "
                          f"{', '.join(current) or 'nobody'})", field=flag, exit_code=2)


def _share(client: Client, args, *, what: str, path: str) -> int:
    change = {"add_users": _names(args.add_user), "remove_users": _names(args.remove_user),
              "add_teams": _names(args.add_team, commas=False),
              "remove_teams": _names(args.remove_team, commas=False)}
    change = {key: names for key, names in change.items() if names}
    if getattr(args, "visibility", None):
        change["visibility"] = args.visibility
    sharing = client.get(path) or {}
    if change:
        _not_there(what, sharing.get("users") or [], change.get("remove_users", []), "--remove-user")
        _not_there(what, sharing.get("teams") or [], change.get("remove_teams", []), "--remove-team")
        try:
            sharing = client.request("PATCH", path, body=change)
        except ClientError as exc:  # the API names its own fields: say the flag the name came in
            exc.field = FLAG_OF.get(exc.field or "", exc.field)
            raise
    if args.json:
        emit_json(sharing)
        return 0
    users, teams = sharing.get("users") or [], sharing.get("teams") or []
    seen_by = f"visibility: {sharing['visibility']}; " if "visibility" in sharing else ""
    out(f"{what} {args.id} is shared with {seen_by}users: {cell(users) if users else 'none'}; "
        f"teams: {cell(teams) if teams else 'none'}")
    return 0


def cmd_projects_share(client: Client, args) -> int:
    return _share(client, args, what="project", path=f"projects/{args.id}/sharing/")


def cmd_runs_share(client: Client, args) -> int:
    return _share(client, args, what="run", path=f"runs/{args.id}/sharing/")
