"""Evaluations of a registered catalog model (issue 19, item 2: a base model and a trained one side by
side): the API under /api/v1/models/{id}/evaluations/ (create, list, detail, stop, a cell's
transcripts), who may evaluate and read (a private model of another user is a 404, a shared one is
evaluable by everyone, each user reads only their own evaluations of it, staff all), 400s naming the
field, the job's spec (the model's catalog path and settings, a folder under the platform's state
dir), the run-xor-model constraint, the model page's card, and the real `python -m trainer evaluate`
on a tiny model with the reconcile storing its results (Ray faked, as in test_evaluation_jobs.py)."""
import json

import pytest
from django.db import IntegrityError, transaction
from django.test import Client

from rlstudio.catalog.errors import CatalogInUse
from rlstudio.catalog.services.model_assets import model_delete
from rlstudio.evaluations import jobs, services
from rlstudio.evaluations.models import Evaluation, EvaluationSample, EvaluationStatus
from rlstudio.evaluations.reconcile import reconcile_evaluations
from rlstudio.runs import ray_jobs
from rlstudio.runs.services.admission import queue_admit_jobs
from tests.rlstudio.conftest import api_client

pytestmark = pytest.mark.django_db
S = EvaluationStatus


@pytest.fixture
def model(alice, make_model):
    return make_model(alice, "alice-base", tokenizer_ok=True)


def _url(model, tail: str = "") -> str:
    return f"/api/v1/models/{model.pk}/evaluations/{tail}"


def _body(data, **over):
    return {"dataset": data.pk, "k": 2, "max_prompts": 3, "sampling": {"temperature": 0.5}, **over}


def test_create_list_detail_cells_and_stop(alice, model, data, published, django_capture_on_commit_callbacks,
                                           monkeypatch):
    with django_capture_on_commit_callbacks(execute=True):
        r = api_client(alice).post(_url(model), _body(data), format="json")
    assert r.status_code == 202, r.content
    body = r.json()
    assert body["model"] == model.pk and body["run"] is None and body["owner"] == "alice"
    assert body["columns"] == ["base"] and body["checkpoints"] == [] and body["include_base"] is True
    ev = Evaluation.objects.get(pk=body["id"])
    assert ev.model_id == model.pk and ev.run_id is None and ev.owner == alice and ev.k == 2
    assert ev.status == S.RUNNING and ev.started  # alice runs nothing: admitted at once
    assert ev.sampling == {**services.DEFAULT_SAMPLING, "temperature": 0.5}
    assert published == [("evaluations.submit_evaluation", ev.pk)]
    assert [e["id"] for e in api_client(alice).get(_url(model)).json()] == [ev.pk]
    detail = api_client(alice).get(_url(model, f"{ev.pk}/"))
    assert detail.status_code == 200 and detail.json()["prompts"] == [] and detail.json()["model"] == model.pk
    assert api_client(alice).get(_url(model, f"{ev.pk}/?change=up")).json()["error"]["field"] == "change"
    # one evaluation per user at a time, a run's or a model's
    assert api_client(alice).post(_url(model), _body(data), format="json").status_code == 409
    EvaluationSample.objects.create(evaluation=ev, column="base", prompt=0, sample=0, score=1.0, correct=True,
                                    answer="7", finish_reason="stop", turns=[{"role": "assistant", "content": "7"}])
    cells = api_client(alice).get(_url(model, f"{ev.pk}/samples/"), {"prompt": 0, "column": "base"})
    assert cells.status_code == 200 and [s["answer"] for s in cells.json()] == ["7"]
    r = api_client(alice).get(_url(model, f"{ev.pk}/samples/"), {"prompt": 0, "column": "1"})
    assert r.status_code == 400 and r.json()["error"]["field"] == "column"
    # the run routes do not reach a model's evaluation
    assert api_client(alice).get(f"/api/v1/runs/{ev.pk}/evaluations/{ev.pk}/").status_code == 404
    stopped = []
    monkeypatch.setattr(ray_jobs, "stop", lambda sid: stopped.append(sid) or True)
    Evaluation.objects.filter(pk=ev.pk).update(ray_submission_id="rlstudio-eval-m")
    r = api_client(alice).post(_url(model, f"{ev.pk}/stop/"))
    assert r.status_code == 202 and r.json()["stop_requested"] and stopped == ["rlstudio-eval-m"]


def test_isolation_private_shared_and_own_evaluations_only(alice, bob, staff, make_model, make_dataset, data,
                                                           published):
    private = make_model(bob, "bob-private")
    assert api_client(alice).get(_url(private)).status_code == 404
    assert api_client(alice).post(_url(private), _body(data), format="json").status_code == 404
    shared = make_model(bob, "bob-shared", visibility="everyone")
    r = api_client(alice).post(_url(shared), _body(data), format="json")
    assert r.status_code == 202, r.content
    ev_id = r.json()["id"]
    assert Evaluation.objects.get(pk=ev_id).owner == alice
    # bob owns the model but not alice's evaluation (her dataset may be private): he sees none of it
    assert api_client(bob).get(_url(shared)).json() == []
    for tail in (f"{ev_id}/", f"{ev_id}/samples/?prompt=0&column=base"):
        assert api_client(bob).get(_url(shared, tail)).status_code == 404
    assert api_client(bob).post(_url(shared, f"{ev_id}/stop/")).status_code == 404
    assert [e["id"] for e in api_client(staff).get(_url(shared)).json()] == [ev_id]
    assert api_client(staff).get(_url(shared, f"{ev_id}/")).status_code == 200
    # a model id with someone else's evaluation id: 404
    assert api_client(alice).get(_url(private, f"{ev_id}/")).status_code == 404
    # a dataset alice may not see
    Evaluation.objects.filter(pk=ev_id).update(status=S.SUCCEEDED)
    hidden = make_dataset(bob, "bob-data", status="ready")
    r = api_client(alice).post(_url(shared), _body(hidden), format="json")
    assert r.status_code == 400 and r.json()["error"]["field"] == "dataset"
    # a reward model generates nothing to evaluate
    rm = make_model(alice, "alice-rm", kind="reward")
    r = api_client(alice).post(_url(rm), _body(data), format="json")
    assert r.status_code == 400 and r.json()["error"]["field"] == "model"
    assert Evaluation.objects.count() == 1


@pytest.mark.parametrize("over,field", [
    ({"k": 0}, "k"),
    ({"k": 17}, "k"),
    ({"k": "4"}, "k"),
    ({"max_prompts": 1000}, "max_prompts"),
    ({"gpus": 2}, "gpus"),
    ({"gpus": -1}, "gpus"),
    ({"checkpoints": [1]}, "checkpoints"),
    ({"checkpoints": "../../etc"}, "checkpoints"),
    ({"include_base": False}, "include_base"),
    ({"sampling": {"temperature": 9}}, "sampling.temperature"),
    ({"sampling": {"top_p": 0}}, "sampling.top_p"),
    ({"sampling": {"max_new_tokens": 100000}}, "sampling.max_new_tokens"),
    ({"sampling": {"model_path": "/x"}}, "sampling.model_path"),
    ({"sampling": "hot"}, "sampling"),
    ({"dataset": 999999}, "dataset"),
    ({"dataset": "x"}, "dataset"),
    ({"dataset": None}, "dataset"),
])
def test_bad_fields_are_400_naming_the_field(alice, model, data, published, over, field):
    r = api_client(alice).post(_url(model), _body(data, **over), format="json")
    assert r.status_code == 400, r.content
    assert r.json()["error"]["field"] == field
    assert not Evaluation.objects.exists() and not published


def test_an_unready_dataset_is_refused(alice, model, make_dataset, published):
    pending = make_dataset(alice, "pending", status="validating")
    r = api_client(alice).post(_url(model), _body(pending), format="json")
    assert r.status_code == 400 and r.json()["error"]["field"] == "dataset"


def test_the_spec_has_the_models_catalog_path_and_a_folder_under_the_state_dir(
        alice, make_model, data, published, monkeypatch, settings, tmp_path):
    settings.STATE_DIR = tmp_path / "state"
    model = make_model(alice, "remote-code", tokenizer_ok=True, trust_remote_code=True, tool_parser="llama3")
    submitted = []
    monkeypatch.setattr(ray_jobs, "submit", lambda **kw: submitted.append(kw) or True)
    ev = services.evaluation_new_for_model(user=alice, model=model, dataset=data,
                                           data={"k": 3, "max_prompts": 5, "sampling": {"seed": 7}})
    assert services.evaluation_submit(evaluation_id=ev.pk) == "submitted"
    out = jobs.folder(ev)
    assert out == tmp_path / "state" / "evaluations" / str(ev.pk)
    spec = json.loads((out / "spec.json").read_text())
    assert spec["columns"] == [{"key": "base", "step": 0, "path": None}]
    model_cfg = spec["config"]["actor_rollout_ref"]["model"]
    assert model_cfg["path"] == "/models/remote-code" and model_cfg["trust_remote_code"] is True
    assert spec["config"]["actor_rollout_ref"]["rollout"]["multi_turn"]["format"] == "llama3"
    assert spec["data_file"] == data.file_path and spec["k"] == 3 and spec["max_prompts"] == 5
    assert spec["sampling"]["seed"] == 7 and spec["device"] == "cpu"
    (job,) = submitted
    assert str(out / "spec.json") in job["entrypoint"] and f"--output {out}" in job["entrypoint"]
    assert job["num_gpus"] == 0 and not any("TOKEN" in key for key in job["env_vars"])


def test_exactly_one_of_run_and_model(alice, model, make_run, data):
    run = make_run(alice, "r")
    fields = {"owner": alice, "dataset": data, "k": 1, "max_prompts": 1, "sampling": services.DEFAULT_SAMPLING}
    for subject in ({"run": run, "model": model}, {}):
        with pytest.raises(IntegrityError), transaction.atomic():
            Evaluation.objects.create(**fields, **subject)
    assert Evaluation.objects.create(**fields, model=model).run_id is None
    assert Evaluation.objects.create(**fields, run=run).model_id is None


def test_a_model_being_evaluated_is_not_deleted_and_a_finished_evaluation_goes_with_it(alice, model, data, published):
    ev = services.evaluation_new_for_model(user=alice, model=model, dataset=data, data={"k": 1})
    assert ev.status == S.RUNNING
    with pytest.raises(CatalogInUse, match="being evaluated"):
        model_delete(model=model, by=alice)
    services.evaluation_finish(evaluation_id=ev.pk, status=S.FAILED, error="x")
    model_delete(model=model, by=alice)
    assert not Evaluation.objects.filter(pk=ev.pk).exists()


def test_a_model_evaluation_counts_against_the_quota_like_a_runs(alice, model, make_run, data, published):
    from rlstudio.quotas.models import GpuQuota
    from rlstudio.quotas.selectors import quota_usage_for
    from rlstudio.runs.models import Run, RunStatus
    from rlstudio.runs.services import run_admit

    GpuQuota.objects.create(user=alice, max_gpus=1, gpu_hours_per_month=100, max_concurrent_runs=1)
    ev = services.evaluation_new_for_model(user=alice, model=model, dataset=data, data={"k": 1})
    assert ev.status == S.RUNNING
    assert quota_usage_for(user=alice).runs_active == 1
    waiting = make_run(alice, "waiting")
    assert run_admit(run=waiting) is False
    waiting.refresh_from_db()
    assert "evaluations are 1 of your 1 concurrent run" in waiting.queue_reason
    services.evaluation_finish(evaluation_id=ev.pk, status=S.STOPPED)
    busy = make_run(alice, "busy")
    Run.objects.filter(pk=busy.pk).update(status=RunStatus.RUNNING)
    Run.objects.filter(pk=waiting.pk).update(status=RunStatus.SUCCEEDED)
    queued = services.evaluation_new_for_model(user=alice, model=model, dataset=data, data={"k": 1})
    assert queued.status == S.QUEUED and "1 of your 1 concurrent run" in queued.queue_reason
    Run.objects.filter(pk=busy.pk).update(status=RunStatus.SUCCEEDED)
    assert [(j.kind, j.id) for j in queue_admit_jobs()] == [("evaluation", queued.pk)]


def test_the_model_page_shows_the_form_and_the_figures_escaped(alice, bob, make_model, data):
    evil = "<script>alert(1)</script>"
    model = make_model(alice, evil, tokenizer_ok=True, visibility="everyone")
    figures = [{"key": "base", "step": 0, "base": True, "mean_at_k": 0.625, "pass_at_k": 0.875, "maj_at_k": 0.5,
                "samples": 8, "seconds": 2.0, "samples_per_s": 4.0}]
    prompts = [{"index": 0, "prompt": evil, "ground_truth": "7",
                "cells": {"base": {"n": 2, "correct": 1, "mean_at_k": 0.5, "pass_at_k": 1.0, "maj_at_k": 0.0,
                                   "sample": evil}}}]
    Evaluation.objects.create(model=model, owner=alice, dataset=data, include_base=True, k=2, max_prompts=4,
                              sampling=services.DEFAULT_SAMPLING, status=S.SUCCEEDED,
                              results={"checkpoints": figures, "prompts": prompts})
    c = Client()
    c.force_login(alice)
    html = c.get(f"/models/{model.pk}/").content.decode()
    assert 'id="evaluations-card"' in html and 'id="eval-form"' in html and f'value="{data.pk}"' in html
    assert "0.625" in html and "0.875" in html and "0.500" in html and 'id="eval-matrix"' in html
    assert evil not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert f'/models/{model.pk}/' in c.get("/models/").content.decode()  # the list links to the page
    c.force_login(bob)  # the model is shared with bob: he may evaluate it, but sees none of alice's figures
    html = c.get(f"/models/{model.pk}/").content.decode()
    assert 'id="eval-form"' in html and "0.625" not in html and 'id="eval-list"' not in html
    rm = make_model(alice, "rm", kind="reward")
    c.force_login(alice)
    html = c.get(f"/models/{rm.pk}/").content.decode()
    assert 'id="eval-form"' not in html and "generates no answers" in html
    c.force_login(bob)
    assert c.get(f"/models/{rm.pk}/").status_code == 404  # alice's private model


def test_a_tiny_model_evaluated_by_the_job_command_and_stored(alice, make_dataset, settings, tmp_path, monkeypatch,
                                                              published):
    """The registered tiny model (its catalog path), the spec the platform wrote, the real job command
    (in process), and the reconcile storing its figures and every transcript."""
    from rlstudio.catalog.models import ModelAsset
    from trainer.evaluate_job import main as job_main
    from trainer.models.tiny import make_tiny_model
    from trainer.tasks import arith

    settings.STATE_DIR = tmp_path / "state"
    folder = make_tiny_model(tmp_path / "model", preset="smoke", seed=0)
    model = ModelAsset.objects.create(owner=alice, name="tiny", path=str(folder), tokenizer_ok=True)
    test_file = tmp_path / "test.jsonl"
    test_file.write_text("".join(json.dumps(r) + "\n" for r in arith.make_rl_rows("test", 4, seed=1)))
    data = make_dataset(alice, "arith-test", status="ready")
    type(data).objects.filter(pk=data.pk).update(file_path=str(test_file))
    data.refresh_from_db()
    submitted = []
    monkeypatch.setattr(ray_jobs, "submit", lambda **kw: submitted.append(kw) or True)
    ev = services.evaluation_new_for_model(user=alice, model=model, dataset=data,
                                           data={"k": 2, "max_prompts": 3,
                                                 "sampling": {"max_new_tokens": 12, "seed": 3}})
    assert services.evaluation_submit(evaluation_id=ev.pk) == "submitted"
    out = jobs.folder(ev)
    assert job_main([str(out / "spec.json"), "--output", str(out)]) == 0
    monkeypatch.setattr(ray_jobs, "job_info", lambda sid: ray_jobs.JobInfo(sid, ray_jobs.SUCCEEDED, "", 0))
    assert reconcile_evaluations()["moved"] == {ev.pk: S.SUCCEEDED}
    ev.refresh_from_db()
    (fig,) = ev.results["checkpoints"]
    assert (fig["key"], fig["step"], fig["base"], fig["samples"]) == ("base", 0, True, 3 * 2)
    assert all(0.0 <= fig[k] <= 1.0 for k in ("mean_at_k", "pass_at_k", "maj_at_k"))
    assert len(ev.results["prompts"]) == 3
    assert EvaluationSample.objects.filter(evaluation=ev, column="base").count() == 3 * 2
    cell = ev.results["prompts"][0]["cells"]["base"]
    stored = EvaluationSample.objects.filter(evaluation=ev, prompt=0)
    assert stored.count() == 2 and sum(s.correct for s in stored) == cell["correct"]
    r = api_client(alice).get(_url(model, f"{ev.pk}/"))
    assert r.status_code == 200 and r.json()["figures"][0]["mean_at_k"] == fig["mean_at_k"]


def test_a_dataset_an_evaluation_was_made_on_is_a_409_not_a_500(alice, model, data):
    Evaluation.objects.create(model=model, owner=alice, dataset=data, include_base=True, k=1, max_prompts=1,
                              sampling=services.DEFAULT_SAMPLING, status=S.SUCCEEDED)
    r = api_client(alice).delete(f"/api/v1/datasets/{data.pk}/")
    assert r.status_code == 409 and "1 evaluation(s)" in r.json()["error"]["message"]
    assert type(data).objects.filter(pk=data.pk).exists()


def test_deleting_its_evaluations_frees_the_dataset(alice, bob, model, data):
    ev = Evaluation.objects.create(model=model, owner=alice, dataset=data, include_base=True, k=1, max_prompts=1,
                                   sampling=services.DEFAULT_SAMPLING, status=S.QUEUED)
    assert api_client(alice).delete(_url(model, f"{ev.pk}/")).status_code == 409  # queued: stop it first
    ev.status = S.STOPPED
    ev.save()
    assert api_client(bob).delete(_url(model, f"{ev.pk}/")).status_code == 404  # bob cannot see alice's model
    assert api_client(alice).delete(_url(model, f"{ev.pk}/")).status_code == 204
    assert not Evaluation.objects.filter(pk=ev.pk).exists()
    assert api_client(alice).delete(f"/api/v1/datasets/{data.pk}/").status_code == 204


# --- the reward a model's evaluation is scored with (a name the run form accepts for reward.name) ----------
def _submitted_spec(ev, monkeypatch) -> dict:
    monkeypatch.setattr(ray_jobs, "submit", lambda **kw: True)
    assert services.evaluation_submit(evaluation_id=ev.pk) == "submitted"
    return json.loads((jobs.folder(ev) / "spec.json").read_text())


@pytest.mark.parametrize("reward,stored,expected", [(None, "", "default"), ("", "", "default"),
                                                    ("gsm8k", "gsm8k", "gsm8k"), ("arith", "arith", "arith")])
def test_a_builtin_reward_is_stored_and_reaches_the_specs_config(alice, model, data, published, monkeypatch,
                                                                 settings, tmp_path, reward, stored, expected):
    settings.STATE_DIR = tmp_path / "state"
    body = _body(data) if reward is None else _body(data, reward=reward)
    r = api_client(alice).post(_url(model), body, format="json")
    assert r.status_code == 202, r.content
    assert r.json()["reward"] == stored
    ev = Evaluation.objects.get(pk=r.json()["id"])
    assert ev.reward == stored
    assert [e["reward"] for e in api_client(alice).get(_url(model)).json()] == [stored]
    spec = _submitted_spec(ev, monkeypatch)
    assert spec["config"]["reward"]["name"] == expected
    assert spec["config"]["custom_reward_function"]["path"] is None  # a built-in: no file


def test_a_registered_reward_reaches_the_spec_as_its_file_from_the_registry(alice, model, data, published,
                                                                            monkeypatch, settings, tmp_path,
                                                                            registered_reward):
    settings.STATE_DIR = tmp_path / "state"
    # fields that only the platform writes are not request fields: sent anyway, they change nothing
    body = _body(data, reward="three_quarters", custom_reward_function={"path": "/etc/passwd", "name": "x"},
                 config={"custom_reward_function.path": "/tmp/evil.py"})
    r = api_client(alice).post(_url(model), body, format="json")
    assert r.status_code == 202, r.content
    ev = Evaluation.objects.get(pk=r.json()["id"])
    assert ev.reward == "three_quarters"
    spec = _submitted_spec(ev, monkeypatch)
    assert spec["config"]["reward"]["name"] == "three_quarters"
    assert spec["config"]["custom_reward_function"] == {"path": str(registered_reward), "name": "compute_score"}


def test_a_registered_reward_whose_file_changed_is_a_400_naming_reward(alice, model, data, published,
                                                                      registered_reward):
    registered_reward.write_text("def compute_score(*a, **k):\n    return 1.0\n", encoding="utf-8")
    r = api_client(alice).post(_url(model), _body(data, reward="three_quarters"), format="json")
    assert r.status_code == 400, r.content
    err = r.json()["error"]
    assert err["field"] == "reward" and "changed since it was checked" in err["message"]
    assert not Evaluation.objects.exists() and not published


@pytest.mark.parametrize("reward", ["nope", "../x.py", "/etc/passwd", "trainer.rewards.arith", "gsm8k; rm -rf /",
                                    "a" * 65, 5, ["gsm8k"], {"name": "gsm8k"}, True])
def test_an_unknown_or_path_like_reward_is_a_400_naming_reward_and_nothing_is_saved(alice, model, data, published,
                                                                                   registered_reward, reward):
    r = api_client(alice).post(_url(model), _body(data, reward=reward), format="json")
    assert r.status_code == 400, r.content
    assert r.json()["error"]["field"] == "reward"
    assert not Evaluation.objects.exists() and not published


def test_a_not_ready_registered_reward_is_refused(alice, model, data, published, registered_reward):
    from rlstudio.registry.models import RewardFunction

    RewardFunction.objects.filter(name="three_quarters").update(status="broken", error="it raised")
    r = api_client(alice).post(_url(model), _body(data, reward="three_quarters"), format="json")
    assert r.status_code == 400 and r.json()["error"]["field"] == "reward"
    assert not Evaluation.objects.exists()


@pytest.mark.parametrize("reward", ["gsm8k", "", None])
def test_reward_on_a_run_evaluation_is_a_400_naming_reward(alice, run_with_ckpts, data, published, reward):
    r = api_client(alice).post(f"/api/v1/runs/{run_with_ckpts.pk}/evaluations/",
                               {"dataset": data.pk, "k": 2, "checkpoints": [1], "reward": reward}, format="json")
    assert r.status_code == 400, r.content
    assert r.json()["error"]["field"] == "reward"
    assert not Evaluation.objects.exists() and not published


def test_the_model_page_offers_the_rewards_default_first_and_lists_each_evaluations_reward(
        alice, model, data, run_with_ckpts, registered_reward):
    import re

    Evaluation.objects.create(model=model, owner=alice, dataset=data, include_base=True, k=1, max_prompts=1,
                              sampling=services.DEFAULT_SAMPLING, status=S.SUCCEEDED, reward="three_quarters")
    Evaluation.objects.create(model=model, owner=alice, dataset=data, include_base=True, k=1, max_prompts=1,
                              sampling=services.DEFAULT_SAMPLING, status=S.FAILED, reward="")
    Evaluation.objects.create(model=model, owner=alice, dataset=data, include_base=True, k=1, max_prompts=1,
                              sampling=services.DEFAULT_SAMPLING, status=S.FAILED, reward="<b>x</b>")
    c = Client()
    c.force_login(alice)
    html = c.get(f"/models/{model.pk}/").content.decode()
    select = re.search(r'<select name="reward">(.*?)</select>', html, re.S)
    assert select, "no reward select on the model page"
    offered = re.findall(r'<option value="([^"]*)">', select.group(1))
    assert offered[0] == "default" and {"gsm8k", "arith", "three_quarters"} <= set(offered)
    assert len(offered) == len(set(offered))
    listed = re.findall(r'<td class="eval-reward">(.*?)</td>', html)
    assert listed == ["&lt;b&gt;x&lt;/b&gt;", "default", "three_quarters"]  # newest first
    assert "<b>x</b>" not in html
    # the run page's form has no reward: the run's config scores its evaluations
    run_html = c.get(f"/runs/{run_with_ckpts.pk}/").content.decode()
    assert 'id="eval-form"' in run_html and 'name="reward"' not in run_html


def test_model_text_with_a_nul_is_stored_with_a_replacement_character(alice, model, data):
    ev = Evaluation.objects.create(model=model, owner=alice, dataset=data, include_base=True, k=1, max_prompts=1,
                                   sampling=services.DEFAULT_SAMPLING, status=S.RUNNING)
    results = {"checkpoints": [], "prompts": [{"index": 0, "prompt": "p\x00", "cells": {"base": {"sample": "\x00"}}}]}
    sample = {"column": "base", "prompt": 0, "sample": 0, "score": 0.0, "correct": False, "answer": "1\x00",
              "finish_reason": "stop", "turns": [{"role": "assistant", "content": "x\x00y"}]}
    assert services.evaluation_finish(evaluation_id=ev.pk, status=S.SUCCEEDED,
                                      outcome=jobs.Outcome(results=results, samples=[sample]))
    ev.refresh_from_db()
    assert ev.status == S.SUCCEEDED and ev.results["prompts"][0]["prompt"] == "p\ufffd"
    (stored,) = EvaluationSample.objects.filter(evaluation=ev)
    assert stored.answer == "1\ufffd" and stored.turns == [{"role": "assistant", "content": "x\ufffdy"}]


def test_a_registered_reward_disabled_between_creation_and_the_job_fails_it_and_nothing_runs(
        alice, model, data, published, monkeypatch, settings, tmp_path, registered_reward):
    from rlstudio.registry.models import RewardFunction

    settings.STATE_DIR = tmp_path / "state"
    submitted = []
    monkeypatch.setattr(ray_jobs, "submit", lambda **kw: submitted.append(kw) or True)
    r = api_client(alice).post(_url(model), _body(data, reward="three_quarters"), format="json")
    assert r.status_code == 202, r.content
    RewardFunction.objects.filter(name="three_quarters").update(status="broken", error="it raised")
    assert services.evaluation_submit(evaluation_id=r.json()["id"]) == "failed"
    ev = Evaluation.objects.get(pk=r.json()["id"])
    assert ev.status == S.FAILED and "'three_quarters' is not a reward function" in ev.error
    assert submitted == [] and not (jobs.folder(ev) / "spec.json").exists()


def test_a_model_evaluations_error_log_is_its_owners_and_staffs(alice, bob, staff, make_model, data):
    """A catalog model's evaluation is read only by its owner and staff, who manage it: both get its
    `error_log` on the API and the model page; the error itself names no path."""
    from rlstudio.evaluations.selectors import can_manage_evaluation, evaluation_error_log_for
    from rlstudio.runs.failure import PATH_MARK

    model = make_model(bob, "bob-shared", tokenizer_ok=True, visibility="everyone")
    ev = Evaluation.objects.create(model=model, owner=alice, dataset=data, include_base=True, k=2, max_prompts=4,
                                   sampling=services.DEFAULT_SAMPLING, status=S.RUNNING)
    assert services.evaluation_finish(evaluation_id=ev.pk, status=S.FAILED,
                                      error="OSError: cannot read '/srv/models/base/config.json'",
                                      error_log="Traceback (most recent call last):\nOSError: ...")
    ev.refresh_from_db()
    assert ev.error == f"OSError: cannot read '{PATH_MARK}'"
    assert ev.error_log == ("OSError: cannot read '/srv/models/base/config.json'\n"
                            "Traceback (most recent call last):\nOSError: ...")
    for user in (alice, staff):
        body = api_client(user).get(_url(model, f"{ev.pk}/")).json()
        assert body["error"] == ev.error and body["error_log"] == ev.error_log, user.username
        assert api_client(user).get(_url(model)).json()[0]["error_log"] == ev.error_log
        c = Client()
        c.force_login(user)
        html = c.get(f"/models/{model.pk}/").content.decode()
        assert 'class="eval-error-log"' in html and "/srv/models/base/config.json" in html, user.username
    # bob owns the model, not alice's evaluation: he reads none of it (404), and would not manage it
    assert api_client(bob).get(_url(model, f"{ev.pk}/")).status_code == 404
    assert not can_manage_evaluation(user=bob, ev=ev) and evaluation_error_log_for(user=bob, ev=ev) == ""
