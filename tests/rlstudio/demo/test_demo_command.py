"""The demo content: `manage.py rlstudio_demo` end to end, and one click on "Launch the demo".

Against the real PostgreSQL and the real Celery worker (which validates the arithmetic datasets), with
a 4-step warm start (the real one is 600 steps, minutes: docs/demo.md). The launched runs are held in
the queue by a 0-run quota, so no GRPO job starts on the test machine; what is checked is the run
the click makes: its recipe, model and datasets. The kit is shared with everyone, so a brand-new user
sees it (models, datasets, the run form) and launches on it without copying anything.
"""
from __future__ import annotations

import io
import json
import re
import time
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import Client

from rlstudio.accounts.models import AuditEvent
from rlstudio.catalog.models import Dataset, ModelAsset
from rlstudio.catalog.sharing import catalog_set_visibility
from rlstudio.quotas.models import GpuQuota
from rlstudio.demo.services import DEMO_CONFIG_NAME, demo_state, read_status, seconds_left, write_status
from rlstudio.runs.models import Run, RunConfig
from trainer.recipes import get_recipe

from ..conftest import PASSWORD

WARM_STEPS = 4


@pytest.fixture
def demo_settings(settings, tmp_path):
    settings.UPLOADS_DIR = tmp_path / "uploads"  # absolute paths in the DB: the worker uses them
    settings.STATE_DIR = tmp_path / "state"
    settings.RLSTUDIO_MODEL_ROOTS = [str(tmp_path / "models")]
    return settings


def _run_command(user) -> str:
    out = io.StringIO()
    call_command("rlstudio_demo", "--user", user.username, "--warm-steps", str(WARM_STEPS), "--no-gsm8k",
                 "--wait", "240", stdout=out)
    return out.getvalue()


def _counts():
    return (Dataset.objects.count(), ModelAsset.objects.count(), RunConfig.objects.count())


@pytest.mark.django_db(transaction=True)
def test_demo_command_registers_the_kit_and_one_click_launches_it(celery_worker, demo_settings, staff, alice):
    printed = _run_command(staff)
    assert read_status()["state"] == "ready", read_status()
    st = read_status()  # the first step reported, which the time left is paced from
    assert 0 < st["first_step"] <= st["steps_done"] and st["warm_started"] <= st["first_step_at"] <= st["updated"]

    # The datasets: uploaded, validated and converted by the worker, the calculator in each row.
    train = Dataset.objects.get(owner=staff, name="demo-arith-train")
    val = Dataset.objects.get(owner=staff, name="demo-arith-heldout")
    assert (train.status, train.num_rows, train.preset, train.split) == ("ready", 4096, "verl", "train")
    assert (val.status, val.num_rows, val.split) == ("ready", 128, "val")
    first = json.loads(Path(val.converted_path).read_text(encoding="utf-8").splitlines()[0])
    assert first["data_source"] == "arith" and first["extra_info"]["tools"] == ["calculator"]
    assert first["extra_info"]["tools_kwargs"] == {"calculator": {"create_kwargs": {}}}
    assert re.fullmatch(r"What is \d+ [-+*] \d+\?", first["prompt"][-1]["content"])

    # The warm-started model: bounded by the steps asked for, made under the model root.
    model = ModelAsset.objects.get(owner=staff, name=f"demo-tiny-qwen2-warm-{WARM_STEPS}steps")
    info = json.loads((Path(model.path) / "warm_start.json").read_text())
    # 4 steps teach no copy skill, so the copy gate adds its chunks (counted apart from the steps asked for).
    assert info["steps_requested"] == WARM_STEPS and info["cap_hit"] is False
    assert info["steps"] == WARM_STEPS + info["extra_steps"] and info["extra_steps"] > 0
    assert Path(model.path).parent == Path(demo_settings.RLSTUDIO_MODEL_ROOTS[0])

    # The saved config: the demo recipe, pointing at that model and those datasets.
    cfg = RunConfig.objects.get(owner=staff, name=DEMO_CONFIG_NAME)
    recipe = get_recipe("demo_tool_arith").to_dict()
    assert cfg.config["data"]["train_files"] == train.converted_path
    assert cfg.config["data"]["val_files"] == val.converted_path
    assert cfg.config["actor_rollout_ref"]["model"]["path"] == model.path
    assert cfg.config["tools"] == recipe["tools"] and cfg.config["algorithm"] == recipe["algorithm"]
    assert cfg.config["trainer"]["total_training_steps"] == recipe["trainer"]["total_training_steps"]
    assert "one click" in printed
    assert demo_state().state == "ready"

    # Shared with everyone, owned by the admin: every demo model and dataset.
    assert set(ModelAsset.objects.values_list("owner__username", "visibility")) == {(staff.username, "everyone")}
    assert set(Dataset.objects.values_list("owner__username", "visibility")) == {(staff.username, "everyone")}
    assert AuditEvent.objects.filter(action="model.share", actor=staff).count() == 2

    # Idempotent: a second call finds everything (and does not warm-start again).
    before, mtime = _counts(), (Path(model.path) / "warm_start.json").stat().st_mtime
    _run_command(staff)
    assert _counts() == before
    assert (Path(model.path) / "warm_start.json").stat().st_mtime == mtime
    assert read_status()["state"] == "ready"

    # A brand-new ordinary user sees the kit: the models and datasets lists, the new-run form.
    GpuQuota.objects.create(user=alice, max_concurrent_runs=0)  # queued: no Ray job on the test box
    client = Client(enforce_csrf_checks=True)
    assert client.login(username="alice", password=PASSWORD)
    models = {m["name"]: m for m in client.get("/api/v1/models/").json()["results"]}
    assert set(models) == {"demo-tiny-qwen2", model.name}
    assert models[model.name]["visibility"] == "everyone" and models[model.name]["owner"] == staff.username
    # each says how it was made: the untrained one that its rewards stay 0, the warm one that it learns
    assert models["demo-tiny-qwen2"]["note"].startswith("Random weights") and "stays at 0" in models["demo-tiny-qwen2"]["note"]
    assert "warm-started" in models[model.name]["note"]
    listed = client.get("/models/").content.decode()
    assert "Random weights, built for trying the platform" in listed and "warm-started on its calculator task" in listed
    assert {d["name"] for d in client.get("/api/v1/datasets/").json()["results"]} == {train.name, val.name}
    assert f"/models/{model.pk}/delete/" not in client.get("/models/").content.decode()  # read-only for her
    form = client.get("/runs/new/").content.decode()
    assert f'<option value="{model.pk}">{model.name} (' in form  # then the chat format its check found
    assert f'<option value="{train.pk}">{train.name}</option>' in form

    # One click by her, through the page: CSRF enforced, then a run of her own on the shared kit.
    assert client.post("/runs/demo/launch/").status_code == 403  # no CSRF token
    page = client.get("/runs/")
    assert page.status_code == 200 and b"Launch the demo" in page.content
    token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', page.content).group(1).decode()
    t = time.monotonic()
    resp = client.post("/runs/demo/launch/", {"csrfmiddlewaretoken": token})
    print(f"\n[measure] first demo click by a user (on the shared kit): {time.monotonic() - t:.2f} s")
    assert resp.status_code == 302, resp.content[:500]
    run = Run.objects.get(owner=alice)
    assert resp["Location"] == f"/runs/{run.pk}/"
    assert run.status == "queued" and "run" in run.queue_reason
    # The shared kit itself: nothing copied into her account.
    assert (run.model_id, run.dataset_id, run.val_dataset_id) == (model.pk, train.pk, val.pk)
    assert _counts()[:2] == before[:2]
    assert run.config["data"]["train_files"] == train.converted_path
    assert run.config["data"]["val_files"] == val.converted_path
    assert run.config["actor_rollout_ref"]["model"]["path"] == model.path
    assert run.config["actor_rollout_ref"]["rollout"]["n"] == recipe["actor_rollout_ref"]["rollout"]["n"]
    assert run.config["tools"] == recipe["tools"]

    # A second click: another run on the same kit.
    resp = client.post("/runs/demo/launch/", {"csrfmiddlewaretoken": token})
    assert resp.status_code == 302
    runs = list(Run.objects.filter(owner=alice).order_by("id"))
    assert [r.name for r in runs] == ["demo-tool-arith-1", "demo-tool-arith-2"]
    assert runs[1].dataset_id == runs[0].dataset_id == train.pk and runs[1].model_id == model.pk
    assert not Dataset.objects.filter(owner=alice).exists() and not ModelAsset.objects.filter(owner=alice).exists()

    # Unshared, the kit is out of her reach: the click says so, and no run is made.
    catalog_set_visibility(item=train, by=staff, visibility="private")
    resp = client.post("/runs/demo/launch/", {"csrfmiddlewaretoken": token}, follow=True)
    assert "train dataset is gone or not shared with you" in resp.content.decode()
    assert Run.objects.filter(owner=alice).count() == 2
    catalog_set_visibility(item=train, by=staff, visibility="everyone")

    # The admin's own click uses the kit as it is.
    GpuQuota.objects.create(user=staff, max_concurrent_runs=0)
    admin = Client()
    admin.force_login(staff)
    assert admin.post("/runs/demo/launch/").status_code == 302
    mine = Run.objects.get(owner=staff)
    assert (mine.dataset_id, mine.val_dataset_id, mine.model_id) == (train.pk, val.pk, model.pk)


@pytest.mark.django_db
def test_runs_page_says_the_demo_is_being_prepared_with_the_time_left(demo_settings, alice):
    now = time.time()
    write_status(state="preparing", stage="warm-start", started=now - 60, warm_started=now - 50,
                 steps_done=100, steps_total=500)
    state = demo_state(now=now)
    assert state.state == "preparing" and state.seconds_left == 200  # 0.5 s a step, 400 steps left
    client = Client()
    client.force_login(alice)
    page = client.get("/runs/").content.decode()
    assert "The demo model is being prepared (" in page and "s left)" in page
    assert 'data-demo-state="preparing"' in page and "disabled" in page
    # Launching now is refused with the same reason (never a fake success), and no run appears.
    resp = client.post("/runs/demo/launch/", follow=True)
    assert "The demo was not launched: The demo model is being prepared" in resp.content.decode()
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_stalled_or_absent_demo_is_reported(demo_settings, alice):
    assert demo_state().state == "absent"
    write_status(state="preparing", stage="warm-start", steps_done=1, steps_total=500, warm_started=time.time())
    assert demo_state(now=time.time() + 3600).state == "failed"
    write_status(state="failed", error="RuntimeError: boom")
    client = Client()
    client.force_login(alice)
    page = client.get("/runs/").content.decode()
    assert "The demo could not be prepared: RuntimeError: boom" in page
    assert client.get("/runs/demo/launch/").status_code == 405  # POST only


def test_time_left_is_paced_from_the_first_step_not_the_model_loading():
    """Loading the model before the first step took 30 s here; the steps take 1 s each after it. The
    estimate counts steps at 1 s (the first one made it 30 s / 3 steps = 10 s a step: 5,970 s for a
    warm start that has 597 s left), and before a second report it falls back to the whole pace."""
    now = time.time()
    status = {"warm_started": now - 40, "steps_done": 13, "steps_total": 610, "updated": now,
              "first_step": 3, "first_step_at": now - 10}
    assert seconds_left(status, now) == 597
    only_first = {**status, "steps_done": 3, "updated": now - 10}
    assert seconds_left(only_first, now - 10) == round(30 / 3 * 607)
    assert seconds_left({k: v for k, v in status.items() if not k.startswith("first_")}, now) == round(40 / 13 * 597)
