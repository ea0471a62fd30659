"""Sharing a project read-only with a team: the team's members read the project and every run in it
(added later too) for as long as they are members, and change nothing; anyone else gets a 404. Through
the services, the API, the project page and the admin; a team the owner is not in is a 400 on `teams`.
"""
import pytest
from django.contrib.auth.models import Group
from django.test import Client

from rlstudio.accounts.models import AuditEvent
from rlstudio.accounts.teams import team_set_members, user_set_teams
from rlstudio.projects.models import Project
from rlstudio.projects.selectors import project_list_for, visible_projects
from rlstudio.projects.services import ProjectInputInvalid, project_create, project_share
from rlstudio.runs.models import Run
from rlstudio.runs.selectors import visible_runs
from rlstudio.runs.services import run_set_project
from tests.rlstudio.conftest import api_client

pytestmark = pytest.mark.django_db

HOSTILE = "<script>alert('team')</script>"


def _page(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def _team(name: str, *members) -> Group:
    team = Group.objects.create(name=name)
    team.user_set.set(members)
    return team


def _sees_run(user, run) -> bool:
    return visible_runs(Run.objects.filter(pk=run.pk), user=user).exists()


def _sees_project(user, project) -> bool:
    return visible_projects(Project.objects.filter(pk=project.pk), user=user).exists()


@pytest.fixture
def carol(make_user):
    return make_user("carol")


@pytest.fixture
def lab(alice, bob):
    return _team("lab", alice, bob)


@pytest.fixture
def team_project(alice, lab, make_run):
    """alice's project "math" with one run, shared with the team lab (alice, bob)."""
    project = project_create(owner=alice, name="math")
    run = make_run(alice, "in-project")
    run_set_project(run=run, by=alice, project_id=project.pk)
    project_share(project=project, by=alice, add_teams=["lab"])
    return project, run


def test_members_read_the_project_and_its_runs_added_later_too(team_project, alice, bob, carol, make_run):
    project, run = team_project
    assert _sees_project(bob, project) and _sees_run(bob, run)
    assert not _sees_project(carol, project) and not _sees_run(carol, run)
    later = make_run(alice, "later")
    run_set_project(run=later, by=alice, project_id=project.pk)
    assert _sees_run(bob, later)
    assert [p.name for p in project_list_for(user=bob, scope="shared")] == ["math"]
    api = api_client(bob)
    body = api.get(f"/api/v1/projects/{project.pk}/").json()
    assert body["access"] == "shared" and body["shared_with_teams"] == [] and body["run_count"] == 2
    assert api.get(f"/api/v1/runs/?project={project.pk}").json()["count"] == 2
    # the run shows its project to the team's member (they read the project)
    assert api.get(f"/api/v1/runs/{run.pk}/").json()["project"] == {"id": project.pk, "name": "math"}
    assert api_client(carol).get(f"/api/v1/projects/{project.pk}/").status_code == 404
    assert _page(carol).get(f"/projects/{project.pk}/").status_code == 404
    page = _page(bob).get(f"/projects/{project.pk}/").content.decode()
    assert 'id="project-shared-note"' in page and 'id="project-manage"' not in page


def test_members_change_nothing(team_project, bob):
    project, run = team_project
    api = api_client(bob)
    for method, url, body in [("patch", f"/api/v1/projects/{project.pk}/", {"name": "mine"}),
                              ("get", f"/api/v1/projects/{project.pk}/sharing/", None),
                              ("put", f"/api/v1/projects/{project.pk}/sharing/", {"teams": []}),
                              ("delete", f"/api/v1/projects/{project.pk}/", None),
                              ("post", f"/api/v1/runs/{run.pk}/stop/", {}),
                              ("patch", f"/api/v1/runs/{run.pk}/", {"tags": ["x"]})]:
        resp = getattr(api, method)(url, body, format="json")
        assert resp.status_code == 403, (url, resp.content)
    assert _page(bob).post(f"/projects/{project.pk}/share/", {"remove_team": "lab"}).status_code == 403
    assert list(Project.objects.get(pk=project.pk).shared_with_teams.values_list("name", flat=True)) == ["lab"]


def test_leaving_the_team_takes_the_project_and_its_runs_away(team_project, lab, alice, bob, staff):
    project, run = team_project
    user_set_teams(user=bob, teams=[], by=staff)
    assert not _sees_project(bob, project) and not _sees_run(bob, run)
    assert api_client(bob).get(f"/api/v1/runs/{run.pk}/").status_code == 404
    assert AuditEvent.objects.get(action="user.teams").data == {"user": "bob", "from": ["lab"], "to": []}
    team_set_members(team=lab, members=[alice, bob], by=staff)
    assert _sees_run(bob, run)


def test_share_through_the_api_and_its_errors(alice, bob, carol, lab, make_run):
    _team("other", carol)
    project = project_create(owner=alice, name="p")
    api = api_client(alice)
    url = f"/api/v1/projects/{project.pk}/sharing/"
    resp = api.put(url, {"teams": ["lab"]}, format="json")
    assert resp.status_code == 200 and resp.json() == {"users": [], "teams": ["lab"]}
    assert api.get(f"/api/v1/projects/{project.pk}/").json()["shared_with_teams"] == ["lab"]
    assert api.get("/api/v1/projects/").json()["results"][0]["shared_with_teams"] == ["lab"]
    assert _sees_project(bob, project)
    messages = set()
    for name in ("other", "nowhere"):
        resp = api.put(url, {"teams": [name]}, format="json")
        assert resp.status_code == 400 and resp.json()["error"]["field"] == "teams"
        messages.add(resp.json()["error"]["message"].replace(name, "NAME"))
    assert messages == {"no such team of yours: 'NAME'"}
    resp = api.put(url, {}, format="json")
    assert resp.status_code == 400 and resp.json()["error"]["field"] == "users"
    assert api.put(url, {"users": ["carol"]}, format="json").json() == {"users": ["carol"], "teams": ["lab"]}
    assert api.put(url, {"teams": []}, format="json").json() == {"users": ["carol"], "teams": []}
    assert not _sees_project(bob, project)
    event = AuditEvent.objects.filter(action="project.share").order_by("id").last()
    assert event.data["teams_from"] == ["lab"] and event.data["teams_to"] == [] and event.data["to"] == ["carol"]
    with pytest.raises(ProjectInputInvalid) as exc:
        project_share(project=project, by=alice, add_teams=["other"])
    assert exc.value.field == "teams"


def test_the_project_page_shares_with_a_team_escaping_its_name(alice, carol, make_run):
    _team(HOSTILE, alice, carol)
    project = project_create(owner=alice, name="p")
    run = make_run(alice, "r")
    run_set_project(run=run, by=alice, project_id=project.pk)
    page = _page(alice)
    body = page.get(f"/projects/{project.pk}/").content.decode()
    assert 'name="add_team"' in body and HOSTILE not in body
    resp = page.post(f"/projects/{project.pk}/share/", {"add_team": HOSTILE}, follow=True)
    body = resp.content.decode()
    assert HOSTILE not in body and "&lt;script&gt;alert(&#x27;team&#x27;)&lt;/script&gt;" in body
    assert _sees_run(carol, run)
    resp = page.post(f"/projects/{project.pk}/share/", {"add_team": "nowhere"}, follow=True)
    assert "teams: no such team of yours: &#x27;nowhere&#x27;" in resp.content.decode()
    page.post(f"/projects/{project.pk}/share/", {"remove_team": HOSTILE})
    assert not _sees_run(carol, run)


def test_the_admin_shares_a_project_with_any_team_through_the_service(alice, carol, staff, make_run):
    outside = _team("outside", carol)
    project = project_create(owner=alice, name="p")
    run = make_run(alice, "r")
    run_set_project(run=run, by=alice, project_id=project.pk)
    admin = _page(staff)
    change = f"/admin/projects/project/{project.pk}/change/"
    assert 'name="shared_with_teams"' in admin.get(change).content.decode()
    data = {"name": "p", "description": "", "shared_with": [], "shared_with_teams": [outside.pk]}
    assert admin.post(change, data).status_code == 302
    assert _sees_run(carol, run)
    assert AuditEvent.objects.get(action="project.share").data["teams_to"] == ["outside"]
    admin.post(change, dict(data, shared_with_teams=[]))
    assert not _sees_run(carol, run) and AuditEvent.objects.filter(action="project.share").count() == 2


def test_project_pages_query_counts_do_not_grow_with_teams_and_each_project_is_listed_once(
        team_project, alice, bob, make_run):
    """A member in many teams, each sharing a project also shared by name and through another team:
    the project list, a project's page and the runs list read the same number of queries, and every
    project and run comes once, with the right counts (no join multiplies rows)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    project, _run = team_project
    urls = ["/projects/", "/projects/?scope=shared", f"/projects/{project.pk}/", "/", "/api/v1/projects/"]

    def queries() -> dict[str, int]:
        counts = {}
        for url in urls:
            with CaptureQueriesContext(connection) as ctx:
                assert _page(bob).get(url).status_code == 200, url
            counts[url] = len(ctx.captured_queries)
        return counts

    few = queries()
    for i in range(6):
        _team(f"t{i}", alice, bob)
        extra = project_create(owner=alice, name=f"p{i}")
        project_share(project=extra, by=alice, users=["bob"], teams=[f"t{i}", "lab"])
        run_set_project(run=make_run(alice, f"r{i}"), by=alice, project_id=extra.pk)
    assert queries() == few
    listed = api_client(bob).get("/api/v1/projects/?scope=shared").json()
    assert listed["count"] == 7 and len({p["id"] for p in listed["results"]}) == 7
    assert {p["run_count"] for p in listed["results"]} == {1}
    assert api_client(bob).get("/api/v1/runs/?scope=shared").json()["count"] == 7
