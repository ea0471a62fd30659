"""The projects pages: the list (create, paged, escaped), a project's page (its runs as the runs list
shows them, compare link, share form for the owner only), the runs list's project filter and column,
the launch form's picker, the run page's "Move to project" control."""
import pytest
from django.test import Client

from rlstudio.projects.models import Project
from rlstudio.projects.services import project_create, project_share
from rlstudio.runs.models import Run
from rlstudio.runs.services import run_set_project

pytestmark = pytest.mark.django_db

HOSTILE = '<img src=x onerror="alert(1)">'


def _page(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def test_create_a_project_from_the_list_page(alice):
    page = _page(alice)
    resp = page.post("/projects/", {"name": "math", "description": "GSM8K runs"}, follow=True)
    project = Project.objects.get()
    assert resp.redirect_chain[-1][0] == f"/projects/{project.pk}/"
    assert "GSM8K runs" in resp.content.decode()
    listing = page.get("/projects/").content.decode()
    assert f'href="/projects/{project.pk}/"' in listing
    resp = page.post("/projects/", {"name": "math"})
    assert resp.status_code == 400 and 'id="id_name_error"' in resp.content.decode()
    assert Project.objects.count() == 1


def test_the_list_is_paged(alice, monkeypatch):
    from rlstudio import paging

    monkeypatch.setattr(paging, "PER_PAGE", 10)
    for i in range(30):
        project_create(owner=alice, name=f"p{i:02d}")
    body = _page(alice).get("/projects/").content.decode()
    assert 'aria-label="pages"' in body and body.count("data-project-id=") < 30


def test_hostile_names_and_descriptions_are_escaped(alice, bob, make_run):
    project = project_create(owner=alice, name=HOSTILE, description=HOSTILE)
    run = make_run(alice, "r")
    run_set_project(run=run, by=alice, project_id=project.pk)
    project_share(project=project, by=alice, users=["bob"])
    for user, url in [(alice, "/projects/"), (alice, f"/projects/{project.pk}/"), (alice, "/runs/"),
                      (alice, f"/runs/{run.pk}/"), (bob, f"/projects/{project.pk}/"), (bob, "/runs/"),
                      (alice, "/runs/new/")]:
        body = _page(user).get(url).content.decode()
        assert HOSTILE not in body, url
        assert "&lt;img src=x" in body, url


def test_project_page_shows_its_runs_with_the_runs_list_columns(alice, bob, make_run):
    project = project_create(owner=alice, name="math", description="desc")
    inside, outside = make_run(alice, "inside-run"), make_run(alice, "outside-run")
    run_set_project(run=inside, by=alice, project_id=project.pk)
    body = _page(alice).get(f"/projects/{project.pk}/").content.decode()
    assert f'data-run-id="{inside.pk}"' in body and f'data-run-id="{outside.pk}"' not in body
    for column in ("Name", "Owner", "Project", "State", "Latest reward", "Duration"):
        assert f">{column}</a>" in body, column
    assert f'/runs/compare/?ids={inside.pk}' in body and 'id="project-share"' in body
    assert f"/runs/new/?project={project.pk}" in body
    assert "?sort=-step" in _page(alice).get(f"/projects/{project.pk}/?sort=name").content.decode()
    # shared read-only: the runs, no management forms
    project_share(project=project, by=alice, users=["bob"])
    body = _page(bob).get(f"/projects/{project.pk}/").content.decode()
    assert "inside-run" in body and 'id="project-shared-note"' in body
    assert 'id="project-share"' not in body and 'id="project-delete"' not in body
    assert _page(bob).get(f"/runs/{outside.pk}/").status_code == 404


def test_runs_list_project_filter_and_column(alice, bob, make_run):
    project = project_create(owner=alice, name="math")
    a, b = make_run(alice, "in-math"), make_run(alice, "no-project")
    run_set_project(run=a, by=alice, project_id=project.pk)
    body = _page(alice).get(f"/runs/?project={project.pk}").content.decode()
    assert f'data-run-id="{a.pk}"' in body and f'data-run-id="{b.pk}"' not in body
    assert f'<option value="{project.pk}" selected>math</option>' in body
    assert f'<a href="/projects/{project.pk}/">math</a>' in _page(alice).get("/runs/").content.decode()
    names = [r.name for r in Run.objects.order_by("project__name")]
    assert set(names) == {"in-math", "no-project"}
    assert _page(alice).get("/runs/?sort=project").status_code == 200
    # bob sees none of it
    assert "math" not in _page(bob).get(f"/runs/?project={project.pk}").content.decode()


def test_the_run_page_moves_a_run_for_its_owner_only(alice, bob, make_run):
    project = project_create(owner=alice, name="math")
    run = make_run(alice, "r")
    page = _page(alice)
    body = page.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="run-move-project"' in body and f'<option value="{project.pk}">math</option>' in body
    resp = page.post(f"/runs/{run.pk}/project/", {"project": str(project.pk)}, follow=True)
    assert "Moved into the project." in resp.content.decode()
    assert Run.objects.get(pk=run.pk).project_id == project.pk
    assert f'<a href="/projects/{project.pk}/">math</a>' in resp.content.decode()
    theirs = project_create(owner=bob, name="bobs")
    resp = page.post(f"/runs/{run.pk}/project/", {"project": str(theirs.pk)}, follow=True)
    assert "alice has no project with id" in resp.content.decode()
    assert Run.objects.get(pk=run.pk).project_id == project.pk
    page.post(f"/runs/{run.pk}/project/", {"project": ""})
    assert Run.objects.get(pk=run.pk).project_id is None
    assert _page(bob).post(f"/runs/{run.pk}/project/", {"project": ""}).status_code == 404


def test_the_launch_form_offers_the_users_projects(alice, bob):
    mine = project_create(owner=alice, name="mine")
    project_create(owner=bob, name="not-alices")
    body = _page(alice).get(f"/runs/new/?project={mine.pk}").content.decode()
    assert f'<option value="{mine.pk}" selected>mine</option>' in body and "not-alices" not in body


def test_owner_edits_shares_and_deletes_from_the_project_page(alice, bob, make_run):
    project = project_create(owner=alice, name="math")
    run = make_run(alice, "kept")
    run_set_project(run=run, by=alice, project_id=project.pk)
    page = _page(alice)
    page.post(f"/projects/{project.pk}/edit/", {"name": "algebra", "description": "new"})
    project.refresh_from_db()
    assert (project.name, project.description) == ("algebra", "new")
    resp = page.post(f"/projects/{project.pk}/share/", {"add": "nobody"}, follow=True)
    assert "no user named &#x27;nobody&#x27;" in resp.content.decode()
    page.post(f"/projects/{project.pk}/share/", {"add": "bob"})
    assert _page(bob).get(f"/runs/{run.pk}/").status_code == 200
    page.post(f"/projects/{project.pk}/share/", {"remove": "bob"})
    assert _page(bob).get(f"/runs/{run.pk}/").status_code == 404
    resp = page.post(f"/projects/{project.pk}/delete/", follow=True)
    assert resp.redirect_chain[-1][0] == "/projects/" and not Project.objects.exists()
    assert Run.objects.get(pk=run.pk).project_id is None


def test_pages_need_login_and_post(alice):
    project = project_create(owner=alice, name="p")
    assert Client().get("/projects/").status_code == 302
    assert Client().get(f"/projects/{project.pk}/").status_code == 302
    assert _page(alice).get(f"/projects/{project.pk}/delete/").status_code == 405
