"""A run's project across its lineage and its project's end: a resume and a clone (by the owner or by
staff) go into the source run's project; a project deleted under its runs leaves them (the foreign key
is SET_NULL, also when the row goes without the service) with their pages, the runs list and its
project filter still answering."""
import pytest
from django.test import Client

from rlstudio.projects.models import Project
from rlstudio.projects.services import project_create, project_share
from rlstudio.runs.models import Run
from rlstudio.runs.services import run_clone, run_resume, run_set_project

pytestmark = pytest.mark.django_db


def _page(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def test_a_resume_goes_into_the_source_runs_project(alice, staff, run_with_ckpts, published, settings):
    from pathlib import Path

    # the trainer's commit marker: step 2 is the run's last committed checkpoint
    (Path(settings.RUNS_DIR) / str(run_with_ckpts.pk) / "latest_checkpointed_iteration.txt").write_text("2")
    project = project_create(owner=alice, name="math")
    run_set_project(run=run_with_ckpts, by=alice, project_id=project.pk)
    source = Run.objects.get(pk=run_with_ckpts.pk)
    resumed = run_resume(run=source, by=alice)
    assert (resumed.parent_id, resumed.parent_kind) == (source.pk, "resume")
    assert Run.objects.get(pk=resumed.pk).project_id == project.pk
    # staff resuming alice's run act for her: the new run is hers, in her project
    again = run_resume(run=source, by=staff)
    assert Run.objects.get(pk=again.pk).owner_id == alice.pk
    assert Run.objects.get(pk=again.pk).project_id == project.pk
    body = _page(alice).get(f"/projects/{project.pk}/").content.decode()
    for run in (source, resumed, again):
        assert f'data-run-id="{run.pk}"' in body


def test_a_clone_by_staff_stays_in_the_owners_project_and_one_outside_stays_outside(
        alice, staff, make_run, published):
    from rlstudio.runs import launch

    project = project_create(owner=alice, name="math")
    inside = make_run(alice, "inside", config=launch.build_config(preset=launch.DEFAULT_PRESET))
    outside = make_run(alice, "outside", config=launch.build_config(preset=launch.DEFAULT_PRESET))
    run_set_project(run=inside, by=alice, project_id=project.pk)
    clone = run_clone(run=Run.objects.get(pk=inside.pk), by=staff)
    assert Run.objects.get(pk=clone.pk).project_id == project.pk
    assert run_clone(run=Run.objects.get(pk=outside.pk), by=alice).project_id is None


@pytest.mark.parametrize("how", ["service", "row"])
def test_a_deleted_projects_runs_stay_with_their_pages_working(alice, bob, make_run, how):
    from rlstudio.projects.services import project_delete

    project = project_create(owner=alice, name="math")
    run = make_run(alice, "kept")
    run_set_project(run=run, by=alice, project_id=project.pk)
    project_share(project=project, by=alice, users=["bob"])
    if how == "service":
        project_delete(project=project, by=alice)
    else:  # the row goes without the service (the admin's bulk delete did, a manual DELETE): SET_NULL
        Project.objects.filter(pk=project.pk).delete()
    assert Run.objects.get(pk=run.pk).project_id is None
    page = _page(alice)
    resp = page.get(f"/runs/{run.pk}/")
    assert resp.status_code == 200
    assert '<dd id="run-project"><span class="muted">none</span></dd>' in resp.content.decode()
    listing = page.get("/runs/")
    assert listing.status_code == 200 and f'data-run-id="{run.pk}"' in listing.content.decode()
    # a filter by the gone project's id answers (no 500), without the run in it
    gone = page.get(f"/runs/?project={project.pk}")
    assert gone.status_code == 200 and f'data-run-id="{run.pk}"' not in gone.content.decode()
    assert page.get(f"/projects/{project.pk}/").status_code == 404
    assert page.get(f"/api/v1/runs/{run.pk}/").json()["project"] is None
    # its reader through the project reads it no more
    assert _page(bob).get(f"/runs/{run.pk}/").status_code == 404
