"""/api/v1/projects/ and the runs API's project: list / create / get / patch / delete / share, the
runs list's ?project=, PATCH of a run's project; hostile: whoever the project is not shared with gets
404 everywhere, a share recipient reads (every run endpoint) and writes nothing."""
import pytest
from django.test import Client
from django.utils import timezone

from rlstudio.projects.models import Project
from rlstudio.projects.services import project_create, project_share
from rlstudio.runs.models import Run, RunStatus
from rlstudio.runs.services import run_set_project
from rlstudio.telemetry.models import MetricRow, Sample
from tests.rlstudio.conftest import api_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def carol(make_user):
    return make_user("carol")


@pytest.fixture
def project_run(alice, bob, make_run):
    """alice's finished run (a metric row, a sample) in her project "math", shared with bob."""
    project = project_create(owner=alice, name="math", description="<script>x</script>")
    run = make_run(alice, "in-project")
    Run.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED, checkpoint_path="/tmp/ckpt", step=2)
    run.refresh_from_db()
    MetricRow.objects.create(run=run, step=1, time=timezone.now(), metrics={"critic/score/mean": 0.5})
    Sample.objects.create(run=run, seq=1, step=1, uid="u1", index=0, reward=1.0,
                          transcript={"messages": [{"role": "user", "content": "2+2?"}]})
    run_set_project(run=run, by=alice, project_id=project.pk)
    project_share(project=project, by=alice, users=["bob"])
    run.refresh_from_db()
    return run


READ_URLS = ["/runs/{id}/", "/api/v1/runs/{id}/", "/api/v1/runs/{id}/metrics/", "/api/v1/runs/{id}/samples/",
             "/api/v1/runs/{id}/groups/?step=1", "/api/v1/runs/{id}/logs/", "/api/v1/runs/{id}/memory/",
             "/runs/{id}/groups/?step=1&uid=u1", "/runs/{id}/prompts/?uid=u1", "/runs/{id}/controls/",
             "/api/v1/runs/{id}/evaluations/", "/api/v1/runs/{id}/exports/", "/api/v1/runs/{id}/metrics.csv"]


def _page(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def test_create_list_get_patch_delete(alice):
    api = api_client(alice)
    resp = api.post("/api/v1/projects/", {"name": "math", "description": "GSM8K"}, format="json")
    assert resp.status_code == 201, resp.content
    body = resp.json()
    assert body["name"] == "math" and body["owner"] == "alice" and body["run_count"] == 0
    assert body["access"] == "owner" and body["shared_with"] == []
    pk = body["id"]
    assert [p["id"] for p in api.get("/api/v1/projects/").json()["results"]] == [pk]
    resp = api.patch(f"/api/v1/projects/{pk}/", {"name": "math-2"}, format="json")
    assert resp.status_code == 200 and resp.json()["name"] == "math-2" and resp.json()["description"] == "GSM8K"
    assert api.delete(f"/api/v1/projects/{pk}/").status_code == 204
    assert api.get(f"/api/v1/projects/{pk}/").status_code == 404


@pytest.mark.parametrize("body, field", [
    ({}, "name"), ({"name": ""}, "name"), ({"name": "x" * 101}, "name"), ({"name": "a\nb"}, "name"),
    ({"name": ["x"]}, "name"), ({"name": "ok", "description": "d" * 10_001}, "description"),
    ({"name": "ok", "owner": "bob"}, "owner"),
])
def test_create_refuses_bad_input_with_a_400_naming_the_field(alice, body, field):
    resp = api_client(alice).post("/api/v1/projects/", body, format="json")
    assert resp.status_code == 400, resp.content
    assert resp.json()["error"]["field"] == field
    assert not Project.objects.exists()


def test_duplicate_name_and_cap_are_400_on_name(alice, settings):
    api = api_client(alice)
    api.post("/api/v1/projects/", {"name": "p"}, format="json")
    assert api.post("/api/v1/projects/", {"name": "p"}, format="json").json()["error"]["field"] == "name"
    settings.RLSTUDIO_MAX_PROJECTS_PER_USER = 1
    resp = api.post("/api/v1/projects/", {"name": "q"}, format="json")
    assert resp.status_code == 400 and "RLSTUDIO_MAX_PROJECTS_PER_USER" in resp.json()["error"]["message"]


def test_share_recipient_reads_every_run_endpoint(project_run, bob):
    client = _page(bob)
    for url in READ_URLS:
        assert client.get(url.format(id=project_run.pk)).status_code == 200, url
    body = api_client(bob).get(f"/api/v1/runs/{project_run.pk}/").json()
    assert body["access"] == "shared" and body["project"] == {"id": project_run.project_id, "name": "math"}
    listed = api_client(bob).get(f"/api/v1/runs/?project={project_run.project_id}").json()
    assert [r["name"] for r in listed["results"]] == ["in-project"]
    got = api_client(bob).get(f"/api/v1/projects/{project_run.project_id}/").json()
    assert got["access"] == "shared" and got["run_count"] == 1 and got["shared_with"] == []


def test_share_recipient_writes_nothing(project_run, bob):
    api, page, pk, project = api_client(bob), _page(bob), project_run.pk, project_run.project_id
    for method, url, body in [("post", f"/api/v1/runs/{pk}/stop/", {"force": True}),
                              ("post", f"/api/v1/runs/{pk}/resume/", {}),
                              ("post", f"/api/v1/runs/{pk}/clone/", {}),
                              ("patch", f"/api/v1/runs/{pk}/", {"tags": ["mine"]}),
                              ("patch", f"/api/v1/runs/{pk}/", {"project": None}),
                              ("delete", f"/api/v1/runs/{pk}/", None),
                              ("put", f"/api/v1/runs/{pk}/sharing/", {"visibility": "everyone"}),
                              ("patch", f"/api/v1/projects/{project}/", {"name": "mine"}),
                              ("delete", f"/api/v1/projects/{project}/", None),
                              ("get", f"/api/v1/projects/{project}/sharing/", None),
                              ("put", f"/api/v1/projects/{project}/sharing/", {"users": []})]:
        resp = getattr(api, method)(url, body, format="json")
        assert resp.status_code == 403, (method, url, resp.content)
    for url, data in [(f"/runs/{pk}/stop/", {"force": "1"}), (f"/runs/{pk}/delete/", {}),
                      (f"/runs/{pk}/annotate/", {"tags": "x"}), (f"/runs/{pk}/project/", {"project": ""}),
                      (f"/projects/{project}/share/", {"remove": "bob"}), (f"/projects/{project}/delete/", {}),
                      (f"/projects/{project}/edit/", {"name": "x", "description": ""})]:
        assert page.post(url, data).status_code == 403, url
    project_run.refresh_from_db()
    assert project_run.project_id == project and project_run.tags == [] and project_run.status == "succeeded"
    assert Project.objects.get(pk=project).name == "math"
    assert list(Project.objects.get(pk=project).shared_with.values_list("username", flat=True)) == ["bob"]


def test_a_user_outside_the_share_sees_nothing(project_run, carol):
    client, api, project = _page(carol), api_client(carol), project_run.project_id
    for url in READ_URLS + ["/projects/%d/" % project]:
        assert client.get(url.format(id=project_run.pk)).status_code == 404, url
    for method, url in [("get", f"/api/v1/projects/{project}/"), ("patch", f"/api/v1/projects/{project}/"),
                        ("delete", f"/api/v1/projects/{project}/"), ("put", f"/api/v1/projects/{project}/sharing/"),
                        ("patch", f"/api/v1/runs/{project_run.pk}/")]:
        assert getattr(api, method)(url, {}, format="json").status_code == 404, url
    assert api.get("/api/v1/projects/").json()["count"] == 0
    assert api.get(f"/api/v1/runs/?project={project}").json()["count"] == 0


def test_unsharing_and_moving_out_remove_access(project_run, alice, bob):
    api, pk = api_client(alice), project_run.pk
    resp = api.patch(f"/api/v1/runs/{pk}/", {"project": None}, format="json")
    assert resp.status_code == 200 and resp.json()["project"] is None
    assert api_client(bob).get(f"/api/v1/runs/{pk}/").status_code == 404
    resp = api.patch(f"/api/v1/runs/{pk}/", {"project": project_run.project_id}, format="json")
    assert resp.json()["project"]["name"] == "math"
    assert api_client(bob).get(f"/api/v1/runs/{pk}/").status_code == 200
    resp = api.put(f"/api/v1/projects/{project_run.project_id}/sharing/", {"users": []}, format="json")
    assert resp.status_code == 200 and resp.json() == {"users": [], "teams": []}
    assert api_client(bob).get(f"/api/v1/runs/{pk}/").status_code == 404
    assert api_client(bob).get(f"/api/v1/projects/{project_run.project_id}/").status_code == 404


def test_patch_run_project_refuses_another_users_project(project_run, alice, bob, make_run):
    theirs = project_create(owner=bob, name="bobs")
    resp = api_client(alice).patch(f"/api/v1/runs/{project_run.pk}/", {"project": theirs.pk}, format="json")
    assert resp.status_code == 400 and resp.json()["error"]["field"] == "project"
    resp = api_client(alice).patch(f"/api/v1/runs/{project_run.pk}/", {"project": "x"}, format="json")
    assert resp.status_code == 400 and resp.json()["error"]["field"] == "project"
    resp = api_client(alice).patch(f"/api/v1/runs/{project_run.pk}/", {"tags": ["a"], "project": theirs.pk},
                                   format="json")
    assert resp.status_code == 400
    project_run.refresh_from_db()
    assert project_run.tags == []  # nothing half written


def test_a_run_shared_by_name_does_not_show_its_project(alice, carol, make_run):
    from rlstudio.runs.services import run_share

    project = project_create(owner=alice, name="secret-name")
    run = make_run(alice, "r")
    run_set_project(run=run, by=alice, project_id=project.pk)
    run_share(run=run, by=alice, add=["carol"])
    assert api_client(carol).get(f"/api/v1/runs/{run.pk}/").json()["project"] is None
    assert api_client(carol).get(f"/api/v1/projects/{project.pk}/").status_code == 404


def test_launch_into_a_project_and_not_into_anothers(alice, bob, make_dataset, make_model, published):
    mine, theirs = project_create(owner=alice, name="mine"), project_create(owner=bob, name="theirs")
    ds, model = make_dataset(alice, status="ready"), make_model(alice)
    body = {"name": "launched", "dataset": ds.pk, "model": model.pk, "preset": "cpu_smoke"}
    resp = api_client(alice).post("/api/v1/runs/", {**body, "project": theirs.pk}, format="json")
    assert resp.status_code == 400 and resp.json()["error"]["field"] == "project"
    assert not Run.objects.exists()
    resp = api_client(alice).post("/api/v1/runs/", {**body, "project": mine.pk}, format="json")
    assert resp.status_code == 201, resp.content
    assert resp.json()["project"] == {"id": mine.pk, "name": "mine"}


def test_the_list_as_documented_scope_paging_and_the_sharing_refusals(alice, bob, carol, staff):
    """docs/api.md "Projects": `scope` mine / shared (400 on `scope` otherwise), limit / offset paging
    newest first, and PUT sharing's 400 on `users` for an unknown, inactive or the owner's name."""
    for i in range(3):
        project_create(owner=alice, name=f"a{i}")
    theirs = project_create(owner=bob, name="bobs")
    project_share(project=theirs, by=bob, users=["alice"])
    api = api_client(alice)
    everything = api.get("/api/v1/projects/").json()
    assert [p["name"] for p in everything["results"]] == ["bobs", "a2", "a1", "a0"] and everything["count"] == 4
    assert [p["name"] for p in api.get("/api/v1/projects/?scope=mine").json()["results"]] == ["a2", "a1", "a0"]
    shared = api.get("/api/v1/projects/?scope=shared").json()["results"]
    assert [(p["name"], p["access"], p["shared_with"]) for p in shared] == [("bobs", "shared", [])]
    page = api.get("/api/v1/projects/?limit=2&offset=1").json()
    assert [p["name"] for p in page["results"]] == ["a2", "a1"] and page["count"] == 4
    resp = api.get("/api/v1/projects/?scope=everyone")
    assert resp.status_code == 400 and resp.json()["error"]["field"] == "scope"
    # staff see every project, with its share
    got = api_client(staff).get(f"/api/v1/projects/{theirs.pk}/").json()
    assert (got["access"], got["shared_with"]) == ("staff", ["alice"])
    carol.is_active = False
    carol.save()
    mine = Project.objects.get(name="a0")
    for users in (["carol"], ["nobody"], ["alice"]):
        resp = api.put(f"/api/v1/projects/{mine.pk}/sharing/", {"users": users}, format="json")
        assert resp.status_code == 400 and resp.json()["error"]["field"] == "users", (users, resp.content)
    assert api.get(f"/api/v1/projects/{mine.pk}/sharing/").json() == {"users": [], "teams": []}
