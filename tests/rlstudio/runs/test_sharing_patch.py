"""PATCH .../sharing/ of a run and of a project: names added and taken away in one request under the
object's lock, so a change made meanwhile by someone else stays (PUT replaces whole lists and would undo
it). Bad input is a 400 naming the field it came in; nothing is half applied; a reader gets a 403."""
import pytest
from django.contrib.auth.models import Group

from rlstudio.accounts.models import AuditEvent
from rlstudio.projects.services import project_create, project_share
from rlstudio.runs.services import run_share
from tests.rlstudio.conftest import api_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def carol(make_user):
    return make_user("carol")


@pytest.fixture
def lab(alice, bob):
    team = Group.objects.create(name="lab")
    team.user_set.set([alice, bob])
    return team


@pytest.fixture(params=["run", "project"])
def target(request, alice, make_run):
    """(the sharing URL, the object's share service) of a run or a project of alice's."""
    if request.param == "run":
        run = make_run(alice, "patched")
        return f"/api/v1/runs/{run.pk}/sharing/", lambda **kw: run_share(run=run, by=alice, **kw)
    project = project_create(owner=alice, name="patched")
    return f"/api/v1/projects/{project.pk}/sharing/", lambda **kw: project_share(project=project, by=alice, **kw)


def _sharing(resp) -> dict:
    body = resp.json()
    return {"users": body["users"], "teams": body["teams"]}


def test_patch_adds_and_removes_names_and_keeps_a_change_made_meanwhile(target, alice, bob, carol, lab):
    url, share = target
    api = api_client(alice)
    seen = api.get(url).json()  # a client reads the sharing ...
    assert seen["users"] == [] and seen["teams"] == []
    share(add=["carol"])  # ... someone else shares with carol meanwhile ...
    resp = api.patch(url, {"add_users": ["bob"], "add_teams": ["lab"]}, format="json")  # ... then it adds bob
    assert resp.status_code == 200, resp.content
    assert _sharing(resp) == {"users": ["bob", "carol"], "teams": ["lab"]}  # carol stays

    resp = api.patch(url, {"remove_users": ["carol", "nobody-shared"], "remove_teams": ["lab"]}, format="json")
    assert resp.status_code == 200 and _sharing(resp) == {"users": ["bob"], "teams": []}
    action = "run.share" if "/runs/" in url else "project.share"
    assert AuditEvent.objects.filter(action=action).count() == 3

    # A PATCH that changes nothing (a name not shared with) is a 200 and writes no audit event.
    assert _sharing(api.patch(url, {"remove_users": ["carol"]}, format="json")) == {"users": ["bob"], "teams": []}
    assert AuditEvent.objects.filter(action=action).count() == 3


@pytest.mark.parametrize("body, field, words", [
    ({}, "add_users", "nothing to change"),
    ({"add_users": []}, "add_users", "nothing to change"),
    ({"add_users": ["nobody"]}, "add_users", "no user named 'nobody'"),
    ({"add_users": ["alice"]}, "add_users", "alice owns the"),
    ({"add_users": "bob"}, "add_users", "list"),
    ({"add_users": ["bob"], "remove_users": [" bob"]}, "remove_users", "bob is also in add_users"),
    ({"add_teams": ["no-such-team"]}, "add_teams", "no such team of yours"),
    ({"add_teams": ["lab"], "remove_teams": ["lab"]}, "remove_teams", "lab is also in add_teams"),
])
def test_bad_input_is_a_400_naming_the_field_and_changes_nothing(target, alice, bob, lab, body, field, words):
    url, share = target
    share(add=["bob"])
    api = api_client(alice)
    resp = api.patch(url, body, format="json")
    assert resp.status_code == 400, resp.content
    error = resp.json()["error"]
    assert error["field"] == field and words in error["message"], error
    assert _sharing(api.get(url)) == {"users": ["bob"], "teams": []}


def test_an_unknown_user_with_a_valid_team_applies_neither(target, alice, lab):
    url, _share = target
    api = api_client(alice)
    resp = api.patch(url, {"add_teams": ["lab"], "add_users": ["nobody"]}, format="json")
    assert resp.status_code == 400 and resp.json()["error"]["field"] == "add_users"
    assert _sharing(api.get(url)) == {"users": [], "teams": []}


def test_a_reader_is_refused_and_a_stranger_gets_a_404(target, alice, bob, carol, staff):
    url, share = target
    share(add=["bob"])
    assert api_client(bob).patch(url, {"add_users": ["carol"]}, format="json").status_code == 403
    assert api_client(carol).patch(url, {"add_users": ["carol"]}, format="json").status_code == 404
    resp = api_client(staff).patch(url, {"add_users": ["carol"]}, format="json")
    assert resp.status_code == 200 and _sharing(resp)["users"] == ["bob", "carol"]


def test_a_runs_visibility_is_patched_with_or_without_names(alice, bob, make_run):
    run = make_run(alice, "vis")
    api = api_client(alice)
    url = f"/api/v1/runs/{run.pk}/sharing/"
    resp = api.patch(url, {"visibility": "everyone"}, format="json")
    assert resp.status_code == 200 and resp.json() == {"visibility": "everyone", "users": [], "teams": []}
    resp = api.patch(url, {"visibility": "private", "add_users": ["bob"]}, format="json")
    assert resp.json() == {"visibility": "private", "users": ["bob"], "teams": []}
    resp = api.patch(url, {"visibility": "world"}, format="json")
    assert resp.status_code == 400 and resp.json()["error"]["field"] == "visibility"
    # A project has no visibility: the key is refused by its name and changes nothing.
    project = project_create(owner=alice, name="p")
    resp = api.patch(f"/api/v1/projects/{project.pk}/sharing/", {"visibility": "everyone"}, format="json")
    assert resp.status_code == 400 and resp.json()["error"]["field"] == "visibility"


@pytest.mark.parametrize("body, field", [
    ({"visibility": "everyone", "add_users": ["bob"]}, "visibility"),  # a project has no visibility
    ({"add_users": ["bob"], "users": []}, "users"),  # PUT's whole list, not a PATCH field
    ({"add_users": ["bob"], "remove_user": ["carol"]}, "remove_user"),  # a typo
    ({"add_users": ["bob"], "": ["carol"]}, ""),  # an empty key, quoted in the message
])
def test_a_field_the_patch_does_not_take_is_a_400_naming_it_and_changes_nothing(target, alice, bob, carol,
                                                                                 body, field):
    url, share = target
    if field == "visibility" and "/runs/" in url:
        return  # a run's visibility is one of its fields (test_a_runs_visibility_...)
    share(add=["carol"])
    api = api_client(alice)
    resp = api.patch(url, body, format="json")
    assert resp.status_code == 400, resp.content
    assert resp.json()["error"]["field"] == field, resp.content
    assert f"{field!r} is not a field of this change" in resp.json()["error"]["message"], resp.content
    assert _sharing(api.get(url)) == {"users": ["carol"], "teams": []}
