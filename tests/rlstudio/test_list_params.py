"""Every list of the API refuses a query parameter it does not take (docs/api.md "Lists"): a 400
`unknown_parameter` naming it and the ones it takes, rather than ignore it and answer the whole list.
Those it takes are exactly its schema's (one declaration feeds both: ListParamsMixin, list_params);
what the pages' scripts send still works. The runs list's own cases: runs/test_unknown_params.py."""
import re

import pytest

from rlstudio.evaluations.models import Evaluation, EvaluationStatus
from rlstudio.exports.models import Export
from tests.rlstudio.conftest import api_client

pytestmark = pytest.mark.django_db

# name: (URL, the schema's path, a query it needs to answer 200)
LISTS = {
    "runs": ("/api/v1/runs/", "/api/v1/runs/", ""),
    "projects": ("/api/v1/projects/", "/api/v1/projects/", ""),
    "configs": ("/api/v1/configs/", "/api/v1/configs/", ""),
    "presets": ("/api/v1/presets/", "/api/v1/presets/", ""),
    "datasets": ("/api/v1/datasets/", "/api/v1/datasets/", ""),
    "dataset rows": ("/api/v1/datasets/{dataset}/rows/", "/api/v1/datasets/{id}/rows/", ""),
    "models": ("/api/v1/models/", "/api/v1/models/", ""),
    "sweeps": ("/api/v1/sweeps/", "/api/v1/sweeps/", ""),
    "reward functions": ("/api/v1/reward-functions/", "/api/v1/reward-functions/", ""),
    "tool sets": ("/api/v1/tool-sets/", "/api/v1/tool-sets/", ""),
    "samples": ("/api/v1/runs/{run}/samples/", "/api/v1/runs/{run_id}/samples/", ""),
    "metrics": ("/api/v1/runs/{run}/metrics/", "/api/v1/runs/{run_id}/metrics/", ""),
    "metrics overview": ("/api/v1/runs/{run}/metrics/overview/", "/api/v1/runs/{run_id}/metrics/overview/", ""),
    "run evaluations": ("/api/v1/runs/{run}/evaluations/", "/api/v1/runs/{run_id}/evaluations/", ""),
    "run evaluation samples": ("/api/v1/runs/{run}/evaluations/{ev}/samples/",
                               "/api/v1/runs/{run_id}/evaluations/{evaluation_id}/samples/", "prompt=0&column=base"),
    "model evaluations": ("/api/v1/models/{model}/evaluations/", "/api/v1/models/{model_id}/evaluations/", ""),
    "model evaluation samples": ("/api/v1/models/{model}/evaluations/{model_ev}/samples/",
                                 "/api/v1/models/{model_id}/evaluations/{evaluation_id}/samples/",
                                 "prompt=0&column=base"),
    "exports": ("/api/v1/runs/{run}/exports/", "/api/v1/runs/{run_id}/exports/", ""),
    "alert rules": ("/api/v1/alerts/rules/", "/api/v1/alerts/rules/", ""),
    "alert catalogue": ("/api/v1/alerts/catalogue/", "/api/v1/alerts/catalogue/", ""),
    "notifications": ("/api/v1/alerts/notifications/", "/api/v1/alerts/notifications/", ""),
    "webhooks": ("/api/v1/alerts/webhooks/", "/api/v1/alerts/webhooks/", ""),
}
# The schema's other GETs: one object each (a detail, a run's telemetry reads, a download), not a list.
NOT_LISTS = {
    "/api/v1/alerts/rules/{rule_id}/", "/api/v1/alerts/settings/", "/api/v1/configs/{id}/", "/api/v1/datasets/{id}/",
    "/api/v1/models/{id}/", "/api/v1/models/{model_id}/evaluations/{evaluation_id}/",
    "/api/v1/playground/sessions/{session_id}/", "/api/v1/projects/{id}/", "/api/v1/projects/{id}/sharing/",
    "/api/v1/quota/", "/api/v1/reward-functions/{name}/", "/api/v1/tool-sets/{name}/", "/api/v1/runs/{id}/",
    "/api/v1/runs/{id}/checkpoints/", "/api/v1/runs/{id}/job-log/", "/api/v1/runs/{id}/sharing/",
    "/api/v1/runs/{run_id}/alerts/", "/api/v1/runs/{run_id}/evaluations/{evaluation_id}/",
    "/api/v1/runs/{run_id}/exports/{export_id}/", "/api/v1/runs/{run_id}/exports/{export_id}/archive/",
    "/api/v1/runs/{run_id}/groups/", "/api/v1/runs/{run_id}/logs/", "/api/v1/runs/{run_id}/memory/",
    "/api/v1/runs/{run_id}/metrics.csv", "/api/v1/runs/{run_id}/messages.txt", "/api/v1/runs/{run_id}/retention/",
    "/api/v1/runs/{run_id}/samples/{sample_id}/", "/api/v1/runs/{run_id}/tensorboard.tar.gz",
    "/api/v1/runs/compare/", "/api/v1/sweeps/{id}/",
}


@pytest.fixture(scope="module")
def schema_paths(django_db_blocker):
    from drf_spectacular.generators import SchemaGenerator

    with django_db_blocker.unblock():
        return SchemaGenerator(patterns=None).get_schema(request=None, public=True)["paths"]


@pytest.fixture
def ids(alice, make_run, make_model, make_dataset):
    run = make_run(alice, "listed")
    data = make_dataset(alice, "eval-data", status="ready")
    ev = Evaluation.objects.create(run=run, owner=alice, dataset=data, checkpoints=[2], include_base=True, k=1,
                                   max_prompts=1, sampling={}, status=EvaluationStatus.SUCCEEDED)
    model = make_model(alice, "evaluated")
    model_ev = Evaluation.objects.create(model=model, owner=alice, dataset=data, include_base=True, k=1,
                                         max_prompts=1, sampling={}, status=EvaluationStatus.SUCCEEDED)
    Export.objects.create(run=run, owner=alice, step=2)
    return {"run": run.pk, "dataset": data.pk, "ev": ev.pk, "model": model.pk, "model_ev": model_ev.pk}


def _url(name: str, ids: dict, query: str) -> str:
    url, _path, needs = LISTS[name]
    return url.format(**ids) + "?" + "&".join(q for q in (needs, query) if q)


def _takes(message: str) -> set[str]:
    """The parameters a refusal's message says the list takes."""
    listed = re.search(r"this list takes(?:: (.*)| none)$", message)
    assert listed, message
    return set(listed.group(1).split(", ")) if listed.group(1) else set()


@pytest.mark.parametrize("name", LISTS)
def test_a_misspelt_parameter_is_a_400_naming_it(alice, ids, name):
    client = api_client(alice)
    r = client.get(_url(name, ids, "limt=5"))
    assert r.status_code == 400, (name, r.content)
    err = r.json()["error"]
    assert err["code"] == "unknown_parameter" and err["field"] == "limt", err
    assert err["message"].startswith("unknown query parameter 'limt'; this list takes"), err
    assert client.get(_url(name, ids, "format=json")).status_code == 200, name


@pytest.mark.parametrize("name", LISTS)
def test_a_list_takes_exactly_the_parameters_its_schema_lists(alice, ids, schema_paths, name):
    """The refusal names what the schema lists (one declaration feeds both); each of them is taken (a
    value it refuses names it as wrong, never unknown); `limit`/`offset` only where the list has them."""
    op = schema_paths[LISTS[name][1]]["get"]
    listed = {p["name"] for p in op.get("parameters", []) if p["in"] == "query"}
    client = api_client(alice)
    assert _takes(client.get(_url(name, ids, "nope=1")).json()["error"]["message"]) == listed, name
    for param in listed:
        r = client.get(_url(name, ids, f"{param}="))
        assert r.status_code == 200 or r.json()["error"]["code"] != "unknown_parameter", (name, param, r.content)


def test_every_list_of_the_schema_is_checked_here(schema_paths):
    """A new GET is either a list (in LISTS, so it refuses what it does not take) or named as one object."""
    gets = {path for path, ops in schema_paths.items() if "get" in ops}
    assert gets - NOT_LISTS == {path for _url, path, _needs in LISTS.values()}


@pytest.mark.parametrize("name, query", [
    ("metrics", "offset=10"),  # keyed by after_step: an offset would be ignored
    ("notifications", "offset=20"),  # the newest `limit`: no offset
    ("presets", "limit=1"),  # not paged
    ("run evaluations", "status=failed"),  # not filtered
])
def test_a_pager_or_filter_a_list_does_not_have_is_refused(alice, ids, name, query):
    r = api_client(alice).get(_url(name, ids, query))
    assert r.status_code == 400 and r.json()["error"]["code"] == "unknown_parameter", (name, r.content)
    assert r.json()["error"]["field"] == query.split("=")[0]


@pytest.mark.parametrize("name, query", [
    ("notifications", "limit=20"),  # notifications.js, the bell's list
    ("metrics", "after_step=-1&limit=5000"),  # run_live.js, the metric rows past the page's first
    ("run evaluation samples", ""),  # run_evaluations.js, a matrix cell (prompt=&column=)
    ("model evaluation samples", ""),
    ("dataset rows", "offset=0&limit=50"),  # the dataset page's hint
    ("alert rules", "run={run}&defaults=0"),
])
def test_what_the_pages_send_is_taken(alice, ids, name, query):
    r = api_client(alice).get(_url(name, ids, query.format(**ids)))
    assert r.status_code == 200, (name, r.content)


# A bad `limit` or `offset` is a 400 naming it (docs/api.md "Lists", api/params.int_param), where DRF's
# pager fell back to the default page (`limit=x`, `offset=-1`), gave 50 rows for `limit=0` and clamped
# `limit=501` to 500, and a dataset's rows did the same by hand. Tried on the viewsets' pager (runs,
# datasets), the lists paged by hand (a dataset's rows, a run's samples), the notifications' lone
# `limit` and a run's metrics with their own bounds; every other paged list by the schema's bounds below.
PAGED = ("runs", "datasets", "dataset rows", "samples", "notifications", "metrics")
NO_OFFSET = ("notifications", "metrics")  # an offset there is an unknown parameter (above)
BAD_PAGER_VALUES = (("limit", "x"), ("limit", "0"), ("limit", "{over}"), ("limit", "-1"), ("limit", "1.5"),
                    ("limit", " 5"), ("offset", "-1"), ("offset", "x"), ("offset", "1e3"))


def _pager(schema_paths, name: str) -> dict[str, dict]:
    """{"limit" / "offset": its schema} of a list, as the OpenAPI schema declares them."""
    op = schema_paths[LISTS[name][1]]["get"]
    return {p["name"]: p["schema"] for p in op.get("parameters", [])
            if p["in"] == "query" and p["name"] in ("limit", "offset")}


@pytest.mark.parametrize("name, param, value", [
    (name, param, value) for name in PAGED for param, value in BAD_PAGER_VALUES
    if not (param == "offset" and name in NO_OFFSET)])
def test_a_bad_limit_or_offset_is_a_400_naming_it(alice, ids, schema_paths, name, param, value):
    value = value.format(over=_pager(schema_paths, name)["limit"]["maximum"] + 1)
    r = api_client(alice).get(_url(name, ids, f"{param}={value}"))
    assert r.status_code == 400, (name, param, value, r.content)
    err = r.json()["error"]
    assert err["code"] == "invalid" and err["field"] == param, err
    assert err["message"].startswith(f"{param} must be an integer ") and err["message"].endswith(f", got {value!r}"), err


@pytest.mark.parametrize("name", PAGED)
def test_a_good_limit_and_offset_are_taken(alice, ids, schema_paths, make_run, name):
    """The bounds themselves, an empty value (the default) and an offset past the end (no rows) answer 200."""
    make_run(alice, "second")
    pager = _pager(schema_paths, name)
    client = api_client(alice)
    queries = ["limit=1", f"limit={pager['limit']['maximum']}", "limit="]
    if name not in NO_OFFSET:
        queries += ["offset=0", "offset=", "limit=1&offset=1", "offset=1000000"]
    for query in queries:
        assert client.get(_url(name, ids, query)).status_code == 200, (name, query)
    if name == "runs":
        page = client.get(_url(name, ids, "limit=1&offset=1")).json()
        assert page["count"] == 2 and len(page["results"]) == 1 and page["results"][0]["name"] == "listed"
        assert client.get(_url(name, ids, "offset=1000000")).json() == {"count": 2, "results": []}


def test_every_paged_list_states_its_bounds_and_holds_them(alice, ids, schema_paths):
    """Every list whose schema takes `limit` says from 1 to what (and `offset` from 0), and answers the
    largest `limit` and refuses one more, and `offset=-1`, naming the parameter."""
    client = api_client(alice)
    paged = {name: _pager(schema_paths, name) for name in LISTS}
    paged = {name: pager for name, pager in paged.items() if "limit" in pager}
    assert set(PAGED) <= set(paged) and len(paged) > len(PAGED), sorted(paged)
    for name, pager in paged.items():
        top = pager["limit"]["maximum"]
        assert pager["limit"]["minimum"] == 1 and top >= 1, (name, pager)
        assert client.get(_url(name, ids, f"limit={top}")).status_code == 200, name
        over = client.get(_url(name, ids, f"limit={top + 1}"))
        assert over.status_code == 400 and over.json()["error"]["field"] == "limit", (name, over.content)
        if "offset" in pager:
            assert pager["offset"]["minimum"] == 0, (name, pager)
            below = client.get(_url(name, ids, "offset=-1"))
            assert below.status_code == 400 and below.json()["error"]["field"] == "offset", (name, below.content)
        else:
            assert name in NO_OFFSET, name


@pytest.mark.parametrize("raw, bounds, result", [
    (None, {"default": 7}, 7), ("", {"default": 7}, 7), ("+5", {}, 5), ("-3", {"minimum": -3}, -3),
    ("x", {}, "n must be an integer, got 'x'"),
    ("1_000", {"minimum": 0}, "n must be an integer >= 0, got '1_000'"),
    ("\u0665", {"maximum": 9}, "n must be an integer <= 9, got '\u0665'"),  # an Arabic-Indic five: int() takes it
    ("10", {"minimum": 1, "maximum": 9}, "n must be an integer from 1 to 9, got '10'"),
])
def test_int_param_takes_plain_integers_in_bounds_and_names_the_rest(raw, bounds, result):
    from rlstudio.api.errors import ApiError
    from rlstudio.api.params import int_param

    params = {} if raw is None else {"n": raw}
    if isinstance(result, int):
        assert int_param(params, "n", **bounds) == result
        return
    with pytest.raises(ApiError) as refused:
        int_param(params, "n", **bounds)
    assert str(refused.value.detail) == result and refused.value.field == "n"


@pytest.mark.parametrize("path, value", [
    ("job-log", "0"), ("job-log", "5001"), ("job-log", "x"), ("logs", "0"), ("logs", "10001"), ("logs", "1e3")])
def test_a_log_tail_out_of_its_bounds_is_a_400_naming_it(alice, ids, path, value):
    """A run's job log (at most 5,000 lines) and its log events (at most 10,000) took any tail and
    clamped it; now a tail outside the bounds is a 400 on `tail`, and the bounds themselves are taken."""
    client = api_client(alice)
    r = client.get(f"/api/v1/runs/{ids['run']}/{path}/?tail={value}")
    assert r.status_code == 400, (path, value, r.content)
    assert r.json()["error"]["field"] == "tail", r.json()
    top = {"job-log": 5000, "logs": 10000}[path]
    for good in ("1", str(top)):
        assert client.get(f"/api/v1/runs/{ids['run']}/{path}/?tail={good}").status_code == 200, (path, good)
