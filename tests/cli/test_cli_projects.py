"""`rlstudio projects list / create / show / edit / delete / share` against the real server
(tests/cli/conftest.py), and `runs list --project` giving a project's runs as GET
/api/v1/runs/?project= does. Edits and shares are checked in the database and through what another
user then sees; a deletion needs --yes (or a `y` on a terminal) and leaves the project's runs."""
from __future__ import annotations

import io
import json

from rlstudio.accounts.models import Team
from rlstudio.projects.models import Project
from rlstudio.projects.services import project_create
from rlstudio.runs.models import Run


def test_create_then_list_and_a_taken_name_is_refused_naming_name(as_alice, alice, bob):
    project_create(owner=bob, name="bobs")  # not alice's and not shared: never listed

    r = as_alice("projects", "create", "lr-grid", "--description", "learning rates")
    assert r.code == 0, r
    made = Project.objects.get(owner=alice)
    assert r.out.strip() == f"project {made.pk} lr-grid" and made.description == "learning rates"

    again = as_alice("projects", "create", "lr-grid")
    assert again.code == 2 and again.out == "" and again.err.startswith("error: name: "), again
    assert Project.objects.filter(owner=alice).count() == 1

    second = json.loads(as_alice("projects", "create", "second", "--json").out)
    listed = as_alice("projects", "list")
    assert listed.code == 0, listed
    lines = listed.out.splitlines()
    assert lines[0].split() == ["ID", "NAME", "OWNER", "RUNS", "ACCESS", "DESCRIPTION", "CREATED"]
    assert [ln.split()[:5] for ln in lines[1:]] == [[str(second["id"]), "second", "alice", "0", "owner"],
                                                    [str(made.pk), "lr-grid", "alice", "0", "owner"]]
    body = json.loads(as_alice("projects", "list", "--json", "--limit", "1").out)
    assert body["count"] == 2 and [p["name"] for p in body["results"]] == ["second"]
    paged = as_alice("projects", "list", "--limit", "1")
    assert "(1 of 2; --all" in paged.err
    bad = as_alice("projects", "list", "--json", "--scope", "shared")
    assert json.loads(bad.out)["count"] == 0


def test_runs_list_project_gives_the_projects_runs(as_alice, alice, make_run):
    project = project_create(owner=alice, name="grid")
    inside, _ = make_run(alice, "inside")
    make_run(alice, "outside")
    Run.objects.filter(pk=inside.pk).update(project=project)
    r = as_alice("runs", "list", "--project", project.pk, "--json")
    assert r.code == 0, r
    assert [run["name"] for run in json.loads(r.out)["results"]] == ["inside"]
    table = as_alice("runs", "list", "--project", project.pk)
    assert [ln.split()[:2] + ln.split()[6:7] for ln in table.out.splitlines()[1:]] == [
        [str(inside.pk), "inside", "grid"]]  # the project column: its name


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_show_edit_and_delete_a_project(as_alice, alice, bob, make_run, server, token_of, cli, monkeypatch):
    project = project_create(owner=alice, name="grid", description="first\nsecond line")
    run, _ = make_run(alice, "inside")
    Run.objects.filter(pk=run.pk).update(project=project)
    shown = as_alice("projects", "show", project.pk)
    assert shown.code == 0, shown
    lines = shown.out.splitlines()
    assert lines[:5] + lines[6:8] == [f"id:          {project.pk}", "name:        grid", "owner:       alice",
                                      "access:      owner", "runs:        1", "shared with: nobody", "teams:       none"]
    assert lines[5].startswith("created:     20"), lines
    assert shown.out.rstrip().endswith("first\nsecond line")
    assert json.loads(as_alice("projects", "show", project.pk, "--json").out)["run_count"] == 1

    nothing = as_alice("projects", "edit", project.pk)
    assert nothing.code == 2 and nothing.err.strip() == "error: --name: nothing to change: give --name and/or " \
        "--description", nothing
    renamed = as_alice("projects", "edit", project.pk, "--name", "lr-grid", "--description", "")
    assert renamed.code == 0 and renamed.out.strip() == f"project {project.pk} lr-grid: name and description changed"
    project.refresh_from_db()
    assert project.name == "lr-grid" and project.description == ""
    bad = as_alice("projects", "edit", project.pk, "--name", "")
    assert bad.code == 2 and bad.err.startswith("error: name: "), bad

    as_bob = lambda *argv: cli("--url", server, "--token", token_of(bob), *argv)  # noqa: E731
    for argv, where in ((("projects", "show", project.pk), f"GET /api/v1/projects/{project.pk}/"),
                        (("projects", "edit", project.pk, "--name", "x"), f"PATCH /api/v1/projects/{project.pk}/"),
                        (("projects", "delete", project.pk, "--yes"), f"DELETE /api/v1/projects/{project.pk}/")):
        r = as_bob(*argv)
        assert r.code == 2 and r.err.strip() == f"error: Not found. ({where})", (argv, r)

    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))
    refused = as_alice("projects", "delete", project.pk)
    assert refused.code == 2 and refused.err.startswith("error: --yes: deleting a project cannot be undone"), refused
    monkeypatch.setattr("sys.stdin", _Terminal("\n"))
    declined = as_alice("projects", "delete", project.pk)
    assert declined.code == 1 and f"delete project {project.pk} lr-grid? Its 1 run(s) stay" in declined.err
    monkeypatch.setattr("sys.stdin", _Terminal("y\n"))
    done = as_alice("projects", "delete", project.pk)
    assert done.code == 0 and done.out.strip() == f"project {project.pk} deleted", done
    assert not Project.objects.exists() and Run.objects.get(pk=run.pk).project_id is None  # its run stays


def test_share_adds_and_removes_users_and_teams(as_alice, alice, bob, make_user, make_run, server, token_of, cli):
    make_user("carol")
    team = Team.objects.create(name="nlp")
    team.user_set.add(alice)
    Team.objects.create(name="not-hers")
    project = project_create(owner=alice, name="grid")
    run, _ = make_run(alice, "inside")
    Run.objects.filter(pk=run.pk).update(project=project)

    shown = as_alice("projects", "share", project.pk)
    assert shown.code == 0 and shown.out.strip() == f"project {project.pk} is shared with users: none; teams: none"
    added = as_alice("projects", "share", project.pk, "--add-user", "bob,carol", "--add-team", "nlp")
    assert added.code == 0, added
    assert added.out.strip() == f"project {project.pk} is shared with users: bob,carol; teams: nlp"
    assert sorted(project.shared_with.values_list("username", flat=True)) == ["bob", "carol"]
    as_bob = cli("--url", server, "--token", token_of(bob), "runs", "show", run.pk)  # the share reaches the run
    assert as_bob.code == 0 and "inside" in as_bob.out, as_bob

    removed = as_alice("projects", "share", project.pk, "--remove-user", "bob", "--json")
    assert json.loads(removed.out) == {"users": ["carol"], "teams": ["nlp"]}
    not_there = as_alice("projects", "share", project.pk, "--remove-user", "bob")
    assert not_there.code == 2, not_there
    assert not_there.err.strip() == "error: --remove-user: the project is not shared with bob (it is with: carol)"
    unknown = as_alice("projects", "share", project.pk, "--add-user", "nobody-here")
    assert unknown.code == 2 and unknown.err.startswith("error: --add-user: no user named"), unknown
    foreign = as_alice("projects", "share", project.pk, "--add-team", "not-hers")
    assert foreign.code == 2 and foreign.err.startswith("error: --add-team: ") and "no such team of yours" in foreign.err
    assert list(project.shared_with.values_list("username", flat=True)) == ["carol"]
    assert list(project.shared_with_teams.values_list("name", flat=True)) == ["nlp"]

    cleared = as_alice("projects", "share", project.pk, "--remove-user", "carol", "--remove-team", "nlp")
    assert cleared.out.strip() == f"project {project.pk} is shared with users: none; teams: none", cleared
    gone = cli("--url", server, "--token", token_of(bob), "runs", "show", run.pk)
    assert gone.code == 2 and gone.err.startswith("error: Not found."), gone


def test_a_share_keeps_a_change_made_after_the_command_read_the_sharing(as_alice, alice, make_user, monkeypatch):
    """The command sends the names it adds, not a whole list: a user shared with between its read and its
    write stays shared with (the server applies the change under the project's lock)."""
    from rlstudio.projects.services import project_share
    from rlstudio_cli.client import Client

    make_user("carol")
    make_user("dave")
    project = project_create(owner=alice, name="race")
    real_get = Client.get

    def get_then_someone_shares(self, path, **params):
        answer = real_get(self, path, **params)
        if path.endswith("/sharing/"):
            project_share(project=project, by=alice, add=["dave"])  # another tab, another client
        return answer

    monkeypatch.setattr(Client, "get", get_then_someone_shares)
    r = as_alice("projects", "share", project.pk, "--add-user", "carol")
    assert r.code == 0 and r.out.strip() == f"project {project.pk} is shared with users: carol,dave; teams: none", r
    assert sorted(project.shared_with.values_list("username", flat=True)) == ["carol", "dave"]


def test_share_takes_a_team_name_with_a_comma_whole(as_alice, alice):
    """A team's name may hold a comma ("R&D, Berlin": accounts.teams.clean_team_name refuses control
    characters only), so --add-team / --remove-team take each value as one name (repeat the flag for
    several); usernames, which cannot hold one, are still split on commas."""
    team = Team.objects.create(name="R&D, Berlin")
    team.user_set.add(alice)
    project = project_create(owner=alice, name="comma")
    added = as_alice("projects", "share", project.pk, "--add-team", "R&D, Berlin", "--json")
    assert added.code == 0, added
    assert json.loads(added.out)["teams"] == ["R&D, Berlin"]
    removed = as_alice("projects", "share", project.pk, "--remove-team", "R&D, Berlin", "--json")
    assert removed.code == 0 and json.loads(removed.out)["teams"] == [], removed
