"""A run's disk on the platform: the operator's cap on checkpoints kept (RLSTUDIO_MAX_CHECKPOINTS_PER_RUN)
and the per-run disk budget (RLSTUDIO_RUN_DISK_BUDGET_GB), written as platform keys users cannot set; a
trainer.max_actor_ckpt_to_keep above the cap is a 400 naming it.

Real PostgreSQL; no Ray or worker.
"""
import pytest

from rlstudio.runs import launch, preview
from rlstudio.runs.gate.bounds import GateRefused
from rlstudio.runs.gate.disk import check_checkpoints_kept
from rlstudio.runs.models import Run, RunStatus
from rlstudio.runs.services import run_transition
from trainer.config import Config, apply_overrides

pytestmark = pytest.mark.django_db
CAP, BUDGET = "trainer.max_ckpt_to_keep_cap", "trainer.disk_budget_gb"
KEEP = "trainer.max_actor_ckpt_to_keep"


def _body(ready, **extra):
    """A launch's body: the preset cpu_smoke unless `extra` gives the config another way (two: a 400)."""
    preset = {} if {"config", "config_id"} & set(extra) else {"preset": "cpu_smoke"}
    return {"name": "r1", "dataset": ready["dataset"].pk, "model": ready["model"].pk, **preset, **extra}


def _with(keep):
    return apply_overrides(Config(), {KEEP: keep}).to_dict()


def test_check_checkpoints_kept_refuses_above_the_cap_only():
    check_checkpoints_kept(_with(None), 5)
    check_checkpoints_kept(_with(5), 5)
    check_checkpoints_kept(_with(1000), None)  # no cap
    with pytest.raises(GateRefused) as exc:
        check_checkpoints_kept(_with(6), 5)
    assert exc.value.key == KEEP
    assert "6 checkpoints kept, more than this platform's 5 per run (RLSTUDIO_MAX_CHECKPOINTS_PER_RUN)" \
        in exc.value.message


def test_the_settings_defaults_and_zero_meaning_none(settings):
    assert (launch.checkpoint_cap(), launch.disk_budget_gb()) == (5, 200.0)
    settings.RLSTUDIO_MAX_CHECKPOINTS_PER_RUN, settings.RLSTUDIO_RUN_DISK_BUDGET_GB = 0, 0
    assert (launch.checkpoint_cap(), launch.disk_budget_gb()) == (None, None)


def test_a_number_kept_above_the_cap_is_a_400_naming_the_key_and_nothing_is_made(api, ready, settings):
    resp = api.post("/api/v1/runs/", _body(ready, overrides={KEEP: 6}), format="json")
    assert resp.status_code == 400, resp.content
    error = resp.json()["error"]
    assert error["field"] == KEEP and "this platform's 5 per run" in error["message"], error
    assert "RLSTUDIO_MAX_CHECKPOINTS_PER_RUN" in error["message"]
    assert Run.objects.count() == 0
    # the form's preview says the same before anything is sent
    checked = preview.check_all(preset="cpu_smoke", overrides={KEEP: 6}, dataset=ready["dataset"],
                                model=ready["model"])
    assert [(e.field, "this platform's 5" in e.message) for e in checked.errors] == [(KEEP, True)]
    # at the cap it passes; without a cap the user's own bound (1 ... 1000) is all
    assert api.post("/api/v1/runs/", _body(ready, overrides={KEEP: 5}), format="json").status_code == 201
    settings.RLSTUDIO_MAX_CHECKPOINTS_PER_RUN = 0
    resp = api.post("/api/v1/runs/", _body(ready, name="r2", overrides={KEEP: 1000}), format="json")
    assert resp.status_code == 201, resp.content


def test_the_platform_writes_the_cap_and_the_budget_and_keeps_the_users_number(api, ready, settings, tmp_path):
    resp = api.post("/api/v1/runs/", _body(ready, overrides={KEEP: 3}), format="json")
    assert resp.status_code == 201, resp.content
    run = Run.objects.get(pk=resp.json()["id"])
    tr = run.config["trainer"]
    assert (tr["max_actor_ckpt_to_keep"], tr["max_ckpt_to_keep_cap"], tr["disk_budget_gb"]) == (3, 5, 200.0)
    # the spec frozen at submit takes the settings of that moment
    settings.RLSTUDIO_MAX_CHECKPOINTS_PER_RUN, settings.RLSTUDIO_RUN_DISK_BUDGET_GB = 2, 0.5
    spec = launch.freeze_spec(run=run, out_dir=tmp_path / str(run.pk))["trainer"]
    assert (spec["max_actor_ckpt_to_keep"], spec["max_ckpt_to_keep_cap"], spec["disk_budget_gb"]) == (3, 2, 0.5)
    settings.RLSTUDIO_MAX_CHECKPOINTS_PER_RUN, settings.RLSTUDIO_RUN_DISK_BUDGET_GB = 0, 0
    spec = launch.freeze_spec(run=run, out_dir=tmp_path / str(run.pk))["trainer"]
    assert (spec["max_ckpt_to_keep_cap"], spec["disk_budget_gb"]) == (None, None)


@pytest.mark.parametrize("key,value", [(CAP, 1000), (BUDGET, 1e9), (BUDGET, 0.0)])
def test_users_cannot_set_the_platform_keys(api, ready, key, value):
    resp = api.post("/api/v1/runs/", _body(ready, overrides={key: value}), format="json")
    assert resp.status_code == 400, resp.content
    error = resp.json()["error"]
    assert error["field"] == key and "set by the platform" in error["message"], error
    section, name = key.split(".")
    resp = api.post("/api/v1/runs/", _body(ready, config={section: {name: value}}), format="json")
    assert resp.status_code == 400 and resp.json()["error"]["field"] == key, resp.content
    assert Run.objects.count() == 0


def test_a_user_asking_for_no_bound_gets_the_operators(api, ready):
    """None is the schema's default: an override to it changes nothing, and the platform writes its own."""
    resp = api.post("/api/v1/runs/", _body(ready, overrides={CAP: None, BUDGET: None}), format="json")
    assert resp.status_code == 201, resp.content
    tr = Run.objects.get(pk=resp.json()["id"]).config["trainer"]
    assert (tr["max_ckpt_to_keep_cap"], tr["disk_budget_gb"]) == (5, 200.0)


def test_a_resume_keeps_its_recorded_checkpoint_and_gets_the_bounds(api, ready, settings, tmp_path):
    """The checkpoint the platform recorded lies in the parent's folder; the resumed run writes (and
    prunes) only its own."""
    settings.RUNS_DIR = tmp_path
    run = Run.objects.get(pk=api.post("/api/v1/runs/", _body(ready), format="json").json()["id"])
    run_transition(run=run, to=RunStatus.FAILED, error="for the test")
    for step in (1, 2):
        (tmp_path / str(run.pk) / f"global_step_{step}").mkdir(parents=True)
    (tmp_path / str(run.pk) / "latest_checkpointed_iteration.txt").write_text("2")
    resp = api.post(f"/api/v1/runs/{run.pk}/resume/", {}, format="json")
    assert resp.status_code == 201, resp.content
    child = Run.objects.select_related("dataset", "model", "parent").get(pk=resp.json()["id"])
    spec = launch.freeze_spec(run=child, out_dir=launch.run_dir(child.pk))["trainer"]
    assert spec["resume_from_path"] == str(tmp_path / str(run.pk) / "global_step_2")
    assert spec["default_local_dir"] == str(tmp_path / str(child.pk)) != str(tmp_path / str(run.pk))
    assert (spec["max_ckpt_to_keep_cap"], spec["disk_budget_gb"]) == (5, 200.0)
    # a parent whose stored number is above a cap lowered since: its resume is refused, naming the key
    Run.objects.filter(pk=run.pk).update(config=apply_overrides(Config.from_dict(run.config), {KEEP: 5}).to_dict())
    settings.RLSTUDIO_MAX_CHECKPOINTS_PER_RUN = 3
    resp = api.post(f"/api/v1/runs/{run.pk}/resume/", {}, format="json")
    assert resp.status_code == 400 and resp.json()["error"]["field"] == KEEP, resp.content
