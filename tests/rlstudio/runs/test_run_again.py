"""Run again with changes: `/runs/new/?from=<id>` opens the launch form filled in from a run the user
reads (its dataset, validation dataset, model, GPUs, name, tags, retention and its own config keys,
never the platform's), a 404 for a run they may not read, the run page's link, and a launch from it.

Real PostgreSQL; no Ray or worker (with the non-transactional `db`, on-commit task sends never fire).
"""
import html
import re

import pytest
from django.test import Client

from rlstudio.runs.launch import parse_config_text
from rlstudio.runs.models import Run
from rlstudio.runs.services import run_annotate, run_new, run_share
from rlstudio.telemetry.models import RunRetention

pytestmark = pytest.mark.django_db
LR = "actor_rollout_ref.actor.optim.lr"


def _page(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def _value(body: str, name: str) -> str | None:
    """The value of the form's <input name=...>, the text of its <textarea>, or its selected option."""
    m = re.search(rf'<input [^>]*name="{name}"[^>]*>', body)
    if m:
        v = re.search(r'value="([^"]*)"', m.group(0))
        return html.unescape(v.group(1)) if v else None
    m = re.search(rf'<textarea [^>]*name="{name}"[^>]*>(.*?)</textarea>', body, re.S)
    if m:
        return html.unescape(m.group(1)).strip()
    m = re.search(rf'<select [^>]*name="{name}"[^>]*>(.*?)</select>', body, re.S)
    assert m, name
    chosen = re.search(r'<option value="([^"]*)" selected>', m.group(1))
    return chosen.group(1) or None if chosen else None


@pytest.fixture
def source(alice, make_dataset, make_model):
    """alice's run on a training and a validation dataset with lr 3e-6, 3 samples a prompt, two tags and
    retention per_step k=2."""
    train = make_dataset(alice, "train-rows", status="ready")
    held = make_dataset(alice, "held-rows", status="ready", split="val")
    model = make_model(alice, "policy-1", tokenizer_ok=True)
    run = run_new(owner=alice, name="lr-probe", dataset=train, val_dataset=held, model=model, preset="cpu_smoke",
                  overrides={LR: 3e-6, "actor_rollout_ref.rollout.n": 3}, tags=["sweep", "lr"],
                  retention={"mode": "per_step", "k": 2})
    run.refresh_from_db()
    return run


def test_the_form_is_filled_in_from_the_run(alice, source):
    r = _page(alice).get(f"/runs/new/?from={source.pk}")
    assert r.status_code == 200
    body = r.content.decode()
    assert _value(body, "name") == "lr-probe (again)"
    assert (_value(body, "dataset"), _value(body, "val_dataset"), _value(body, "model")) == (
        str(source.dataset_id), str(source.val_dataset_id), str(source.model_id))
    assert _value(body, "gpus") == "0" and _value(body, "tags") == "sweep lr"
    assert (_value(body, "retention_mode"), _value(body, "retention_k")) == ("per_step", "2")
    assert float(_value(body, "learning_rate")) == 3e-6 and _value(body, "samples_per_prompt") == "3"
    config = parse_config_text(_value(body, "config_yaml"))
    assert config["actor_rollout_ref"]["actor"]["optim"]["lr"] == 3e-6
    assert config["actor_rollout_ref"]["rollout"]["n"] == 3
    # the platform's keys are not the user's: no paths, no run folder, no dataset files
    assert "train_files" not in config.get("data", {}) and "val_files" not in config.get("data", {})
    assert "path" not in config.get("actor_rollout_ref", {}).get("model", {})
    for platform_value in (source.dataset.file_path, source.model.path, str(source.pk) + "/"):
        assert platform_value not in _value(body, "config_yaml")
    assert source.dataset.file_path not in body and source.model.path not in body


def test_launching_the_filled_in_form_as_it_is_makes_an_equal_run(alice, source):
    body = _page(alice).get(f"/runs/new/?from={source.pk}").content.decode()
    fields = ("name", "dataset", "val_dataset", "model", "gpus", "tags", "retention_mode", "retention_k",
              "learning_rate", "samples_per_prompt", "train_batch_size", "total_training_steps", "config_yaml")
    form = {f: _value(body, f) or "" for f in fields}
    form["preset"] = "cpu_smoke"
    form["learning_rate"] = "5e-06"  # the change
    resp = _page(alice).post(f"/runs/new/?from={source.pk}", form)
    assert resp.status_code == 302, resp.content.decode()[:3000]
    new = Run.objects.get(name="lr-probe (again)")
    assert new.pk != source.pk and new.parent_id is None
    assert new.config["actor_rollout_ref"]["actor"]["optim"]["lr"] == 5e-6
    assert new.config["actor_rollout_ref"]["rollout"]["n"] == 3
    assert new.tags == ["sweep", "lr"] and new.val_dataset_id == source.val_dataset_id
    assert RunRetention.objects.get(run=new).mode == "per_step"
    # the platform's keys written again from the new run's record, not typed
    assert new.config["data"]["train_files"] == source.dataset.file_path


def test_another_users_private_run_is_a_404(bob, source):
    assert _page(bob).get(f"/runs/new/?from={source.pk}").status_code == 404
    # a POST is an ordinary launch that never reads the source: bob's incomplete form is his own 400
    refused = _page(bob).post(f"/runs/new/?from={source.pk}", {"name": "x"})
    assert refused.status_code == 400 and "lr-probe" not in refused.content.decode()
    for bad in ("x", "", "-1", "99999999", "1e3"):
        assert _page(bob).get(f"/runs/new/?from={bad}").status_code == 404, bad


def test_a_reader_gets_the_config_but_not_what_they_may_not_choose(alice, bob, source):
    run_share(run=source, by=alice, add=["bob"])
    body = _page(bob).get(f"/runs/new/?from={source.pk}").content.decode()
    assert _value(body, "name") == "lr-probe (again)"
    assert _value(body, "dataset") is None and _value(body, "model") is None  # alice's, not shared with bob
    assert parse_config_text(_value(body, "config_yaml"))["actor_rollout_ref"]["actor"]["optim"]["lr"] == 3e-6
    assert source.dataset.file_path not in body


def test_the_run_page_links_to_it_beside_clone(alice, source):
    run_annotate(run=source, by=alice, note="")
    body = _page(alice).get(f"/runs/{source.pk}/").content.decode()
    assert f'href="/runs/new/?from={source.pk}"' in body and 'id="run-again"' in body


def test_the_filled_in_form_launches_even_once_the_source_run_is_gone(alice, source):
    """What was typed is never lost to the source run going meanwhile (deleted, or no longer shared)."""
    body = _page(alice).get(f"/runs/new/?from={source.pk}").content.decode()
    fields = ("name", "dataset", "val_dataset", "model", "gpus", "tags", "retention_mode", "retention_k",
              "learning_rate", "samples_per_prompt", "train_batch_size", "total_training_steps", "config_yaml")
    form = {f: _value(body, f) or "" for f in fields} | {"preset": "cpu_smoke"}
    Run.objects.filter(pk=source.pk).delete()
    resp = _page(alice).post(f"/runs/new/?from={source.pk}", form)
    assert resp.status_code == 302, resp.content.decode()[:2000]
    assert Run.objects.filter(name="lr-probe (again)").exists()
