"""The projects' admin pages: staff list and open projects (names escaped), and change them only
through the services (checked like the pages, audited, the share's readers gaining and losing the
runs, a delete keeping the runs); no add form; a user who is not staff gets the login page, staff
without the model's permissions a 403."""
import pytest
from django.test import Client

from rlstudio.accounts.models import AuditEvent
from rlstudio.projects.models import Project
from rlstudio.projects.services import project_create, project_share
from rlstudio.runs.models import Run
from rlstudio.runs.selectors import visible_runs
from rlstudio.runs.services import run_set_project

pytestmark = pytest.mark.django_db

LIST = "/admin/projects/project/"
HOSTILE = '<img src=x onerror="alert(1)">'


def _as(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def _change(project) -> str:
    return f"{LIST}{project.pk}/change/"


def _form(project, **fields) -> dict:
    data = {"name": project.name, "description": project.description,
            "shared_with": [u.pk for u in project.shared_with.all()]}
    data.update(fields)
    return data


def _sees(user, run) -> bool:
    return visible_runs(Run.objects.filter(pk=run.pk), user=user).exists()


@pytest.fixture
def project_with_run(alice, make_run):
    project = project_create(owner=alice, name=HOSTILE, description="desc")
    run = make_run(alice, "kept")
    run_set_project(run=run, by=alice, project_id=project.pk)
    return project, run


def test_staff_list_and_open_projects_with_names_escaped(staff, project_with_run):
    project, _run = project_with_run
    admin = _as(staff)
    listing = admin.get(LIST)
    assert listing.status_code == 200
    body = listing.content.decode()
    assert HOSTILE not in body and "&lt;img src=x onerror=" in body and f"{project.pk}/change/" in body
    assert admin.get(f"{LIST}?q=alice").content.decode().count("/change/") >= 1
    page = admin.get(_change(project))
    assert page.status_code == 200
    body = page.content.decode()
    assert HOSTILE not in body and 'name="name"' in body and 'name="shared_with"' in body
    assert 'name="owner"' not in body  # its owner never changes
    assert admin.get(f"{LIST}add/").status_code == 403


def test_a_change_goes_through_the_services(staff, alice, bob, project_with_run):
    project, run = project_with_run
    admin = _as(staff)
    resp = admin.post(_change(project), _form(project, name="algebra", shared_with=[bob.pk]))
    assert resp.status_code == 302, resp.content.decode()[-2000:]
    project.refresh_from_db()
    assert project.name == "algebra" and [u.username for u in project.shared_with.all()] == ["bob"]
    update = AuditEvent.objects.get(action="project.update")
    assert update.actor_id == staff.pk and update.data == {"name": [HOSTILE, "algebra"]}
    assert AuditEvent.objects.get(action="project.share").data["to"] == ["bob"]
    assert _sees(bob, run)
    # removing bob from the share takes the run away from him, audited
    admin.post(_change(project), _form(project, shared_with=[]))
    assert not _sees(bob, run) and AuditEvent.objects.filter(action="project.share").count() == 2


@pytest.mark.parametrize("fields, message", [
    ({"name": "a\nb"}, "control characters"),
    ({"name": "taken"}, "alice already has a project named &#x27;taken&#x27;"),
    ({"description": "d" * 10_001}, "the description is 10001 characters, at most 10000"),
])
def test_the_change_form_refuses_what_the_services_refuse(staff, alice, project_with_run, fields, message):
    project, _run = project_with_run
    project_create(owner=alice, name="taken")
    resp = _as(staff).post(_change(project), _form(project, **fields))
    assert resp.status_code == 200 and message in resp.content.decode()
    assert Project.objects.get(pk=project.pk).name == HOSTILE
    assert not AuditEvent.objects.filter(action="project.update").exists()


def test_the_share_offers_neither_the_owner_nor_inactive_users(staff, alice, bob, make_user, project_with_run):
    project, _run = project_with_run
    gone = make_user("gone")
    gone.is_active = False
    gone.save()
    admin = _as(staff)
    for user in (alice, gone):
        resp = admin.post(_change(project), _form(project, shared_with=[user.pk]))
        assert resp.status_code == 200 and "Select a valid choice" in resp.content.decode()
    assert not Project.objects.get(pk=project.pk).shared_with.exists()
    # a user shared with and made inactive since stays listed: the form still saves
    project_share(project=project, by=alice, users=["bob"])
    bob.is_active = False
    bob.save()
    resp = admin.post(_change(project), _form(project, description="still saves"))
    assert resp.status_code == 302 and Project.objects.get(pk=project.pk).description == "still saves"


def test_deletes_keep_the_runs_and_are_audited(staff, alice, project_with_run):
    project, run = project_with_run
    other = project_create(owner=alice, name="other")
    admin = _as(staff)
    assert admin.post(f"{LIST}{project.pk}/delete/", {"post": "yes"}).status_code == 302
    assert Run.objects.get(pk=run.pk).project_id is None
    assert AuditEvent.objects.get(action="project.delete").data["runs"] == [run.pk]
    resp = admin.post(LIST, {"action": "delete_selected", "_selected_action": [other.pk], "post": "yes"})
    assert resp.status_code == 302 and not Project.objects.exists()
    assert AuditEvent.objects.filter(action="project.delete").count() == 2


def test_users_who_are_not_staff_cannot_open_it(alice, make_user, project_with_run):
    project, _run = project_with_run
    for client in (Client(), _as(alice)):
        for url in (LIST, _change(project)):
            resp = client.get(url)
            assert resp.status_code == 302 and resp.url.startswith("/admin/login/"), url
        resp = client.post(_change(project), {"name": "hijacked"})
        assert resp.status_code == 302 and resp.url.startswith("/admin/login/")
    # staff without the model's permissions (not superuser): 403
    ops = make_user("ops")
    ops.is_staff = True
    ops.save()
    assert _as(ops).get(LIST).status_code == 403 and _as(ops).get(_change(project)).status_code == 403
    assert Project.objects.get(pk=project.pk).name == HOSTILE
