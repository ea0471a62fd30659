"""Projects' services and selectors: create / rename / delete with their checks and caps, moving a run
in and out (only the run's owner or staff, only into the run owner's project), and the share that lets
named users read every run of the project (and nothing more), through `runs.selectors.visible_runs`."""
import pytest

from rlstudio.accounts.models import AuditEvent
from rlstudio.projects.errors import ProjectInputInvalid, ProjectNotPermitted
from rlstudio.projects.models import Project
from rlstudio.projects.selectors import project_list_for
from rlstudio.projects.services import (
    project_create,
    project_delete,
    project_share,
    project_update,
)
from rlstudio.runs.models import Run
from rlstudio.runs.selectors import RunFilter, run_list_for, visible_runs
from rlstudio.runs.services import RunInputInvalid, RunNotPermitted, run_set_project

pytestmark = pytest.mark.django_db


@pytest.fixture
def carol(make_user):
    return make_user("carol")


def _sees(user, run) -> bool:
    return visible_runs(Run.objects.filter(pk=run.pk), user=user).exists()


def test_create_rename_and_describe_audited(alice):
    project = project_create(owner=alice, name="  math-grpo ", description="GSM8K sweeps\n")
    assert (project.name, project.description) == ("math-grpo", "GSM8K sweeps")
    project_update(project=project, by=alice, name="math", description="")
    project.refresh_from_db()
    assert (project.name, project.description) == ("math", "")
    actions = list(AuditEvent.objects.filter(action__startswith="project.").order_by("id").values_list("action", flat=True))
    assert actions == ["project.create", "project.update"]


@pytest.mark.parametrize("name, description, field", [
    ("", "", "name"), ("   ", "", "name"), ("x" * 101, "", "name"), ("a\nb", "", "name"), ("a\x00b", "", "name"),
    (7, "", "name"), ("ok", "d" * 10_001, "description"), ("ok", "a\x00", "description"),
])
def test_create_refuses_bad_input_naming_the_field(alice, name, description, field):
    with pytest.raises(ProjectInputInvalid) as err:
        project_create(owner=alice, name=name, description=description)
    assert err.value.field == field
    assert not Project.objects.exists()


def test_names_are_unique_per_owner_only(alice, bob):
    first = project_create(owner=alice, name="p")
    with pytest.raises(ProjectInputInvalid, match="already have a project named 'p'"):
        project_create(owner=alice, name="p")
    project_create(owner=bob, name="p")  # another owner's name is free
    other = project_create(owner=alice, name="q")
    with pytest.raises(ProjectInputInvalid) as err:
        project_update(project=other, by=alice, name="p")
    assert err.value.field == "name"
    assert Project.objects.get(pk=other.pk).name == "q" and Project.objects.get(pk=first.pk).name == "p"


def test_the_per_user_cap(alice, bob, settings):
    settings.RLSTUDIO_MAX_PROJECTS_PER_USER = 2
    project_create(owner=alice, name="a")
    project_create(owner=alice, name="b")
    with pytest.raises(ProjectInputInvalid, match="RLSTUDIO_MAX_PROJECTS_PER_USER is 2") as err:
        project_create(owner=alice, name="c")
    assert err.value.field == "name"
    project_create(owner=bob, name="c")  # per user
    assert Project.objects.filter(owner=alice).count() == 2


def test_move_a_run_in_and_out(alice, bob, staff, make_run):
    run = make_run(alice, "r")
    mine = project_create(owner=alice, name="mine")
    theirs = project_create(owner=bob, name="theirs")
    run_set_project(run=run, by=alice, project_id=mine.pk)
    assert Run.objects.get(pk=run.pk).project_id == mine.pk
    # into another user's project: refused, looks like no project at all
    with pytest.raises(RunInputInvalid, match=f"alice has no project with id {theirs.pk}") as err:
        run_set_project(run=run, by=alice, project_id=theirs.pk)
    assert err.value.field == "project"
    with pytest.raises(RunInputInvalid):
        run_set_project(run=run, by=alice, project_id=10**9)
    # bob cannot move alice's run, not even into his own project
    with pytest.raises(RunNotPermitted):
        run_set_project(run=run, by=bob, project_id=None)
    # staff act for the owner: only into the owner's projects
    with pytest.raises(RunInputInvalid):
        run_set_project(run=run, by=staff, project_id=theirs.pk)
    run_set_project(run=run, by=staff, project_id=None)
    assert Run.objects.get(pk=run.pk).project_id is None
    assert [e.data for e in AuditEvent.objects.filter(action="run.project").order_by("id")] == [
        {"from": None, "to": mine.pk}, {"from": mine.pk, "to": None}]


def test_a_project_share_lets_its_users_read_every_run_in_it_added_later_too(alice, bob, carol, make_run):
    project = project_create(owner=alice, name="shared")
    first, later, outside = make_run(alice, "first"), make_run(alice, "later"), make_run(alice, "outside")
    run_set_project(run=first, by=alice, project_id=project.pk)
    project_share(project=project, by=alice, add=["bob"])
    assert _sees(bob, first) and not _sees(bob, later) and not _sees(bob, outside)
    run_set_project(run=later, by=alice, project_id=project.pk)
    assert _sees(bob, later)
    assert not _sees(carol, first) and not _sees(carol, later)
    assert {r.name for r in run_list_for(user=bob, flt=RunFilter(project=project.pk))} == {"first", "later"}
    assert {r.name for r in run_list_for(user=bob, flt=RunFilter(scope="shared"))} == {"first", "later"}
    # moving a run out of the project takes it away
    run_set_project(run=later, by=alice, project_id=None)
    assert not _sees(bob, later) and _sees(bob, first)
    # removing the share takes every run away
    project_share(project=project, by=alice, remove=["bob"])
    assert not _sees(bob, first)
    assert list(project_list_for(user=bob)) == []


def test_a_share_recipient_cannot_change_the_project(alice, bob, make_run):
    project = project_create(owner=alice, name="p")
    project_share(project=project, by=alice, users=["bob"])
    assert [p.name for p in project_list_for(user=bob, scope="shared")] == ["p"]
    assert list(project_list_for(user=bob, scope="mine")) == []
    for call in (lambda: project_update(project=project, by=bob, name="x"),
                 lambda: project_share(project=project, by=bob, add=["bob"]),
                 lambda: project_delete(project=project, by=bob)):
        with pytest.raises(ProjectNotPermitted, match="read-only"):
            call()
    assert Project.objects.get(pk=project.pk).name == "p"


def test_share_refuses_unknown_users_and_the_owner(alice):
    project = project_create(owner=alice, name="p")
    for users, message in [(["nobody"], "no user named 'nobody'"), (["alice"], "alice owns the project already"),
                           ("bob", "list of usernames")]:
        with pytest.raises(ProjectInputInvalid, match=message) as err:
            project_share(project=project, by=alice, users=users)
        assert err.value.field == "users"


def test_deleting_a_project_keeps_its_runs_detached_and_ends_the_share(alice, bob, make_run):
    project = project_create(owner=alice, name="p")
    run = make_run(alice, "kept")
    run_set_project(run=run, by=alice, project_id=project.pk)
    project_share(project=project, by=alice, users=["bob"])
    assert project_delete(project=project, by=alice) == [run.pk]
    run.refresh_from_db()
    assert run.project_id is None and not _sees(bob, run)
    assert AuditEvent.objects.filter(action="project.delete").get().data["runs"] == [run.pk]


def test_staff_see_and_change_every_project(alice, staff):
    project = project_create(owner=alice, name="p")
    assert [p.pk for p in project_list_for(user=staff)] == [project.pk]
    project_update(project=project, by=staff, description="reviewed")
    project_delete(project=project, by=staff)
    assert not Project.objects.exists()


def test_clone_and_resume_keep_the_project(alice, make_run, published):
    from rlstudio.runs import launch
    from rlstudio.runs.services import run_clone

    project = project_create(owner=alice, name="p")
    run = make_run(alice, "src", config=launch.build_config(preset=launch.DEFAULT_PRESET))
    run_set_project(run=run, by=alice, project_id=project.pk)
    run.refresh_from_db()
    clone = run_clone(run=run, by=alice)
    assert clone.project_id == project.pk
