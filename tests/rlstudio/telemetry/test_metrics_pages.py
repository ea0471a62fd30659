"""The metrics API a page at a time (?after_step=&limit=), its bounds and its schema (the run page's
rows: test_metrics_overview.py)."""

import pytest

from rlstudio.telemetry import selectors as sel

pytestmark = pytest.mark.django_db
T0 = 1_764_440_000.0  # when the run_with_metrics fixture's events start (conftest.py)


@pytest.fixture(autouse=True)
def _rollout_dir(settings, tmp_path):
    settings.RLSTUDIO_ROLLOUT_DIR = str(tmp_path / "runs")


STEPS = [0, 1, 2, 5, 6, 9, 10, 11, 17, 40, 41, 42, 100]  # gaps, so a step-keyed cursor is tested


def test_pages_cover_every_row_exactly_once(alice, alice_client, run_with_metrics):
    run = run_with_metrics(alice, [(s, {"x": s / 2}) for s in list(reversed(STEPS))], name="paged")
    seen, url, pages = [], f"/api/v1/runs/{run.pk}/metrics/?limit=4", 0
    while url:
        body = alice_client.get(url).json()
        pages += 1
        assert len(body["steps"]) <= 4
        seen += [row["step"] for row in body["steps"]]
        assert all(row["metrics"] == {"x": row["step"] / 2} and row["t"] > T0 - 1 for row in body["steps"])
        if body["next"] is not None:
            assert body["next_after_step"] == body["steps"][-1]["step"]
            assert f"after_step={body['next_after_step']}" in body["next"] and "limit=4" in body["next"]
        else:
            assert body["next_after_step"] is None
        url = body["next"]
    assert seen == STEPS and pages == 4  # 4 + 4 + 4 + 1

    # The same walk by after_step by hand, with a page size that divides the rows exactly: the last
    # full page says there is no next one only when there is none.
    seen, after = [], None
    while True:
        q = "?limit=13" + (f"&after_step={after}" if after is not None else "")
        body = alice_client.get(f"/api/v1/runs/{run.pk}/metrics/{q}").json()
        seen += [row["step"] for row in body["steps"]]
        after = body["next_after_step"]
        if after is None:
            break
    assert seen == STEPS


def test_after_step_and_its_older_name(alice, alice_client, run_with_metrics):
    run = run_with_metrics(alice, [(s, {"x": s / 2}) for s in STEPS], name="paged")
    base = f"/api/v1/runs/{run.pk}/metrics/"
    assert [r["step"] for r in alice_client.get(f"{base}?after_step=11").json()["steps"]] == [17, 40, 41, 42, 100]
    assert [r["step"] for r in alice_client.get(f"{base}?since_step=41").json()["steps"]] == [42, 100]
    assert alice_client.get(f"{base}?after_step=-1&limit=2").json()["next_after_step"] == 1  # -1: from step 0
    assert alice_client.get(f"{base}?after_step=100").json() == {"steps": [], "next_after_step": None, "next": None}
    # next drops since_step (it would contradict after_step on the next page).
    nxt = alice_client.get(f"{base}?since_step=0&limit=2").json()["next"]
    assert "since_step" not in nxt and "after_step=2" in nxt
    assert [r["step"] for r in alice_client.get(nxt).json()["steps"]] == [5, 6]


@pytest.mark.parametrize("query,field,message", [
    ("limit=0", "limit", f"limit must be an integer from 1 to {sel.METRICS_PAGE_MAX}, got '0'"),
    (f"limit={sel.METRICS_PAGE_MAX + 1}", "limit",
     f"limit must be an integer from 1 to {sel.METRICS_PAGE_MAX}, got '{sel.METRICS_PAGE_MAX + 1}'"),
    ("limit=ten", "limit", f"limit must be an integer from 1 to {sel.METRICS_PAGE_MAX}, got 'ten'"),
    ("after_step=x", "after_step", f"after_step must be an integer from -1 to {2**31 - 1}, got 'x'"),
    ("after_step=-2", "after_step", f"after_step must be an integer from -1 to {2**31 - 1}, got '-2'"),
    (f"after_step={2**31}", "after_step", f"after_step must be an integer from -1 to {2**31 - 1}, got '{2**31}'"),
    ("since_step=99999999999999999999", "since_step",
     f"since_step must be an integer from -1 to {2**31 - 1}, got '99999999999999999999'"),
    ("after_step=1&since_step=1", "since_step", "give after_step or its older name since_step, not both"),
])
def test_bad_parameters_are_400s_naming_the_field(alice, alice_client, run_with_metrics, query, field, message):
    run = run_with_metrics(alice, [(s, {"x": s / 2}) for s in [1, 2]], name="paged")
    response = alice_client.get(f"/api/v1/runs/{run.pk}/metrics/?{query}")
    assert response.status_code == 400
    assert response.json()["error"]["field"] == field and response.json()["error"]["message"] == message


def test_default_and_largest_page(alice, alice_client, run_with_metrics):
    n = sel.METRICS_PAGE_DEFAULT + 5
    run = run_with_metrics(alice, [(s, {"x": s / 2}) for s in list(range(n))], name="paged")
    base = f"/api/v1/runs/{run.pk}/metrics/"
    first = alice_client.get(base).json()
    assert len(first["steps"]) == sel.METRICS_PAGE_DEFAULT
    assert first["next_after_step"] == sel.METRICS_PAGE_DEFAULT - 1
    assert len(alice_client.get(first["next"]).json()["steps"]) == 5
    whole = alice_client.get(f"{base}?limit={sel.METRICS_PAGE_MAX}").json()
    assert len(whole["steps"]) == n and whole["next"] is None


def test_schema_documents_the_paging(alice_client):
    schema = alice_client.get("/api/v1/schema/?format=json").json()
    op = schema["paths"]["/api/v1/runs/{run_id}/metrics/"]["get"]
    params = {p["name"]: p for p in op["parameters"] if p["in"] == "query"}
    assert {"after_step", "limit", "since_step"} <= set(params) and params["since_step"].get("deprecated")
    assert str(sel.METRICS_PAGE_MAX) in params["limit"]["description"]
    ref = op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
    page = schema["components"]["schemas"][ref]
    assert {"steps", "next_after_step", "next"} <= set(page["properties"])
