"""The filtered lists (runs, projects, a run's samples) refuse a query parameter they do not take with a
400 `unknown_parameter` naming it and the ones they take (`?state=running` used to answer every run);
what the pages' own scripts send, and every parameter the OpenAPI schema lists, is still taken."""
import pytest

from rlstudio.runs.models import Run, RunStatus
from tests.rlstudio.conftest import api_client

pytestmark = pytest.mark.django_db

LISTS = {"runs": "/api/v1/runs/", "projects": "/api/v1/projects/", "samples": "/api/v1/runs/{run}/samples/"}


@pytest.fixture
def runs(alice, make_run):
    running, queued = make_run(alice, "running"), make_run(alice, "queued")
    Run.objects.filter(pk=running.pk).update(status=RunStatus.RUNNING)
    return running, queued


def test_a_misspelt_filter_is_a_400_naming_it_and_the_known_ones(alice, runs):
    r = api_client(alice).get("/api/v1/runs/?state=running")
    assert r.status_code == 400, r.content
    err = r.json()["error"]
    assert err["code"] == "unknown_parameter" and err["field"] == "state"
    assert "'state'" in err["message"] and "status" in err["message"] and "limit" in err["message"]
    r = api_client(alice).get("/api/v1/runs/?status=running&limit=10&offset=0&format=json")
    assert r.status_code == 200 and [x["id"] for x in r.json()["results"]] == [runs[0].pk]


@pytest.mark.parametrize("name", ["runs", "projects", "samples"])
def test_each_filtered_list_refuses_an_unknown_parameter(alice, runs, name):
    url = LISTS[name].format(run=runs[0].pk)
    r = api_client(alice).get(url + "?nope=1")
    assert r.status_code == 400 and r.json()["error"]["field"] == "nope"
    assert r.json()["error"]["code"] == "unknown_parameter"
    assert api_client(alice).get(url + "?limit=5&offset=0").status_code == 200


def test_what_the_run_pages_samples_filter_sends_is_taken(alice, runs):
    """run_live.js sends the #sample-filters form's fields with limit and offset."""
    q = "step=1&min_reward=0&max_reward=1&finish_reason=stop&has_tool_call=yes&order=-reward&limit=20&offset=0"
    r = api_client(alice).get(f"/api/v1/runs/{runs[0].pk}/samples/?{q}")
    assert r.status_code == 200, r.content


@pytest.mark.parametrize("name", ["runs", "projects", "samples"])
def test_the_schema_lists_every_parameter_a_list_takes(alice, runs, name):
    from drf_spectacular.generators import SchemaGenerator

    path = {"runs": "/api/v1/runs/", "projects": "/api/v1/projects/",
            "samples": "/api/v1/runs/{run_id}/samples/"}[name]
    op = SchemaGenerator(patterns=None).get_schema(request=None, public=True)["paths"][path]["get"]
    listed = [p["name"] for p in op.get("parameters", []) if p["in"] == "query"]
    assert {"limit", "offset"} <= set(listed)
    url = LISTS[name].format(run=runs[0].pk)
    for param in listed:  # each is taken (a value it refuses names it as wrong, never unknown)
        r = api_client(alice).get(f"{url}?{param}=")
        assert r.status_code == 200 or r.json()["error"]["code"] != "unknown_parameter", (param, r.content)
