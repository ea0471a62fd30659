"""`rlstudio projects list` and `projects create` against the real server (tests/cli/conftest.py), and
`runs list --project` giving a project's runs as GET /api/v1/runs/?project= does."""
from __future__ import annotations

import json

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
