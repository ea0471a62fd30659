"""The trainer's config warnings reach the user without refusing the run (issue 17): GRPO with
rollout.n=1 has no baseline. The form's preview lists them, the form's launch flashes them, the API's
create answer carries them."""
import pytest
from django.contrib.messages import get_messages
from django.test import Client

from rlstudio.runs import preview
from rlstudio.runs.models import Run, RunStatus

pytestmark = pytest.mark.django_db
N = "actor_rollout_ref.rollout.n"


def _body(ready, **extra):
    return {"name": "w1", "dataset": ready["dataset"].pk, "model": ready["model"].pk, "preset": "cpu_smoke",
            **extra}


def test_preview_lists_warnings_apart_from_errors():
    body = preview.preview(preset="cpu_smoke", gpus=0, overrides=[f"{N}=1"])
    assert body["errors"] == []
    assert [w["field"] for w in body["warnings"]] == [N] and "no baseline" in body["warnings"][0]["message"]
    assert preview.preview(preset="cpu_smoke", gpus=0)["warnings"] == []  # cpu_smoke samples n=2
    assert preview.warnings(None) == [] and preview.warnings({"data": {"nonsense": 1}}) == []


def test_api_create_answers_with_the_warnings_and_launches(api, ready):
    resp = api.post("/api/v1/runs/", _body(ready, overrides={N: 1}), format="json")
    assert resp.status_code == 201, resp.content
    body = resp.json()
    assert [w["field"] for w in body["warnings"]] == [N]
    assert body["status"] in (RunStatus.SUBMITTING, RunStatus.QUEUED)
    resp = api.post("/api/v1/runs/", _body(ready, name="w2"), format="json")
    assert resp.status_code == 201 and resp.json()["warnings"] == []
    assert "warnings" not in api.get(f"/api/v1/runs/{body['id']}/").json()  # only the create answer


def test_form_preview_shows_them_and_the_launch_flashes_them(alice, ready):
    page = Client()
    page.force_login(alice)
    form = {"name": "f", "dataset": ready["dataset"].pk, "model": ready["model"].pk, "preset": "cpu_smoke",
            "gpus": 0, "samples_per_prompt": 1}
    body = page.post("/runs/new/preview/", form).json()
    assert body["errors"] == [] and [w["field"] for w in body["warnings"]] == [N]
    html = page.get("/runs/new/").content.decode()
    assert 'id="preview-warnings"' in html
    resp = page.post("/runs/new/", form)
    assert resp.status_code == 302, resp.content.decode()[-2000:]
    assert Run.objects.get(name="f").config["actor_rollout_ref"]["rollout"]["n"] == 1
    flashed = [(m.level_tag, str(m)) for m in get_messages(resp.wsgi_request)]
    assert any(tag == "warning" and str(m).startswith(f"{N}: ") and "no baseline" in m for tag, m in flashed)
