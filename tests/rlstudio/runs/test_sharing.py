"""Sharing a run read-only (issue 19, item 5), its tags and note, and the runs list's filters.

A run shared with bob (by name, or with everyone) is readable by him everywhere the run is read (its
page, the API, samples, groups, the websocket) and controllable nowhere (stop, resume, clone, tags and
note, sharing, retention: 403, the run unchanged). Anyone it is not shared with gets a 404, exactly as
before; staff see and control every run.
"""
import asyncio

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from rlstudio.accounts.models import AuditEvent
from rlstudio.runs.gate.keys import PLATFORM_KEYS
from rlstudio.runs.models import Run, RunStatus
from rlstudio.runs.selectors import RunFilter, run_list_for
from rlstudio.runs.services import RunInputInvalid, RunNotPermitted, run_annotate, run_share, run_stop
from rlstudio.telemetry.models import MetricRow, Sample

pytestmark = pytest.mark.django_db


def _api(user) -> APIClient:
    c = APIClient()
    c.force_authenticate(user)
    return c


def _page(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


@pytest.fixture
def carol(make_user):
    return make_user("carol")


@pytest.fixture
def shared_run(alice, bob, make_run):
    """alice's finished run with a checkpoint, a metric row and a sample, shared with bob by name."""
    run = make_run(alice, "alice-run")
    Run.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED, checkpoint_path="/tmp/ckpt", step=2)
    run.refresh_from_db()
    MetricRow.objects.create(run=run, step=1, time=timezone.now(), metrics={"critic/score/mean": 0.5})
    Sample.objects.create(run=run, seq=1, step=1, uid="u1", index=0, reward=1.0,
                          transcript={"messages": [{"role": "user", "content": "2+2?"}]})
    run_share(run=run, by=alice, add=["bob"])
    return run


READ_URLS = ["/runs/{id}/", "/api/v1/runs/{id}/", "/api/v1/runs/{id}/metrics/", "/api/v1/runs/{id}/samples/",
             "/api/v1/runs/{id}/groups/?step=1", "/api/v1/runs/{id}/logs/", "/api/v1/runs/{id}/memory/",
             "/runs/{id}/groups/?step=1&uid=u1", "/runs/{id}/prompts/?uid=u1", "/runs/{id}/controls/"]


def test_a_shared_run_is_readable_by_the_user_it_is_shared_with(shared_run, bob):
    client = _page(bob)
    for url in READ_URLS:
        assert client.get(url.format(id=shared_run.pk)).status_code == 200, url
    sample = Sample.objects.get(run=shared_run)
    assert client.get(f"/runs/{shared_run.pk}/samples/{sample.pk}/").status_code == 200
    body = _api(bob).get(f"/api/v1/runs/{shared_run.pk}/").json()
    assert body["access"] == "shared" and body["owner"] == "alice"
    assert body["shared_with"] == []  # who else reads it is the owner's business
    assert [r["name"] for r in _api(bob).get("/api/v1/runs/?scope=shared").json()["results"]] == ["alice-run"]
    assert _api(bob).get("/api/v1/runs/?scope=mine").json()["count"] == 0
    page = client.get(f"/runs/{shared_run.pk}/").content.decode()
    assert "Shared with you by <strong>alice</strong>" in page
    for control in ('action="/runs/%d/stop/"', 'action="/runs/%d/resume/"', 'action="/runs/%d/clone/"',
                    'action="/runs/%d/annotate/"', 'action="/runs/%d/share/"'):
        assert control % shared_run.pk not in page, control
    owner_page = _page(shared_run.owner).get(f"/runs/{shared_run.pk}/").content.decode()
    for control in ('action="/runs/%d/resume/"', 'action="/runs/%d/annotate/"', 'action="/runs/%d/share/"'):
        assert control % shared_run.pk in owner_page, control


def test_a_shared_run_is_not_controllable_by_the_user_it_is_shared_with(shared_run, bob):
    api, page, pk = _api(bob), _page(bob), shared_run.pk
    for method, url, body in [("post", f"/api/v1/runs/{pk}/stop/", {"force": True}),
                              ("post", f"/api/v1/runs/{pk}/resume/", {}),
                              ("post", f"/api/v1/runs/{pk}/clone/", {}),
                              ("patch", f"/api/v1/runs/{pk}/", {"tags": ["mine"]}),
                              ("get", f"/api/v1/runs/{pk}/sharing/", None),
                              ("put", f"/api/v1/runs/{pk}/sharing/", {"visibility": "everyone"}),
                              ("put", f"/api/v1/runs/{pk}/retention/", {"mode": "per_step", "k": 1})]:
        resp = getattr(api, method)(url, body, format="json")
        assert resp.status_code == 403, (url, resp.content)
        assert resp.json()["error"]["code"] == "permission_denied", url
    assert "read-only" in api.post(f"/api/v1/runs/{pk}/stop/", {}, format="json").json()["error"]["message"]
    for url, data in [(f"/runs/{pk}/stop/", {"force": "1"}), (f"/runs/{pk}/resume/", {}),
                      (f"/runs/{pk}/clone/", {}), (f"/runs/{pk}/annotate/", {"tags": "x"}),
                      (f"/runs/{pk}/share/", {"visibility": "everyone"})]:
        assert page.post(url, data).status_code == 403, url
    shared_run.refresh_from_db()
    assert shared_run.tags == [] and shared_run.visibility == "private"
    assert Run.objects.count() == 1  # no resume, no clone
    with pytest.raises(RunNotPermitted):
        run_stop(run=shared_run, by=bob)


def test_a_run_not_shared_with_a_user_is_404_for_them(shared_run, carol):
    client, api = _page(carol), _api(carol)
    for url in READ_URLS:
        assert client.get(url.format(id=shared_run.pk)).status_code == 404, url
    for method, url in [("post", f"/api/v1/runs/{shared_run.pk}/stop/"), ("patch", f"/api/v1/runs/{shared_run.pk}/"),
                        ("get", f"/api/v1/runs/{shared_run.pk}/sharing/"),
                        ("get", f"/api/v1/runs/{shared_run.pk}/job-log/"),
                        ("get", f"/api/v1/runs/{shared_run.pk}/job-log/?download=1")]:
        assert getattr(api, method)(url, {}, format="json").status_code == 404, url
    assert api.get("/api/v1/runs/").json()["count"] == 0
    assert api.get(f"/api/v1/runs/compare/?ids={shared_run.pk}").status_code == 404


def test_sharing_with_everyone_then_unsharing(shared_run, alice, bob, carol):
    api = _api(alice)
    resp = api.put(f"/api/v1/runs/{shared_run.pk}/sharing/", {"visibility": "everyone"}, format="json")
    assert resp.status_code == 200 and resp.json() == {"visibility": "everyone", "users": ["bob"], "teams": []}
    assert _page(carol).get(f"/runs/{shared_run.pk}/").status_code == 200
    assert _api(carol).post(f"/api/v1/runs/{shared_run.pk}/stop/", {}, format="json").status_code == 403
    resp = api.put(f"/api/v1/runs/{shared_run.pk}/sharing/", {"visibility": "private", "users": []}, format="json")
    assert resp.json() == {"visibility": "private", "users": [], "teams": []}
    for user in (bob, carol):
        assert _page(user).get(f"/runs/{shared_run.pk}/").status_code == 404
    changes = [e.data["to"] for e in AuditEvent.objects.filter(action="run.share").order_by("id")]
    assert changes == [{"visibility": "private", "users": ["bob"], "teams": []},
                       {"visibility": "everyone", "users": ["bob"], "teams": []},
                       {"visibility": "private", "users": [], "teams": []}]


def test_sharing_refuses_unknown_users_and_the_owner(shared_run, alice):
    api = _api(alice)
    for users, message in [(["nobody"], "no user named 'nobody'"), (["alice"], "alice owns the run already")]:
        resp = api.put(f"/api/v1/runs/{shared_run.pk}/sharing/", {"users": users}, format="json")
        assert resp.status_code == 400 and resp.json()["error"]["field"] == "users"
        assert message in resp.json()["error"]["message"]
    assert api.put(f"/api/v1/runs/{shared_run.pk}/sharing/", {"visibility": "world"},
                   format="json").json()["error"]["field"] == "visibility"
    assert api.get(f"/api/v1/runs/{shared_run.pk}/sharing/").json() == {"visibility": "private", "users": ["bob"],
                                                                             "teams": []}


def test_the_run_page_shares_and_unshares(shared_run, alice, carol):
    page = _page(alice)
    resp = page.post(f"/runs/{shared_run.pk}/share/", {"add": "carol"}, follow=True)
    assert "Shared with carol (read-only)." in resp.content.decode()
    assert _page(carol).get(f"/runs/{shared_run.pk}/").status_code == 200
    page.post(f"/runs/{shared_run.pk}/share/", {"remove": "carol"})
    assert _page(carol).get(f"/runs/{shared_run.pk}/").status_code == 404
    resp = page.post(f"/runs/{shared_run.pk}/share/", {"add": "nobody"}, follow=True)
    assert "users: no user named &#x27;nobody&#x27;" in resp.content.decode()  # naming the field


def test_websocket_admits_a_user_the_run_is_shared_with_and_nobody_else(shared_run, bob, carol, transactional_db):
    from tests.rlstudio.telemetry.test_consumers import _connect, _session_cookie

    bob_cookie, carol_cookie = _session_cookie(bob), _session_cookie(carol)

    async def scenario():
        from channels.layers import get_channel_layer

        from rlstudio.telemetry.broadcast import run_event_message, run_group

        bob_comm = await _connect(f"/ws/runs/{shared_run.pk}/", bob_cookie)
        carol_comm = await _connect(f"/ws/runs/{shared_run.pk}/", carol_cookie)
        carol_close = await carol_comm.receive_output(timeout=5)
        await get_channel_layer().group_send(
            run_group(shared_run.pk), run_event_message({"seq": 9, "type": "heartbeat", "data": {"step": 2}}))
        bob_msg = await bob_comm.receive_json_from(timeout=5)
        await bob_comm.disconnect()
        return carol_close, bob_msg

    carol_close, bob_msg = asyncio.run(scenario())
    assert carol_close == {"type": "websocket.close", "code": 4403}
    assert bob_msg["seq"] == 9


def test_staff_control_a_run_shared_with_others(shared_run, staff):
    resp = _api(staff).patch(f"/api/v1/runs/{shared_run.pk}/", {"tags": ["reviewed"]}, format="json")
    assert resp.status_code == 200 and resp.json()["tags"] == ["reviewed"] and resp.json()["access"] == "staff"
    assert _api(staff).get(f"/api/v1/runs/{shared_run.pk}/sharing/").json()["users"] == ["bob"]


# ------------------------------------------------------------------------------ tags and note
def test_owner_edits_tags_and_note_through_patch_audited(alice, make_run):
    run = make_run(alice, "tagged")
    api = _api(alice)
    resp = api.patch(f"/api/v1/runs/{run.pk}/", {"tags": ["lr-sweep", " kl:0.001 ", "lr-sweep"],
                                                 "note": "lower lr looks steadier\n"}, format="json")
    assert resp.status_code == 200, resp.content
    assert resp.json()["tags"] == ["lr-sweep", "kl:0.001"] and resp.json()["note"] == "lower lr looks steadier"
    assert resp.json()["config"] == run.config  # the detail form
    event = AuditEvent.objects.get(action="run.annotate")
    assert event.data == {"tags": [[], ["lr-sweep", "kl:0.001"]], "note": ["", "lower lr looks steadier"]}
    api.patch(f"/api/v1/runs/{run.pk}/", {"note": "lower lr looks steadier"}, format="json")
    assert AuditEvent.objects.filter(action="run.annotate").count() == 1  # nothing changed: no record


@pytest.mark.parametrize("body, field", [
    ({"name": "renamed"}, "name"), ({"status": "succeeded"}, "status"), ({"visibility": "everyone"}, "visibility"),
    ({"tags": ["has space"]}, "tags"), ({"tags": "one"}, "tags"), ({"tags": [""]}, "tags"),
    ({"tags": ["x" * 41]}, "tags"), ({"tags": [f"t{i}" for i in range(21)]}, "tags"), ({"note": "x" * 10_001}, "note"),
])
def test_patch_changes_only_valid_tags_and_note(alice, make_run, body, field):
    run = make_run(alice, "tagged")
    resp = _api(alice).patch(f"/api/v1/runs/{run.pk}/", body, format="json")
    assert resp.status_code == 400, resp.content
    assert resp.json()["error"]["field"] == field
    run.refresh_from_db()
    assert run.tags == [] and run.note == "" and run.name == "tagged" and run.visibility == "private"


def test_put_on_a_run_is_not_offered(alice, make_run):
    run = make_run(alice)
    assert _api(alice).put(f"/api/v1/runs/{run.pk}/", {"tags": []}, format="json").status_code == 405


def test_the_run_page_edits_tags_and_note(alice, make_run):
    run = make_run(alice, "page-tags")
    resp = _page(alice).post(f"/runs/{run.pk}/annotate/", {"tags": "baseline, lr:1e-6", "note": "<b>first</b>"},
                             follow=True)
    page = resp.content.decode()
    assert "Tags and note saved." in page and "&lt;b&gt;first&lt;/b&gt;" in page and "<b>first</b>" not in page
    run.refresh_from_db()
    assert run.tags == ["baseline", "lr:1e-6"] and run.note == "<b>first</b>"


def test_annotate_service_refuses_bad_input(alice, make_run):
    run = make_run(alice)
    with pytest.raises(RunInputInvalid):
        run_annotate(run=run, by=alice, tags=["a b"])
    with pytest.raises(RunInputInvalid):
        run_annotate(run=run, by=alice, note="a\x00b")


# ------------------------------------------------------------------------------ the runs list
@pytest.fixture
def listed(alice, bob, make_run, make_dataset, make_model):
    a = make_run(alice, "lr-high")
    b = make_run(alice, "lr-low")
    c = make_run(alice, "kl-run")
    run_annotate(run=a, by=alice, tags=["sweep", "lr"], note="diverged after step 40")
    run_annotate(run=b, by=alice, tags=["sweep"], note="steady")
    Run.objects.filter(pk=b.pk).update(model=a.model, val_dataset=c.dataset, status=RunStatus.SUCCEEDED)
    theirs = make_run(bob, "bob-secret")
    run_annotate(run=theirs, by=bob, tags=["sweep"])
    return {"a": a, "b": b, "c": c, "bob": theirs}


@pytest.mark.parametrize("flt, names", [
    (RunFilter(tag="sweep"), {"lr-high", "lr-low"}),
    (RunFilter(tag="lr"), {"lr-high"}),
    (RunFilter(q="DIVERGED"), {"lr-high"}),  # the note, case-insensitive
    (RunFilter(q="kl-"), {"kl-run"}),  # the name
    (RunFilter(status="succeeded"), {"lr-low"}),
    (RunFilter(tag="sweep", status="queued"), {"lr-high"}),
])
def test_run_list_filters(listed, alice, flt, names):
    assert {r.name for r in run_list_for(user=alice, flt=flt)} == names


def test_run_list_filters_by_model_and_dataset_through_the_api(listed, alice):
    api = _api(alice)
    by_model = api.get(f"/api/v1/runs/?model={listed['a'].model_id}").json()["results"]
    assert {r["name"] for r in by_model} == {"lr-high", "lr-low"}
    by_dataset = api.get(f"/api/v1/runs/?dataset={listed['c'].dataset_id}").json()["results"]
    assert {r["name"] for r in by_dataset} == {"kl-run", "lr-low"}  # lr-low validates on it
    assert {r["name"] for r in api.get("/api/v1/runs/?tag=sweep&q=steady").json()["results"]} == {"lr-low"}
    for query, field in [("status=nope", "status"), ("model=x", "model"), ("scope=all", "scope")]:
        resp = api.get(f"/api/v1/runs/?{query}")
        assert resp.status_code == 400 and resp.json()["error"]["field"] == field


def test_the_runs_page_filters_sorts_and_offers_compare(listed, alice):
    client = _page(alice)
    page = client.get("/runs/?tag=sweep&sort=name").content.decode()
    table = page[page.index("<tbody>"):]
    assert ">lr-high<" in table and ">lr-low<" in table and "kl-run" not in table and "bob-secret" not in page
    assert 'href="?sort=-name&amp;tag=sweep"' in page  # sorting keeps the filters
    assert '<option value="sweep" selected>' in page
    assert table.index(">lr-high<") < table.index(">lr-low<")
    assert 'name="ids" value="%d"' % listed["a"].pk in page and 'action="/runs/compare/"' in page
    page = client.get("/runs/?q=nothing-like-this").content.decode()
    assert "No runs match these filters." in page


def test_nul_characters_never_reach_postgresql(shared_run, alice):
    """Schemathesis found it: a NUL in a text filter was a 500 (PostgreSQL refuses it in a query). A NUL
    in a query parameter or a page's form field is a 400 naming it; in a JSON body, the field's 400."""
    api = _api(alice)
    resp = api.get("/api/v1/runs/?q=a%00b&tag=x%00")
    assert resp.status_code == 400 and resp.json()["error"]["field"] == "q"
    resp = _page(alice).get("/runs/?q=ab&tag=%00")
    assert resp.status_code == 400 and b"tag must not contain the NUL character" in resp.content
    resp = api.get(f"/api/v1/runs/compare/?ids={shared_run.pk}&metrics=a%00b")
    assert resp.status_code == 400 and resp.json()["error"]["field"] == "metrics"
    resp = api.put(f"/api/v1/runs/{shared_run.pk}/sharing/", {"users": ["bo\x00b"]}, format="json")
    assert resp.status_code == 400 and resp.json()["error"]["field"].startswith("users")
    resp = _page(alice).post(f"/runs/{shared_run.pk}/share/", {"remove": "b\x00"})
    assert resp.status_code == 400 and b"remove must not contain" in resp.content


def _server_paths(run, steps: int = 10) -> dict[str, str]:
    """Gives `run` a user config of `steps` training steps, freezes it as submitting does
    (launch.freeze_spec: the platform's keys filled from the run's dataset, model and folder) and
    returns those paths: its dataset file, model and folder."""
    from rlstudio.runs import launch

    run.config = {"trainer": {"total_training_steps": steps}}
    Run.objects.filter(pk=run.pk).update(config=launch.freeze_spec(run=run, out_dir=launch.run_dir(run.pk)))
    run.refresh_from_db()
    cfg = run.config
    paths = {"dataset file": cfg["data"]["train_files"], "model path": cfg["actor_rollout_ref"]["model"]["path"],
             "run folder": cfg["trainer"]["default_local_dir"]}
    for what, value in paths.items():
        assert isinstance(value, str) and value.startswith("/"), (what, value)
    return paths


def test_a_reader_sees_the_config_without_the_platforms_server_paths(shared_run, alice, bob, carol):
    paths = _server_paths(shared_run)
    steps = shared_run.config["trainer"]["total_training_steps"]
    # the owner: the whole stored config, on the API, the run page and the compare view
    owner = _api(alice).get(f"/api/v1/runs/{shared_run.pk}/").json()
    assert owner["config"] == shared_run.config and owner["checkpoint"] == "/tmp/ckpt"
    owner_page = _page(alice).get(f"/runs/{shared_run.pk}/").content.decode()
    for what, path in paths.items():
        assert path in owner_page, what
        assert path in str(owner["config"]), what
    # a reader by name, then everyone once the run is public: the user's keys, no server path
    run_share(run=shared_run, by=alice, visibility="everyone")
    for reader in (bob, carol):
        body = _api(reader).get(f"/api/v1/runs/{shared_run.pk}/")
        assert body.status_code == 200
        detail = body.json()
        assert detail["access"] == "shared" and detail["checkpoint"] == ""
        assert detail["config"]["trainer"]["total_training_steps"] == steps  # what the owner chose stays readable
        assert detail["config"]["data"]["train_files"] != paths["dataset file"]
        page = _page(reader).get(f"/runs/{shared_run.pk}/").content.decode()
        compare_api = _api(reader).get(f"/api/v1/runs/compare/?ids={shared_run.pk}").content.decode()
        compare_page = _page(reader).get(f"/runs/compare/?ids={shared_run.pk}").content.decode()
        for what, path in paths.items():
            for where, text in (("api", body.content.decode()), ("page", page), ("compare api", compare_api),
                                ("compare page", compare_page)):
                assert path not in text, (reader.username, what, where)
        assert "/tmp/ckpt" not in page and "/tmp/ckpt" not in body.content.decode()


def test_compare_as_a_reader_diffs_only_the_keys_a_user_owns(shared_run, bob, staff, make_run):
    mine = make_run(bob, "bob-run")
    ids = f"{shared_run.pk},{mine.pk}"
    paths = _server_paths(shared_run)
    _server_paths(mine, steps=20)

    def diff(user) -> dict:
        resp = _api(user).get(f"/api/v1/runs/compare/?ids={ids}")
        assert resp.status_code == 200
        return {d["key"]: d["values"] for d in resp.json()["config_diff"]}

    # staff (who manage both runs) see both configs whole: alice's paths differ from bob's
    full = diff(staff)
    assert full["data.train_files"][0] == paths["dataset file"]
    assert full["actor_rollout_ref.model.path"][0] == paths["model path"]
    # bob compares alice's run without her paths, on the API and the page: the keys the platform sets
    # are hidden on hers, so they are left out of the diff for both runs (they could only differ
    # falsely: her hidden value against his real one), while the keys users set still show
    seen = diff(bob)
    assert seen["trainer.total_training_steps"] == [10, 20]
    mine.refresh_from_db()
    assert not set(seen) & set(PLATFORM_KEYS) and "trainer.logger" not in seen
    assert "data.train_files" in full  # staff: both whole, the dataset files differ
    page = _page(bob).get(f"/runs/compare/?ids={ids}").content.decode()
    for what, path in paths.items():
        assert all(path not in str(v) for values in seen.values() for v in values), what
        assert path not in page, what


def test_the_job_log_is_the_owners_and_staffs_not_a_readers(shared_run, alice, bob, carol, staff, monkeypatch):
    """Ray's driver log prints server paths: its tail, its download and the run page's log panel are
    the owner's and staff's; a reader (by name, or once the run is shared with everyone) gets the 403
    of the other owner-only actions, and the page says whose the log is instead of showing it."""
    from rlstudio.runs import ray_jobs

    paths = _server_paths(shared_run)
    log = "".join(f"{what}: {path}\n" for what, path in paths.items())
    Run.objects.filter(pk=shared_run.pk).update(ray_submission_id="rlstudio-run-shared")
    monkeypatch.setattr(ray_jobs, "logs", lambda submission_id, **kw: log)
    monkeypatch.setattr(ray_jobs, "log_chunks",
                        lambda submission_id, **kw: (iter([log.encode()]), lambda: False))
    pk = shared_run.pk
    tail, download = f"/api/v1/runs/{pk}/job-log/", f"/api/v1/runs/{pk}/job-log/?download=1"
    for manager in (alice, staff):
        resp = _api(manager).get(tail)
        assert resp.status_code == 200 and resp.json()["lines"] == log.splitlines(), manager.username
        resp = _api(manager).get(download)
        assert resp.status_code == 200 and b"".join(resp.streaming_content) == log.encode(), manager.username
        page = _page(manager).get(f"/runs/{pk}/").content.decode()
        assert 'id="run-logs"' in page and f"{tail}?download=1" in page, manager.username
        assert "run-logs-owner-only" not in page
    run_share(run=shared_run, by=alice, visibility="everyone")
    for reader in (bob, carol):
        for url in (tail, download):
            resp = _api(reader).get(url)
            assert resp.status_code == 403, (reader.username, url, resp.content)
            error = resp.json()["error"]
            assert error["code"] == "permission_denied", url
            assert "only its owner (alice) or staff can read the job log" in error["message"], error
            assert all(path not in resp.content.decode() for path in paths.values()), url
            assert _page(reader).get(url).status_code == 403, url  # the browser's session, as the page's fetch
        page = _page(reader).get(f"/runs/{pk}/").content.decode()
        assert "job-log" not in page and 'id="run-logs"' not in page, reader.username
        assert 'id="run-logs-owner-only"' in page and "is for the run's owner and staff" in page
        assert 'id="live-log"' in page  # the trainer's own messages stay the reader's
        assert _page(reader).get(f"/api/v1/runs/{pk}/logs/").status_code == 200


def test_a_failed_runs_job_log_tail_is_the_owners_and_staffs_not_a_readers(
        shared_run, alice, bob, carol, staff, monkeypatch, settings, tmp_path):
    """The reconcile of a failed Ray job keeps Ray's reason as the run's `error`, which readers see on
    the API, the run page's controls and the runs list, and the job log's tail (dataset file, model
    path, run folder) as its `error_log`: the owner's and staff's on the API and the run page, empty
    for a reader, as `checkpoint` is."""
    from rlstudio.runs import ray_jobs
    from rlstudio.runs.reconcile import reconcile_run

    settings.RUNS_DIR = tmp_path
    paths = _server_paths(shared_run)
    log = "".join(f"{what}: {path}\n" for what, path in paths.items()) + "RuntimeError: boom\n"
    message = ("Job entrypoint command failed with exit code 1, last available logs (truncated to 20,000 "
               "chars):\n" + log)
    job = ray_jobs.JobInfo(submission_id="rlstudio-run-shared", status=ray_jobs.FAILED, message=message,
                           driver_exit_code=1)
    monkeypatch.setattr(ray_jobs, "job_info", lambda submission_id: job)
    monkeypatch.setattr(ray_jobs, "logs", lambda submission_id, **kw: log)
    Run.objects.filter(pk=shared_run.pk).update(status=RunStatus.RUNNING, ray_submission_id="rlstudio-run-shared")
    assert reconcile_run(Run.objects.get(pk=shared_run.pk)) == RunStatus.FAILED
    pk, reason = shared_run.pk, "Job entrypoint command failed with exit code 1"
    for manager in (alice, staff):
        detail = _api(manager).get(f"/api/v1/runs/{pk}/").json()
        listed = next(r for r in _api(manager).get("/api/v1/runs/").json()["results"] if r["id"] == pk)
        for body in (detail, listed):
            assert body["error"] == reason and body["error_log"] == log.strip(), manager.username
        for url in (f"/runs/{pk}/", f"/runs/{pk}/controls/"):
            html = _page(manager).get(url).content.decode()
            assert 'class="run-error-log"' in html and reason in html, (manager.username, url)
            assert all(path in html for path in paths.values()), (manager.username, url)
    run_share(run=shared_run, by=alice, visibility="everyone")
    for reader in (bob, carol):
        detail = _api(reader).get(f"/api/v1/runs/{pk}/")
        listed = _api(reader).get("/api/v1/runs/")
        row = next(r for r in listed.json()["results"] if r["id"] == pk)
        for body in (detail.json(), row):
            assert body["error"] == reason and body["error_log"] == "", reader.username
        pages = {url: _page(reader).get(url) for url in (f"/runs/{pk}/", f"/runs/{pk}/controls/", "/runs/")}
        assert reason in pages[f"/runs/{pk}/controls/"].content.decode()
        assert "run-error-log" not in pages[f"/runs/{pk}/"].content.decode()
        for what, path in paths.items():
            for where, resp in (("api detail", detail), ("api list", listed), *pages.items()):
                assert resp.status_code == 200 and path not in resp.content.decode(), (reader.username, what, where)


def test_a_reader_gets_the_trainers_messages_without_server_paths(shared_run, alice, bob, staff):
    """The trainer's log events are readable by readers (the API's logs and the page's "Trainer
    messages"), with every absolute path replaced; the owner and staff read them as the trainer sent
    them."""
    from rlstudio.runs.failure import PATH_MARK
    from rlstudio.telemetry.services import events_ingest

    said = "resumed from /srv/rlstudio/runs/7/global_step_2 at step 2"
    events_ingest(run=shared_run, raw_events=[
        {"seq": 1, "type": "log", "time": 1.0, "data": {"level": "info", "message": said}},
        {"seq": 2, "type": "log", "time": 2.0, "data": {"level": "warning", "message": "step 3/10: 2 of 4 groups"}},
    ])
    for manager in (alice, staff):
        lines = _api(manager).get(f"/api/v1/runs/{shared_run.pk}/logs/").json()["lines"]
        assert [x["message"] for x in lines] == [said, "step 3/10: 2 of 4 groups"]
    lines = _api(bob).get(f"/api/v1/runs/{shared_run.pk}/logs/").json()["lines"]
    assert [x["message"] for x in lines] == [f"resumed from {PATH_MARK} at step 2", "step 3/10: 2 of 4 groups"]
    assert [x["level"] for x in lines] == ["info", "warning"]
    page = _page(bob).get(f"/runs/{shared_run.pk}/").content.decode()
    assert "/srv/rlstudio/runs/7" not in page and f"resumed from {PATH_MARK} at step 2" in page
    assert said in _page(alice).get(f"/runs/{shared_run.pk}/").content.decode()


def test_a_refused_tags_and_note_form_keeps_what_was_typed(alice, make_run):
    """A save the service refuses (a bad tag) shows the form again with what was typed, the note
    included, instead of the run's saved values (the note typed was lost); once, and for that run only."""
    run = make_run(alice, "page-tags")
    other = make_run(alice, "other")
    run_annotate(run=run, by=alice, tags=["kept"], note="saved note")
    page = _page(alice)
    resp = page.post(f"/runs/{run.pk}/annotate/", {"tags": "good <b>", "note": "a long <i>note</i> typed"},
                     follow=True)
    html = resp.content.decode()
    assert "tag &#x27;&lt;b&gt;&#x27;" in html or "tag '&lt;b&gt;'" in html
    assert 'value="good &lt;b&gt;"' in html and ">a long &lt;i&gt;note&lt;/i&gt; typed</textarea>" in html
    run.refresh_from_db()
    assert run.tags == ["kept"] and run.note == "saved note"
    again = page.get(f"/runs/{run.pk}/").content.decode()  # shown once: then the saved values
    assert 'value="kept"' in again and ">saved note</textarea>" in again
    page.post(f"/runs/{run.pk}/annotate/", {"tags": "<b>", "note": "for run one"})
    assert ">for run one</textarea>" not in page.get(f"/runs/{other.pk}/").content.decode()


def test_a_reader_is_never_told_the_names_of_the_owners_other_runs(alice, bob, make_run):
    """A run shared with bob names alice's other runs in two places: the run it was cloned or resumed
    from (the run page's "Clone of") and the earlier run it waits behind (its queue reason, on the
    page and in the API). Those runs are not shared with bob: he gets their ids, never their names;
    alice still sees the parent's name."""
    from rlstudio.runs.services import run_admit

    parent = make_run(alice, "secret-parent")
    child = make_run(alice, "child")
    Run.objects.filter(pk=child.pk).update(parent=parent, parent_kind="clone")
    assert run_admit(run=child, by=alice) is False  # per-user FIFO: behind secret-parent
    assert f"#{parent.pk}" in Run.objects.get(pk=child.pk).queue_reason
    run_share(run=child, by=alice, add=["bob"])

    page = _page(bob).get(f"/runs/{child.pk}/").content.decode()
    assert f"#{parent.pk}" in page and "secret-parent" not in page
    api = _api(bob).get(f"/api/v1/runs/{child.pk}/").json()
    assert api["parent"] == parent.pk and "secret-parent" not in api["queue_reason"]
    assert "secret-parent" in _page(alice).get(f"/runs/{child.pk}/").content.decode()
