"""The playground's API (issue 19, item 3): bounded settings and messages (400 naming the field),
targets only among what the user may see (another user's private model or run: 404; a shared run's
checkpoint: allowed to its reader), one session per user at a time, the quota, stop, and the page."""
import pytest
from django.test import Client
from rest_framework.test import APIClient

from rlstudio.catalog.models import ModelAsset
from rlstudio.playground import services, streams
from rlstudio.playground.models import PlaygroundSession, SessionStatus
from rlstudio.runs.services import run_share

pytestmark = pytest.mark.django_db


def _api(user) -> APIClient:
    c = APIClient()
    c.force_authenticate(user)
    return c


URL = "/api/v1/playground/sessions/"
HELLO = [{"role": "user", "content": "hello"}]


def test_a_model_session_is_created_queued_and_its_task_sent(alice, make_model, published,
                                                            django_capture_on_commit_callbacks):
    model = make_model(alice)
    with django_capture_on_commit_callbacks(execute=True):
        r = _api(alice).post(URL, {"targets": [{"model": model.pk}], "messages": HELLO,
                                   "settings": {"temperature": 0.0, "max_new_tokens": 16}}, format="json")
    assert r.status_code == 202, r.content
    body = r.json()
    assert body["status"] == "queued" and body["ws_url"] == f"/ws/playground/{body['id']}/"
    assert body["targets"] == [{"key": "a", "kind": "model", "model": model.pk, "run": None, "step": None,
                                "label": model.name}]
    assert body["settings"]["temperature"] == 0.0 and body["settings"]["max_new_tokens"] == 16
    assert body["messages"] == {"a": HELLO}
    assert published == [("playground.run_session", body["id"])]


@pytest.mark.parametrize("over, field", [
    ({"settings": {"temperature": 2.5}}, "settings.temperature"),
    ({"settings": {"temperature": "hot"}}, "settings.temperature"),
    ({"settings": {"top_p": 0}}, "settings.top_p"),
    ({"settings": {"top_k": 5000}}, "settings.top_k"),
    ({"settings": {"max_new_tokens": 100000}}, "settings.max_new_tokens"),
    ({"settings": {"max_new_tokens": 0}}, "settings.max_new_tokens"),
    ({"settings": {"max_turns": 50}}, "settings.max_turns"),
    ({"settings": {"tools": "yes"}}, "settings.tools"),
    ({"settings": {"beam_width": 4}}, "settings.beam_width"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "assistant", "content": "hi"}]}, "messages"),
    ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": "x" * 9000}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": "hi\u0000there"}]}, "messages[0].content"),  # jsonb refuses NUL
    ({"messages": [{"role": "system", "content": "\u0000"}, {"role": "user", "content": "hi"}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": "a"}, {"role": "system", "content": "late"},
                   {"role": "user", "content": "b"}]}, "messages[1].role"),
    ({"targets": []}, "targets"),
    ({"targets": [{}, {}, {}]}, "targets"),
    ({"targets": [{"model": "one"}]}, "targets[0].model"),
    ({"targets": [{"path": "/etc"}]}, "targets[0].path"),
])
def test_out_of_bounds_is_400_naming_the_field(alice, make_model, published, over, field):
    model = make_model(alice)
    body = {"targets": [{"model": model.pk}], "messages": HELLO, **over}
    r = _api(alice).post(URL, body, format="json")
    assert r.status_code == 400, r.content
    assert r.json()["error"]["field"] == field
    assert not PlaygroundSession.objects.exists() and not published


def test_a_run_checkpoint_needs_a_committed_step(alice, run_with_ckpts, published):
    r = _api(alice).post(URL, {"targets": [{"run": run_with_ckpts.pk, "step": 3}], "messages": HELLO}, format="json")
    assert r.status_code == 400 and r.json()["error"]["field"] == "targets[0].step"
    assert "[1, 2]" in r.json()["error"]["message"]
    r = _api(alice).post(URL, {"targets": [{"run": run_with_ckpts.pk, "step": 2}], "messages": HELLO}, format="json")
    assert r.status_code == 202, r.content
    assert r.json()["targets"][0]["kind"] == "checkpoint" and r.json()["targets"][0]["step"] == 2


def test_another_users_model_and_run_are_404_and_a_shared_run_is_allowed(alice, bob, make_model, run_with_ckpts,
                                                                         published):
    private = make_model(alice, "alice-private")
    for target, field in (({"model": private.pk}, "targets[0].model"),
                          ({"run": run_with_ckpts.pk, "step": 1}, "targets[0].run")):
        r = _api(bob).post(URL, {"targets": [target], "messages": HELLO}, format="json")
        assert r.status_code == 404, r.content
        assert r.json()["error"]["field"] == field
    assert not published
    ModelAsset.objects.filter(pk=private.pk).update(visibility="everyone")
    r = _api(bob).post(URL, {"targets": [{"model": private.pk}], "messages": HELLO}, format="json")
    assert r.status_code == 202, r.content
    services.session_stop(user=bob, session=PlaygroundSession.objects.get(pk=r.json()["id"]))
    run_share(run=run_with_ckpts, by=alice, users=["bob"])
    r = _api(bob).post(URL, {"targets": [{"run": run_with_ckpts.pk, "step": 1}], "messages": HELLO}, format="json")
    assert r.status_code == 202, r.content
    # bob's session is bob's: alice (its run's owner) neither reads nor stops it
    sid = r.json()["id"]
    assert _api(alice).get(f"{URL}{sid}/").status_code == 404
    assert _api(alice).post(f"{URL}{sid}/stop/").status_code == 404
    assert _api(bob).get(f"{URL}{sid}/").json()["status"] == "queued"


def test_two_targets_side_by_side_each_with_its_own_history(alice, make_model, run_with_ckpts, published):
    model = make_model(alice)
    mine = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "a?"},
            {"role": "assistant", "content": "A"}, {"role": "user", "content": "b?"}]
    r = _api(alice).post(URL, {"targets": [{"model": model.pk, "messages": mine},
                                           {"run": run_with_ckpts.pk, "step": 1}],
                               "messages": HELLO}, format="json")
    assert r.status_code == 202, r.content
    assert [t["key"] for t in r.json()["targets"]] == ["a", "b"]
    assert r.json()["messages"] == {"a": mine, "b": HELLO}


def test_one_session_per_user_and_the_quota(alice, bob, make_model, published):
    from rlstudio.quotas.models import GpuQuota

    model = make_model(alice, visibility="everyone")
    body = {"targets": [{"model": model.pk}], "messages": HELLO}
    first = _api(alice).post(URL, body, format="json")
    assert first.status_code == 202
    again = _api(alice).post(URL, body, format="json")
    assert again.status_code == 409 and again.json()["error"]["code"] == "conflict"
    assert _api(bob).post(URL, body, format="json").status_code == 202  # another user's slot is their own
    stopped = _api(alice).post(f"{URL}{first.json()['id']}/stop/")
    assert stopped.status_code == 202 and stopped.json()["status"] == "stopped"  # a queued one ends at once
    assert stopped.json()["stop_reason"] == "stopped by the user"
    assert streams.stop_reason(first.json()["id"]) == "stopped by the user"
    assert _api(alice).post(URL, body, format="json").status_code == 202
    carol = type(alice).objects.create_user("carol", password="x")
    GpuQuota.objects.create(user=carol, max_gpus=0, gpu_hours_per_month=0, max_concurrent_runs=0)
    r = _api(carol).post(URL, body, format="json")
    assert r.status_code == 409 and "quota" in r.json()["error"]["message"]


def test_a_stopped_queued_session_is_never_started(alice, make_model, published):
    model = make_model(alice)
    r = _api(alice).post(URL, {"targets": [{"model": model.pk}], "messages": HELLO}, format="json")
    sid = r.json()["id"]
    streams.request_stop(sid, "page left")
    assert services.session_start(session_id=sid) is None
    s = PlaygroundSession.objects.get(pk=sid)
    assert s.status == SessionStatus.STOPPED and s.stop_reason == "page left"


def test_the_page_offers_what_the_user_may_use_only(alice, bob, make_model, run_with_ckpts):
    make_model(alice, "alice-own-model")
    make_model(bob, "bob-secret-model")
    c = Client()
    assert c.get("/playground/").status_code == 302  # login first
    c.force_login(alice)
    page = c.get("/playground/").content.decode()
    assert "alice-own-model" in page and "bob-secret-model" not in page
    assert f'value="run:{run_with_ckpts.pk}:2"' in page and f'value="run:{run_with_ckpts.pk}:3"' not in page
    assert 'href="/playground/"' in page  # the nav link
    c.force_login(bob)
    page = c.get("/playground/").content.decode()
    assert f"run:{run_with_ckpts.pk}:" not in page and "alice-own-model" not in page
    run_share(run=run_with_ckpts, by=alice, users=["bob"])
    assert f'value="run:{run_with_ckpts.pk}:1"' in c.get("/playground/").content.decode()


def test_the_api_needs_login(alice, make_model, published):
    model = make_model(alice)
    r = APIClient().post(URL, {"targets": [{"model": model.pk}], "messages": HELLO}, format="json")
    assert r.status_code == 401 and r.json()["error"]["code"] == "not_authenticated"
    assert APIClient().post(f"{URL}1/stop/").status_code == 401
    assert not PlaygroundSession.objects.exists() and not published


def test_model_text_with_a_nul_is_stored_with_a_replacement_character(alice, make_model, published):
    # A model can generate U+0000 like any other character; PostgreSQL's JSON and text columns refuse it.
    model = make_model(alice)
    sid = _api(alice).post(URL, {"targets": [{"model": model.pk}], "messages": HELLO}, format="json").json()["id"]
    assert services.session_start(session_id=sid) is not None
    assert services.session_finish(session_id=sid, status=SessionStatus.SUCCEEDED, error="bad\x00tail",
                                   results={"a\x00": {"text": "4\x002", "turns": [{"content": "\x00"}]}})
    s = PlaygroundSession.objects.get(pk=sid)
    assert s.results == {"a\ufffd": {"text": "4\ufffd2", "turns": [{"content": "\ufffd"}]}}
    assert s.error == "bad\ufffdtail" and s.status == SessionStatus.SUCCEEDED
