"""The API's base: pagination shape, error shape, no 500s on bad input, schema and docs."""
import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


@pytest.fixture
def client(alice):
    client = Client()
    client.force_login(alice)
    return client


def test_limit_offset_pagination(client, alice, make_run):
    for i in range(5):
        make_run(alice, f"run-{i}")
    page = client.get("/api/v1/runs/?limit=2&offset=1").json()
    assert page["count"] == 5 and [r["name"] for r in page["results"]] == ["run-3", "run-2"]
    assert set(page) == {"count", "results"}
    run = page["results"][0]
    for field in ["id", "name", "owner", "status", "step", "total_steps", "gpus", "created", "started", "error"]:
        assert field in run
    assert run["owner"] == "alice" and run["status"] == "queued"
    bad = client.get("/api/v1/runs/?limit=abc&offset=-3")  # a 400 naming limit, not the default page
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "limit", bad.content


def test_error_shape_and_no_500(client):
    for url in ["/api/v1/runs/abc/", "/api/v1/runs/999999/", "/api/v1/nothing-here/", "/api/v1/datasets/1.5/"]:
        response = client.get(url)
        assert response.status_code == 404, url
        assert response.json()["error"]["code"] == "not_found", url
    bad = client.get("/api/v1/runs/?status=exploded")
    assert bad.status_code == 400
    assert bad.json()["error"]["field"] == "status" and "exploded" in bad.json()["error"]["message"]
    assert set(bad.json()["error"]) == {"code", "message", "field", "line"}
    method = client.delete("/api/v1/runs/")
    assert method.status_code == 405 and method.json()["error"]["code"] == "method_not_allowed"


@pytest.mark.parametrize("method, url", [
    ("post", "/api/v1/playground/sessions/"), ("post", "/api/v1/runs/"), ("post", "/api/v1/alerts/rules/"),
    ("put", "/api/v1/alerts/settings/"), ("post", "/api/v1/datasets/"),  # the datasets name their own parsers
])
def test_json_nested_past_the_recursion_limit_is_a_parse_error(client, method, url):
    """Python's JSON reader raises RecursionError on `[[[[...`: the project's parser (REST_FRAMEWORK
    DEFAULT_PARSER_CLASSES) makes it a 400 like any other body that is not JSON; nothing is stored."""
    from rlstudio.alerts.models import AlertRule
    from rlstudio.catalog.models import Dataset
    from rlstudio.playground.models import PlaygroundSession
    from rlstudio.runs.models import Run

    r = getattr(client, method)(url, "[" * 100_000, content_type="application/json")
    assert r.status_code == 400, r.content[:300]
    assert r.json()["error"]["code"] == "parse_error" and "nested too deeply" in r.json()["error"]["message"]
    assert not (PlaygroundSession.objects.exists() or Run.objects.exists() or AlertRule.objects.exists()
                or Dataset.objects.exists())


@pytest.mark.parametrize("method, url, body, field", [
    ("post", "/api/v1/configs/", '{"name": "c", "config": {"reward": {"reward_kwargs": {"a": "x\\ud800"}}}}',
     "config.reward.reward_kwargs.a"),
    ("post", "/api/v1/runs/", '{"name": "r", "dataset": 1, "model": 1, "config": {"data": {"\\udfff": 1}}}',
     "config.data.\ufffd"),
    ("put", "/api/v1/alerts/settings/", '{"webhook": "\\udc00"}', "webhook"),
    ("post", "/api/v1/playground/sessions/", '{"targets": [{"model": 1}], "messages": [{"role": "user", '
     '"content": "hi \\ud83d"}]}', "messages[0].content"),
])
def test_a_lone_surrogate_in_a_json_body_is_a_400_naming_where(client, method, url, body, field):
    """JSON may spell a lone UTF-16 surrogate (`"\\ud800"`), which Python reads into a str that no
    UTF-8 encoder takes: PostgreSQL's json columns refused it (a DataError), and an error that echoed
    it could not be rendered (UnicodeEncodeError), both 500s. The API's parser refuses such a body
    with a 400 naming where it is; nothing is stored."""
    from rlstudio.alerts.models import NotificationSettings
    from rlstudio.playground.models import PlaygroundSession
    from rlstudio.runs.models import Run, RunConfig

    r = getattr(client, method)(url, body, content_type="application/json")
    assert r.status_code == 400, r.content[:300]
    error = r.json()["error"]
    assert error["code"] == "parse_error" and error["field"] == field, error
    assert "lone surrogate" in error["message"]
    assert not (RunConfig.objects.exists() or Run.objects.exists() or PlaygroundSession.objects.exists()
                or NotificationSettings.objects.exclude(webhook=None).exists())


def test_nul_in_a_query_parameter_of_any_api_route_is_a_400_naming_it(client, alice):
    """The NUL guard (rlstudio.config.nul_guard) answers in the API's error shape under /api/."""
    r = client.get("/api/v1/runs/", {"status": "queued", "search": "a\x00"})
    assert r.status_code == 400
    assert r.json()["error"] == {"code": "invalid", "message": "search must not contain the NUL character (U+0000)",
                                 "field": "search", "line": None}
    assert r.json()["errors"] == [{"field": "search", "message": r.json()["error"]["message"]}]
    assert client.get("/api/v1/runs/", {"status": "queued"}).status_code == 200


def test_more_parameters_than_django_parses_is_a_400_in_the_api_shape(client, alice, make_run):
    """Over DATA_UPLOAD_MAX_NUMBER_FIELDS (1000) form fields Django raises TooManyFieldsSent, which it
    answered with its HTML 400 page. Found by a deep schemathesis fuzz: PATCH /api/v1/projects/{id}/sharing/
    (and the run's) with a form body of 1000+ add_users entries. In the body and in the query string:
    the API's error shape, and nothing changed."""
    from urllib.parse import urlencode

    run = make_run(alice)
    body = urlencode([("add_users", f"u{i}") for i in range(1001)])
    r = client.patch(f"/api/v1/runs/{run.pk}/sharing/", body, content_type="application/x-www-form-urlencoded")
    assert r.status_code == 400 and r["Content-Type"] == "application/json", r.content[:200]
    assert r.json()["error"]["code"] == "too_many_fields" and "1000" in r.json()["error"]["message"]
    assert not run.shared_with.exists()
    r = client.get("/api/v1/runs/?" + urlencode([("status", "queued")] * 1001))
    assert r.status_code == 400 and r.json()["error"]["code"] == "too_many_fields", r.content[:200]


def test_run_detail_includes_config(client, alice, make_run):
    run = make_run(alice, config={"algorithm": {"adv_estimator": "grpo"}})
    body = client.get(f"/api/v1/runs/{run.pk}/").json()
    assert body["config"] == {"algorithm": {"adv_estimator": "grpo"}} and body["latest_reward"] is None


def test_schema_and_docs(client):
    schema = client.get("/api/v1/schema/")
    assert schema.status_code == 200
    text = schema.content.decode()
    for route in ["/api/v1/runs/", "/api/v1/runs/{id}/", "/api/v1/datasets/", "/api/v1/models/",
                  "/api/v1/configs/{id}/", "/api/v1/quota/"]:
        assert route + ":" in text, route
    docs = client.get("/api/v1/docs/").content.decode()
    # No CDN-loaded UI: the page is rendered on the server (base.html's scripts are the site's own:
    # one inline, nonce'd; the notification centre's from /static/).
    assert "/api/v1/quota/" in docs and '<script src="http' not in docs and '<script src="//' not in docs
