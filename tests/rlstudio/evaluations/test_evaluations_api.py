"""Evaluations of a run's checkpoints through the API (issue 19, item 2): validation 4xx naming the
field, another user's run 404, a shared reader reads but may not create, the matrix's better/worse
filter, and two checkpoints of a tiny real run evaluated with stored results."""
import json

import pytest
from rest_framework.test import APIClient

from rlstudio.evaluations import services
from rlstudio.evaluations.matrix import change_of
from rlstudio.evaluations.models import Evaluation, EvaluationStatus
from rlstudio.runs.models import Run, RunStatus
from rlstudio.runs.services import run_share

pytestmark = pytest.mark.django_db


def _api(user) -> APIClient:
    c = APIClient()
    c.force_authenticate(user)
    return c


@pytest.fixture
def published(monkeypatch):
    """The evaluation tasks that would have been sent to the broker."""
    sent = []
    from rlstudio.config import celery

    monkeypatch.setattr(celery, "publish", lambda name, *args: sent.append((name, *args)))
    return sent


@pytest.fixture
def run_with_ckpts(alice, make_run, settings, tmp_path):
    settings.RUNS_DIR = str(tmp_path / "runs")
    run = make_run(alice, "alice-run")
    Run.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED, step=2)
    run.refresh_from_db()
    for step in (1, 2):
        (tmp_path / "runs" / str(run.pk) / f"global_step_{step}" / "actor").mkdir(parents=True)
    (tmp_path / "runs" / str(run.pk) / "global_step_3.tmp" / "actor").mkdir(parents=True)  # uncommitted
    return run


@pytest.fixture
def data(alice, make_dataset):
    return make_dataset(alice, "eval-data", status="ready")


def _body(data, **over):
    return {"checkpoints": [1, 2], "dataset": data.pk, "k": 4, "sampling": {"temperature": 0.7}, **over}


def test_create_queues_one_task_and_lists(alice, run_with_ckpts, data, published):
    url = f"/api/v1/runs/{run_with_ckpts.pk}/evaluations/"
    r = _api(alice).post(url, _body(data), format="json")
    assert r.status_code == 202, r.content
    ev = Evaluation.objects.get(pk=r.json()["id"])
    assert ev.checkpoints == [1, 2] and ev.k == 4 and ev.status == EvaluationStatus.QUEUED
    assert ev.sampling == {**services.DEFAULT_SAMPLING, "temperature": 0.7}
    assert published == [("evaluations.run_evaluation", ev.pk)]
    listed = _api(alice).get(url).json()
    assert [e["id"] for e in listed] == [ev.pk]
    # one queued evaluation per user at a time
    r = _api(alice).post(url, _body(data), format="json")
    assert r.status_code == 409


@pytest.mark.parametrize("over,field", [
    ({"checkpoints": [3]}, "checkpoints"),  # a .tmp folder is not a checkpoint
    ({"checkpoints": [7]}, "checkpoints"),
    ({"checkpoints": []}, "checkpoints"),
    ({"checkpoints": "../../etc"}, "checkpoints"),
    ({"checkpoints": ["/tmp/x"]}, "checkpoints"),
    ({"k": 0}, "k"),
    ({"k": 17}, "k"),
    ({"k": "4"}, "k"),
    ({"max_prompts": 1000}, "max_prompts"),
    ({"sampling": {"temperature": 9}}, "sampling.temperature"),
    ({"sampling": {"top_p": 0}}, "sampling.top_p"),
    ({"sampling": {"max_new_tokens": 100000}}, "sampling.max_new_tokens"),
    ({"sampling": {"model_path": "/x"}}, "sampling.model_path"),
    ({"dataset": 999999}, "dataset"),
    ({"dataset": "x"}, "dataset"),
])
def test_invalid_requests_name_the_field(alice, run_with_ckpts, data, published, over, field):
    r = _api(alice).post(f"/api/v1/runs/{run_with_ckpts.pk}/evaluations/", _body(data, **over), format="json")
    assert r.status_code == 400, r.content
    assert r.json()["error"]["field"] == field
    assert not Evaluation.objects.exists() and not published


def test_another_users_dataset_is_refused(alice, bob, run_with_ckpts, make_dataset, published):
    theirs = make_dataset(bob, "bob-data", status="ready")
    r = _api(alice).post(f"/api/v1/runs/{run_with_ckpts.pk}/evaluations/", _body(theirs), format="json")
    assert r.status_code == 400 and r.json()["error"]["field"] == "dataset"


def test_another_users_run_is_404_and_a_shared_reader_reads_but_cannot_create(
        alice, bob, make_user, run_with_ckpts, data, published):
    ev = Evaluation.objects.create(run=run_with_ckpts, owner=alice, dataset=data, checkpoints=[1, 2], k=2,
                                   max_prompts=4, sampling=services.DEFAULT_SAMPLING,
                                   status=EvaluationStatus.SUCCEEDED, results={"checkpoints": [], "prompts": []})
    carol = make_user("carol")
    base = f"/api/v1/runs/{run_with_ckpts.pk}/evaluations/"
    for user in (bob, carol):
        assert _api(user).get(base).status_code == 404
        assert _api(user).get(f"{base}{ev.pk}/").status_code == 404
        assert _api(user).post(base, _body(data), format="json").status_code == 404
    run_share(run=run_with_ckpts, by=alice, add=["bob"])
    assert [e["id"] for e in _api(bob).get(base).json()] == [ev.pk]
    assert _api(bob).get(f"{base}{ev.pk}/").status_code == 200
    bob_data = Evaluation._meta.get_field("dataset").related_model.objects.create(
        owner=bob, name="bob-data", file_path="/tmp/b.jsonl", sha256="cd" * 32, status="ready")
    r = _api(bob).post(base, _body(bob_data), format="json")
    assert r.status_code == 403
    assert _api(bob).post(base, _body(data, k=0), format="json").status_code == 403  # before validation
    assert Evaluation.objects.count() == 1 and not published
    assert _api(carol).get(base).status_code == 404


def test_matrix_change_filter(alice, run_with_ckpts, data):
    def cell(mean):
        return {"n": 2, "correct": 0, "mean_at_k": mean, "pass_at_k": 0.0, "maj_at_k": 0.0, "sample": "<b>x</b>"}

    prompts = [{"index": 0, "prompt": "a", "ground_truth": "1", "cells": {"1": cell(0.0), "2": cell(1.0)}},
               {"index": 1, "prompt": "b", "ground_truth": "2", "cells": {"1": cell(1.0), "2": cell(0.5)}},
               {"index": 2, "prompt": "c", "ground_truth": "3", "cells": {"1": cell(0.5), "2": cell(0.5)}}]
    ev = Evaluation.objects.create(run=run_with_ckpts, owner=alice, dataset=data, checkpoints=[1, 2], k=2,
                                   max_prompts=4, sampling=services.DEFAULT_SAMPLING,
                                   status=EvaluationStatus.SUCCEEDED, results={"checkpoints": [], "prompts": prompts})
    url = f"/api/v1/runs/{run_with_ckpts.pk}/evaluations/{ev.pk}/"
    assert [p["change"] for p in _api(alice).get(url).json()["prompts"]] == ["better", "worse", "same"]
    assert [p["index"] for p in _api(alice).get(url + "?change=better").json()["prompts"]] == [0]
    assert [p["index"] for p in _api(alice).get(url + "?change=worse").json()["prompts"]] == [1]
    r = _api(alice).get(url + "?change=up")
    assert r.status_code == 400 and r.json()["error"]["field"] == "change"
    assert change_of(prompts[0]["cells"], [1]) == "same"


def test_two_checkpoints_of_a_tiny_run_evaluated_and_stored(alice, make_run, make_dataset, settings, tmp_path,
                                                           monkeypatch):
    """A real 2-step cpu_smoke run written into the run's folder, then evaluated by the task's service."""
    from trainer.config import apply_overrides
    from trainer.models.tiny import make_tiny_model
    from trainer.recipes import get_recipe
    from trainer.run import run as train
    from trainer.tasks import arith

    settings.RUNS_DIR = str(tmp_path / "runs")
    model = make_tiny_model(tmp_path / "model", preset="smoke", seed=0)
    train_file, test_file = tmp_path / "train.jsonl", tmp_path / "test.jsonl"
    for path, rows in ((train_file, arith.make_rl_rows("train", 32, seed=0)),
                       (test_file, arith.make_rl_rows("test", 4, seed=1))):
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = make_run(alice, "tiny")
    cfg = apply_overrides(get_recipe("cpu_smoke"), {
        "data.train_files": str(train_file), "actor_rollout_ref.model.path": str(model),
        "trainer.default_local_dir": str(tmp_path / "runs" / str(run.pk)), "trainer.logger": ["jsonl"],
        "trainer.save_freq": 1, "reward.name": "arith"})
    assert train(cfg) == 0
    Run.objects.filter(pk=run.pk).update(config=cfg.to_dict(), status=RunStatus.SUCCEEDED)
    run.refresh_from_db()
    data = make_dataset(alice, "arith-test", status="ready")
    type(data).objects.filter(pk=data.pk).update(file_path=str(test_file))
    sent = []
    from rlstudio.config import celery

    monkeypatch.setattr(celery, "publish", lambda name, *args: sent.append(args[0]))
    r = _api(alice).post(f"/api/v1/runs/{run.pk}/evaluations/",
                         {"checkpoints": [1, 2], "dataset": data.pk, "k": 2, "max_prompts": 3,
                          "sampling": {"max_new_tokens": 12, "seed": 3}}, format="json")
    assert r.status_code == 202, r.content
    from rlstudio.evaluations.tasks import run_evaluation

    assert run_evaluation(sent[0]) == "succeeded"
    body = _api(alice).get(f"/api/v1/runs/{run.pk}/evaluations/{sent[0]}/").json()
    assert body["status"] == "succeeded", body["error"]
    assert [f["step"] for f in body["figures"]] == [1, 2]
    for f in body["figures"]:
        assert f["samples"] == 3 * 2 and 0 <= f["pass_at_k"] <= 1 and 0 <= f["maj_at_k"] <= 1
    assert len(body["prompts"]) == 3
    assert all(set(p["cells"]) == {"1", "2"} and p["change"] in ("better", "worse", "same") for p in body["prompts"])


def test_run_page_shows_the_newest_evaluation_escaped_and_the_form_to_its_owner_only(
        alice, bob, run_with_ckpts, data):
    from django.test import Client

    evil = "<script>alert(1)</script>"
    prompts = [{"index": 0, "prompt": evil, "ground_truth": "7",
                "cells": {s: {"n": 2, "correct": 1, "mean_at_k": 0.5, "pass_at_k": 1.0, "maj_at_k": 0.0,
                              "sample": evil} for s in ("1", "2")}}]
    figures = [{"step": s, "mean_at_k": 0.5, "pass_at_k": 1.0, "maj_at_k": 0.0, "samples": 2, "seconds": 1.0,
                "samples_per_s": 2.0} for s in (1, 2)]
    Evaluation.objects.create(run=run_with_ckpts, owner=alice, dataset=data, checkpoints=[1, 2], k=2, max_prompts=4,
                              sampling=services.DEFAULT_SAMPLING, status=EvaluationStatus.SUCCEEDED,
                              results={"checkpoints": figures, "prompts": prompts})
    run_share(run=run_with_ckpts, by=alice, add=["bob"])
    for user, form in ((alice, True), (bob, False)):
        c = Client()
        c.force_login(user)
        html = c.get(f"/runs/{run_with_ckpts.pk}/").content.decode()
        assert 'id="evaluations-card"' in html and 'id="eval-data"' in html and "js/run_evaluations.js" in html
        assert evil not in html  # model text only inside json_script, escaped
        assert ('id="eval-form"' in html) is form
        if form:
            assert 'value="1"' in html and 'value="2"' in html and f'value="{data.pk}"' in html


def test_a_stale_running_evaluation_stops_blocking(alice, run_with_ckpts, data, published):
    from django.utils import timezone

    old = Evaluation.objects.create(run=run_with_ckpts, owner=alice, dataset=data, checkpoints=[1], k=1,
                                    max_prompts=1, sampling=services.DEFAULT_SAMPLING, status=EvaluationStatus.RUNNING,
                                    started=timezone.now() - services.STALE_AFTER * 2)
    r = _api(alice).post(f"/api/v1/runs/{run_with_ckpts.pk}/evaluations/", _body(data), format="json")
    assert r.status_code == 202
    old.refresh_from_db()
    assert old.status == EvaluationStatus.FAILED and "worker stopped" in old.error
