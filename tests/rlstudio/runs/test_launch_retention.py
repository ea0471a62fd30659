"""A run's sample retention chosen at its launch (POST /api/v1/runs/ `retention`, the launch form's
fields), stored with the run in one transaction, refused on its field as the retention PUT refuses it,
and kept by a resume, a clone and a fork of the run.

Real PostgreSQL; no Ray or worker (with the non-transactional `db`, on-commit task sends never fire).
"""
import pytest
from django.test import Client

from rlstudio.accounts.models import AuditEvent
from rlstudio.retention import RETENTION_K_MAX
from rlstudio.runs.models import Run, RunStatus
from rlstudio.runs.services import run_clone, run_fork, run_new, run_resume
from rlstudio.telemetry.models import RunRetention

pytestmark = pytest.mark.django_db


def _body(ready, **extra):
    return {"name": "r1", "dataset": ready["dataset"].pk, "model": ready["model"].pk, "preset": "cpu_smoke", **extra}


def _kept(run_id) -> tuple[str, int] | None:
    r = RunRetention.objects.filter(run_id=run_id).first()
    return (r.mode, r.k) if r else None


def test_a_launch_with_a_retention_stores_it_with_the_run(api, ready):
    resp = api.post("/api/v1/runs/", _body(ready, retention={"mode": "per_step", "k": 3}), format="json")
    assert resp.status_code == 201, resp.content
    run_id = resp.json()["id"]
    assert _kept(run_id) == ("per_step", 3)
    assert api.get(f"/api/v1/runs/{run_id}/retention/").json() == {"mode": "per_step", "k": 3}
    created = AuditEvent.objects.get(action="run.create", object_id=str(run_id))
    assert created.data["retention"] == {"mode": "per_step", "k": 3}


def test_k_defaults_to_one_and_no_retention_keeps_every_sample(api, ready):
    every = api.post("/api/v1/runs/", _body(ready, retention={"mode": "every_kth_step"}), format="json").json()
    assert _kept(every["id"]) == ("every_kth_step", 1)
    plain = api.post("/api/v1/runs/", _body(ready, name="r2"), format="json").json()
    assert _kept(plain["id"]) is None
    nulled = api.post("/api/v1/runs/", _body(ready, name="r3", retention=None), format="json").json()
    assert _kept(nulled["id"]) is None


@pytest.mark.parametrize("retention,field", [
    ({"mode": "some"}, "retention.mode"),
    ({"k": 2}, "retention.mode"),
    ({"mode": "per_step", "k": 0}, "retention.k"),
    ({"mode": "per_step", "k": RETENTION_K_MAX + 1}, "retention.k"),
    ({"mode": "per_step", "k": "2"}, "retention.k"),
    ({"mode": "per_step", "k": True}, "retention.k"),
    ({"mode": "per_step", "k": 2, "every": 1}, "retention"),
    ("per_step", "retention"),
    ([1], "retention"),
])
def test_a_bad_retention_is_a_400_naming_the_field_and_nothing_is_made(api, ready, retention, field):
    resp = api.post("/api/v1/runs/", _body(ready, retention=retention), format="json")
    assert resp.status_code == 400, resp.content
    assert resp.json()["error"]["field"] == field
    assert Run.objects.count() == 0 and RunRetention.objects.count() == 0


def test_the_put_and_the_launch_refuse_with_the_same_words(api, ready):
    run_id = api.post("/api/v1/runs/", _body(ready), format="json").json()["id"]
    put = api.put(f"/api/v1/runs/{run_id}/retention/", {"mode": "per_step", "k": 0}, format="json").json()
    post = api.post("/api/v1/runs/", _body(ready, name="r2", retention={"mode": "per_step", "k": 0}),
                    format="json").json()
    assert put["error"]["field"] == "k" and post["error"]["field"] == "retention.k"
    assert put["error"]["message"] == post["error"]["message"]


@pytest.fixture
def source(alice, ready, runs_dir):
    """alice's stopped run with retention every 5th step and committed checkpoints at steps 1 and 2."""
    run = run_new(owner=alice, name="src", dataset=ready["dataset"], model=ready["model"], preset="cpu_smoke",
                  retention={"mode": "every_kth_step", "k": 5})
    Run.objects.filter(pk=run.pk).update(status=RunStatus.STOPPED, step=1)
    run.refresh_from_db()
    for step in (1,):
        (runs_dir / str(run.pk) / f"global_step_{step}" / "actor").mkdir(parents=True)
    (runs_dir / str(run.pk) / "latest_checkpointed_iteration.txt").write_text("1")
    return run


def test_resume_clone_and_fork_keep_the_sources_retention(source, alice):
    resumed = run_resume(run=source, by=alice)
    cloned = run_clone(run=source, by=alice)
    forked = run_fork(run=source, by=alice, step=1)
    for new in (resumed, cloned, forked):
        assert new.parent_id == source.pk
        assert _kept(new.pk) == ("every_kth_step", 5), new.parent_kind


def test_a_source_without_retention_gives_runs_without_one(alice, ready, runs_dir):
    run = run_new(owner=alice, name="src", dataset=ready["dataset"], model=ready["model"], preset="cpu_smoke")
    Run.objects.filter(pk=run.pk).update(status=RunStatus.STOPPED)
    assert _kept(run_clone(run=Run.objects.get(pk=run.pk), by=alice).pk) is None


def test_a_retention_changed_after_the_launch_is_the_one_a_clone_keeps(api, source, alice):
    assert api.put(f"/api/v1/runs/{source.pk}/retention/", {"mode": "per_step", "k": 7},
                   format="json").status_code == 200
    assert _kept(api.post(f"/api/v1/runs/{source.pk}/clone/", {}, format="json").json()["id"]) == ("per_step", 7)


def test_a_clone_or_fork_over_the_api_may_choose_its_own_retention(api, source):
    clone = api.post(f"/api/v1/runs/{source.pk}/clone/", {"retention": {"mode": "per_step", "k": 2}}, format="json")
    assert clone.status_code == 201, clone.content
    assert _kept(clone.json()["id"]) == ("per_step", 2)
    fork = api.post(f"/api/v1/runs/{source.pk}/fork/", {"step": 1, "retention": {"mode": "all"}}, format="json")
    assert fork.status_code == 201, fork.content
    assert _kept(fork.json()["id"]) == ("all", 1)
    before = Run.objects.count()
    for action, body in (("clone", {}), ("fork", {"step": 1})):
        bad = api.post(f"/api/v1/runs/{source.pk}/{action}/", {**body, "retention": {"mode": "per_step", "k": 0}},
                       format="json")
        assert bad.status_code == 400 and bad.json()["error"]["field"] == "retention.k", (action, bad.content)
    assert Run.objects.count() == before


def test_the_launch_form_sets_the_retention(alice, ready):
    page = Client()
    page.force_login(alice)
    form = {"name": "from-form", "dataset": ready["dataset"].pk, "model": ready["model"].pk, "preset": "cpu_smoke",
            "gpus": 0, "retention_mode": "per_step", "retention_k": 4, "tags": "a1, b2"}
    resp = page.post("/runs/new/", form)
    assert resp.status_code == 302, resp.content.decode()[:2000]
    run = Run.objects.get(name="from-form")
    assert _kept(run.pk) == ("per_step", 4) and run.tags == ["a1", "b2"]
    bad = page.post("/runs/new/", {**form, "name": "bad", "retention_k": 0})
    assert bad.status_code == 400 and not Run.objects.filter(name="bad").exists()
    assert "retention_k" in bad.context["form"].errors
    body = page.get("/runs/new/").content.decode()
    assert 'name="retention_mode"' in body and 'name="retention_k"' in body


def test_the_form_says_keep_all_by_default(alice, ready):
    page = Client()
    page.force_login(alice)
    page.post("/runs/new/", {"name": "plain", "dataset": ready["dataset"].pk, "model": ready["model"].pk,
                             "preset": "cpu_smoke", "gpus": 0})
    assert _kept(Run.objects.get(name="plain").pk) is None


def test_a_launch_takes_its_tags_and_refuses_bad_ones_on_the_field(api, ready):
    resp = api.post("/api/v1/runs/", _body(ready, tags=["lr-sweep", "v2"]), format="json")
    assert resp.status_code == 201, resp.content
    assert Run.objects.get(pk=resp.json()["id"]).tags == ["lr-sweep", "v2"]
    for tags in (["two words"], "one", [{"a": 1}], {"a": 1}):
        bad = api.post("/api/v1/runs/", _body(ready, name="bad", tags=tags), format="json")
        assert bad.status_code == 400 and bad.json()["error"]["field"] == "tags", (tags, bad.content)
    assert not Run.objects.filter(name="bad").exists()


def test_a_sweep_gives_each_run_its_retention_or_refuses_it_whole(api, ready):
    from rlstudio.sweeps.models import Sweep

    axes = [{"key": "actor_rollout_ref.rollout.n", "values": [2, 4]}]
    body = {**_body(ready, name="sw"), "axes": axes, "retention": {"mode": "every_kth_step", "k": 5}}
    resp = api.post("/api/v1/sweeps/", body, format="json")
    assert resp.status_code == 201, resp.content
    assert [_kept(r["run"]) for r in resp.json()["runs"]] == [("every_kth_step", 5)] * 2
    bad = api.post("/api/v1/sweeps/", {**body, "name": "sw2", "retention": {"mode": "per_step", "k": 0}}, format="json")
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "retention.k"
    assert not Sweep.objects.filter(name="sw2").exists() and Run.objects.filter(name__startswith="sw2/").count() == 0
