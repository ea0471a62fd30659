"""Projects in a real Chromium: alice creates a project (a hostile name, shown as text) on the
projects page, launches a run into it from the launch form's project picker (preselected by the
project page's "New run in this project"), finds it on the project's page and in the runs list filtered
by the project, moves another run in from its page's "Move to project", and shares the project with
bob, who then reads both runs read-only and cannot change the project (no controls; a forged POST is a
403). No run trains: alice's quota admits none, so the launched run waits queued."""
from __future__ import annotations

import re

import pytest

pytestmark = [pytest.mark.django_db(transaction=True)]

NAME = "math <img src=x onerror=\"document.title='pwned'\">"


def test_a_project_from_creation_to_a_read_only_share(page_as, make_user, register_model, ui):
    from playwright.sync_api import expect

    from rlstudio.catalog.models import Dataset
    from rlstudio.projects.models import Project
    from rlstudio.quotas.models import GpuQuota
    from rlstudio.runs.models import Run
    from rlstudio.runs.services import run_create

    alice, bob = make_user("alice"), make_user("bob")
    GpuQuota.objects.create(user=alice, max_gpus=0, gpu_hours_per_month=0, max_concurrent_runs=0,
                            max_queued_runs=10)
    model = register_model(alice, "tiny-smoke")
    dataset = Dataset.objects.create(owner=alice, name="math-data", file_path="/tmp/math-data.jsonl",
                                     sha256="0" * 64, status="ready")
    loose, _token = run_create(owner=alice, name="loose-run", dataset=dataset, model=model, config={}, gpus=0)

    page = page_as(alice)
    page.goto("/projects/")
    expect(page.locator("#projects-empty")).to_be_visible()
    page.fill("#new-project #id_name", NAME)
    page.fill("#new-project #id_description", "GSM8K runs <b>not bold</b>")
    page.click("#new-project button[type=submit]")
    page.wait_for_url(re.compile(r".*/projects/\d+/$"))
    project = Project.objects.get(owner=alice)
    expect(page.locator("#project-name")).to_have_text(NAME)
    expect(page.locator("#project-description")).to_have_text("GSM8K runs <b>not bold</b>")
    expect(page.locator("#project-empty")).to_be_visible()

    # New run in this project: the launch form's picker comes preselected
    page.get_by_role("link", name="New run in this project").click()
    page.wait_for_url(re.compile(rf".*/runs/new/\?project={project.pk}$"))
    expect(page.locator("#id_project")).to_have_value(str(project.pk))
    page.fill("#id_name", "launched-run")
    page.select_option("#id_dataset", label="math-data")
    ui.select_model(page, "tiny-smoke")
    page.select_option("#id_preset", "cpu_smoke")
    page.fill("#id_gpus", "0")
    page.click("form.run-form button[type=submit]")
    page.wait_for_url(re.compile(r".*/runs/\d+/$"), timeout=60_000)
    launched = Run.objects.get(name="launched-run")
    assert launched.project_id == project.pk and launched.status == "queued"
    expect(page.locator("#run-project a")).to_have_text(NAME)

    # the project's page and the runs list filtered by the project list it, not the loose run
    page.click("#run-project a")
    page.wait_for_url(re.compile(rf".*/projects/{project.pk}/$"))
    expect(page.locator(f"tr[data-run-id='{launched.pk}']")).to_be_visible()
    expect(page.locator(f"tr[data-run-id='{loose.pk}']")).to_have_count(0)
    page.goto("/runs/")
    expect(page.locator(f"tr[data-run-id='{loose.pk}']")).to_be_visible()
    page.select_option("#id_project", label=NAME)  # data-autosubmit
    page.wait_for_url(re.compile(rf".*[?&]project={project.pk}(&|$)"))
    expect(page.locator(f"tr[data-run-id='{launched.pk}']")).to_be_visible()
    expect(page.locator(f"tr[data-run-id='{loose.pk}']")).to_have_count(0)

    # Move to project, from the loose run's page
    page.goto(f"/runs/{loose.pk}/")
    expect(page.locator("#run-project")).to_have_text("none")
    page.select_option("#id_move_project", label=NAME)
    page.click("#run-move-project button[type=submit]")
    expect(page.locator("ul.messages")).to_contain_text("Moved into the project.")
    expect(page.locator("#run-project a")).to_have_text(NAME)
    assert Run.objects.get(pk=loose.pk).project_id == project.pk

    # share it with bob from the project's page
    page.goto(f"/projects/{project.pk}/")
    page.click("#project-manage summary")
    page.fill("#id_project_share_add", "bob")
    page.click("#project-share button[type=submit]")
    expect(page.locator("ul.messages")).to_contain_text("Shared with bob")
    expect(page.locator("#project-share-users")).to_contain_text("bob")
    for run in (launched, loose):
        expect(page.locator(f"tr[data-run-id='{run.pk}']")).to_be_visible()
    ui.shot(page, "45-project-page")

    # bob: the project and its runs, read-only
    other = page_as(bob)
    other.goto("/projects/")
    row = other.locator(f"tr[data-project-id='{project.pk}']")
    expect(row).to_contain_text("alice")
    expect(row.locator(".shared-mark")).to_have_text("shared")
    row.locator("a").click()
    other.wait_for_url(re.compile(rf".*/projects/{project.pk}/$"))
    expect(other.locator("#project-shared-note")).to_be_visible()
    expect(other.locator("#project-manage")).to_have_count(0)
    expect(other.get_by_role("link", name="New run in this project")).to_have_count(0)
    other.locator(f"tr[data-run-id='{loose.pk}'] a", has_text="loose-run").click()
    other.wait_for_url(re.compile(rf".*/runs/{loose.pk}/$"))
    expect(other.locator("#shared-note")).to_be_visible()
    expect(other.locator("#run-move-project")).to_have_count(0)
    expect(other.locator("#run-project a")).to_have_text(NAME)
    # a forged edit (the form is not on bob's pages) is refused, the project unchanged
    status = other.evaluate("""async (url) => {
        const body = new FormData();
        body.append("name", "taken over");
        const token = document.querySelector("input[name=csrfmiddlewaretoken]").value;
        const resp = await fetch(url, {method: "POST", body, headers: {"X-CSRFToken": token},
                                       credentials: "same-origin"});
        return resp.status; }""", f"/projects/{project.pk}/edit/")
    assert status == 403
    assert Project.objects.get(pk=project.pk).name == NAME

    # the hostile name was text on every page (its onerror never ran)
    for p in (page, other):
        assert p.title() != "pwned" and p.locator("img[src=x]").count() == 0
