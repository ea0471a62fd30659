"""Evaluations of a run's checkpoints through the API (issue 19, item 2): validation 4xx naming the
field, another user's run 404, a shared reader reads but may neither create nor stop, the matrix's
better/worse filter, a cell's transcripts (escaped by the page, 400 naming the field for a bad cell),
and the run page's card. Admission, the Ray job and its outcome: test_evaluation_jobs.py."""

import pytest

from rlstudio.evaluations import services
from rlstudio.evaluations.matrix import change_of
from rlstudio.evaluations.models import Evaluation, EvaluationStatus
from rlstudio.runs.services import run_share
from tests.rlstudio.conftest import api_client

pytestmark = pytest.mark.django_db


def _body(data, **over):
    return {"checkpoints": [1, 2], "dataset": data.pk, "k": 4, "sampling": {"temperature": 0.7}, **over}


def test_create_admits_sends_one_submit_task_and_lists(alice, run_with_ckpts, data, published,
                                                      django_capture_on_commit_callbacks):
    url = f"/api/v1/runs/{run_with_ckpts.pk}/evaluations/"
    with django_capture_on_commit_callbacks(execute=True):
        r = api_client(alice).post(url, _body(data, include_base=True), format="json")
    assert r.status_code == 202, r.content
    assert r.json()["columns"] == ["base", "1", "2"] and r.json()["gpus"] == 0
    ev = Evaluation.objects.get(pk=r.json()["id"])
    # alice runs nothing: admitted at once (running: its quota held), its submission sent to the worker
    assert ev.checkpoints == [1, 2] and ev.k == 4 and ev.status == EvaluationStatus.RUNNING and ev.started
    assert ev.include_base and ev.columns == ["base", "1", "2"]
    assert ev.sampling == {**services.DEFAULT_SAMPLING, "temperature": 0.7}
    assert published == [("evaluations.submit_evaluation", ev.pk)]
    listed = api_client(alice).get(url).json()
    assert [e["id"] for e in listed] == [ev.pk]
    # one queued evaluation per user at a time
    r = api_client(alice).post(url, _body(data), format="json")
    assert r.status_code == 409


@pytest.mark.parametrize("over,field", [
    ({"checkpoints": [3]}, "checkpoints"),  # a .tmp folder is not a checkpoint
    ({"checkpoints": [7]}, "checkpoints"),
    ({"checkpoints": []}, "checkpoints"),
    ({"checkpoints": [1], "include_base": "yes"}, "include_base"),
    ({"gpus": 2}, "gpus"),
    ({"gpus": -1}, "gpus"),
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
    r = api_client(alice).post(f"/api/v1/runs/{run_with_ckpts.pk}/evaluations/", _body(data, **over), format="json")
    assert r.status_code == 400, r.content
    assert r.json()["error"]["field"] == field
    assert not Evaluation.objects.exists() and not published


def test_another_users_dataset_is_refused(alice, bob, run_with_ckpts, make_dataset, published):
    theirs = make_dataset(bob, "bob-data", status="ready")
    r = api_client(alice).post(f"/api/v1/runs/{run_with_ckpts.pk}/evaluations/", _body(theirs), format="json")
    assert r.status_code == 400 and r.json()["error"]["field"] == "dataset"


def test_staff_cannot_evaluate_a_run_on_a_dataset_its_owner_cannot_read(
        alice, bob, staff, run_with_ckpts, make_dataset, published):
    """The run's readers see an evaluation's prompts: staff, who see every dataset, may not evaluate
    alice's run on bob's private one (nothing saved), but may on a dataset alice can read."""
    private = make_dataset(bob, "bob-private", status="ready")
    url = f"/api/v1/runs/{run_with_ckpts.pk}/evaluations/"
    r = api_client(staff).post(url, _body(private), format="json")
    assert r.status_code == 400 and r.json()["error"]["field"] == "dataset"
    assert "private" in r.json()["error"]["message"] and not Evaluation.objects.exists() and not published
    shared = make_dataset(bob, "bob-shared", status="ready", visibility="everyone")
    r = api_client(staff).post(url, _body(shared), format="json")
    assert r.status_code == 202, r.content


def test_another_users_run_is_404_and_a_shared_reader_reads_but_cannot_create(
        alice, bob, make_user, run_with_ckpts, data, published):
    ev = Evaluation.objects.create(run=run_with_ckpts, owner=alice, dataset=data, checkpoints=[1, 2], k=2,
                                   max_prompts=4, sampling=services.DEFAULT_SAMPLING,
                                   status=EvaluationStatus.SUCCEEDED, results={"checkpoints": [], "prompts": []})
    carol = make_user("carol")
    base = f"/api/v1/runs/{run_with_ckpts.pk}/evaluations/"
    for user in (bob, carol):
        assert api_client(user).get(base).status_code == 404
        assert api_client(user).get(f"{base}{ev.pk}/").status_code == 404
        assert api_client(user).post(base, _body(data), format="json").status_code == 404
    run_share(run=run_with_ckpts, by=alice, add=["bob"])
    assert [e["id"] for e in api_client(bob).get(base).json()] == [ev.pk]
    assert api_client(bob).get(f"{base}{ev.pk}/").status_code == 200
    bob_data = Evaluation._meta.get_field("dataset").related_model.objects.create(
        owner=bob, name="bob-data", file_path="/tmp/b.jsonl", sha256="cd" * 32, status="ready")
    r = api_client(bob).post(base, _body(bob_data), format="json")
    assert r.status_code == 403
    assert api_client(bob).post(base, _body(data, k=0), format="json").status_code == 403  # before validation
    running = Evaluation.objects.create(run=run_with_ckpts, owner=alice, dataset=data, checkpoints=[1], k=2,
                                        max_prompts=4, sampling=services.DEFAULT_SAMPLING,
                                        status=EvaluationStatus.QUEUED)
    assert api_client(bob).post(f"{base}{running.pk}/stop/").status_code == 403
    assert api_client(carol).post(f"{base}{running.pk}/stop/").status_code == 404
    running.refresh_from_db()
    assert running.status == EvaluationStatus.QUEUED
    assert Evaluation.objects.count() == 2 and not published
    assert api_client(carol).get(base).status_code == 404


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
    assert [p["change"] for p in api_client(alice).get(url).json()["prompts"]] == ["better", "worse", "same"]
    assert [p["index"] for p in api_client(alice).get(url + "?change=better").json()["prompts"]] == [0]
    assert [p["index"] for p in api_client(alice).get(url + "?change=worse").json()["prompts"]] == [1]
    r = api_client(alice).get(url + "?change=up")
    assert r.status_code == 400 and r.json()["error"]["field"] == "change"
    assert change_of(prompts[0]["cells"], [1]) == "same"


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


def test_stop_a_queued_one_ends_it_a_running_one_asks_ray(alice, run_with_ckpts, data, monkeypatch):
    from rlstudio.runs import ray_jobs

    stopped = []
    monkeypatch.setattr(ray_jobs, "stop", lambda sid: stopped.append(sid) or True)
    base = f"/api/v1/runs/{run_with_ckpts.pk}/evaluations/"
    queued = Evaluation.objects.create(run=run_with_ckpts, owner=alice, dataset=data, checkpoints=[1], k=2,
                                       max_prompts=4, sampling=services.DEFAULT_SAMPLING)
    r = api_client(alice).post(f"{base}{queued.pk}/stop/")
    assert r.status_code == 202 and r.json()["status"] == "stopped" and not stopped
    running = Evaluation.objects.create(run=run_with_ckpts, owner=alice, dataset=data, checkpoints=[1], k=2,
                                        max_prompts=4, sampling=services.DEFAULT_SAMPLING,
                                        status=EvaluationStatus.RUNNING, ray_submission_id="rlstudio-eval-x")
    r = api_client(alice).post(f"{base}{running.pk}/stop/")
    assert r.status_code == 202 and r.json()["status"] == "running" and r.json()["stop_requested"]
    assert stopped == ["rlstudio-eval-x"]  # the reconcile records it stopped once Ray says so
    r = api_client(alice).post(f"{base}{queued.pk}/stop/")
    assert r.status_code == 409


def test_a_cells_transcripts_are_served_as_data_and_a_bad_cell_names_the_field(alice, bob, run_with_ckpts, data):
    from rlstudio.evaluations.models import EvaluationSample

    evil = "<img src=x onerror=alert(1)>"
    ev = Evaluation.objects.create(run=run_with_ckpts, owner=alice, dataset=data, checkpoints=[2], include_base=True,
                                   k=2, max_prompts=4, sampling=services.DEFAULT_SAMPLING,
                                   status=EvaluationStatus.SUCCEEDED, results={"checkpoints": [], "prompts": []})
    for column in ("base", "2"):
        for i in (1, 0):
            EvaluationSample.objects.create(evaluation=ev, column=column, prompt=0, sample=i, score=float(i),
                                            correct=bool(i), answer="7", finish_reason="stop",
                                            turns=[{"role": "assistant", "content": f"{evil} {column}/{i}"}])
    url = f"/api/v1/runs/{run_with_ckpts.pk}/evaluations/{ev.pk}/samples/"
    r = api_client(alice).get(url, {"prompt": 0, "column": "base"})
    assert r.status_code == 200 and r["Content-Type"].startswith("application/json")
    body = r.json()
    assert [s["sample"] for s in body] == [0, 1] and body[1]["correct"] is True
    assert body[0]["turns"] == [{"role": "assistant", "content": f"{evil} base/0"}]
    assert api_client(alice).get(url, {"prompt": 1, "column": "2"}).json() == []
    for params, field in (({"prompt": 0, "column": "1"}, "column"), ({"prompt": "-1", "column": "2"}, "prompt"),
                          ({"column": "2"}, "prompt"), ({"prompt": 0, "column": "../x"}, "column"),
                          ({"prompt": "\u00b2", "column": "2"}, "prompt"),  # "²".isdigit(), but int("²") fails
                          ({"prompt": "\u0661", "column": "2"}, "prompt")):  # ARABIC-INDIC DIGIT ONE
        r = api_client(alice).get(url, params)
        assert r.status_code == 400 and r.json()["error"]["field"] == field
    assert api_client(bob).get(url, {"prompt": 0, "column": "2"}).status_code == 404


def test_delete_a_finished_evaluation_with_its_transcripts_and_folder_only(
        alice, bob, run_with_ckpts, data, published):
    from rlstudio.evaluations import jobs
    from rlstudio.evaluations.models import EvaluationSample

    base = f"/api/v1/runs/{run_with_ckpts.pk}/evaluations/"
    done = Evaluation.objects.create(run=run_with_ckpts, owner=alice, dataset=data, checkpoints=[1], k=1,
                                     max_prompts=1, sampling=services.DEFAULT_SAMPLING,
                                     status=EvaluationStatus.SUCCEEDED)
    EvaluationSample.objects.create(evaluation=done, column="1", prompt=0, sample=0, score=1.0, correct=True)
    out = jobs.folder(done)
    out.mkdir(parents=True)
    (out / "results.json").write_text("{}")
    running = Evaluation.objects.create(run=run_with_ckpts, owner=alice, dataset=data, checkpoints=[1], k=1,
                                        max_prompts=1, sampling=services.DEFAULT_SAMPLING,
                                        status=EvaluationStatus.RUNNING)
    assert api_client(bob).delete(f"{base}{done.pk}/").status_code == 404  # bob cannot read alice's run
    r = api_client(alice).delete(f"{base}{running.pk}/")
    assert r.status_code == 409 and "stop it" in r.json()["error"]["message"]
    assert api_client(alice).delete(f"{base}{done.pk}/").status_code == 204
    assert not Evaluation.objects.filter(pk=done.pk).exists() and not EvaluationSample.objects.exists()
    assert not out.exists() and out.parent.exists()  # only its own folder went
    assert Evaluation.objects.filter(pk=running.pk).exists()
    run_share(run=run_with_ckpts, by=alice, add=["bob"])
    running.status = EvaluationStatus.FAILED
    running.save()
    assert api_client(bob).delete(f"{base}{running.pk}/").status_code == 403  # a shared reader never deletes
    assert Evaluation.objects.filter(pk=running.pk).exists()


@pytest.mark.parametrize("linked", ["evaluations", "the evaluation's folder"])
def test_delete_never_follows_a_link_out_of_the_runs_folder(alice, run_with_ckpts, data, published, tmp_path,
                                                            linked):
    """Security review F5: the job (or anyone writing in the run's folder) may replace evaluations/ or
    evaluations/<id>/ by a symlink to another folder; the delete removes the records and leaves that
    folder (and the link) alone."""
    from rlstudio.evaluations import jobs
    from rlstudio.evaluations.models import EvaluationSample

    done = Evaluation.objects.create(run=run_with_ckpts, owner=alice, dataset=data, checkpoints=[1], k=1,
                                     max_prompts=1, sampling=services.DEFAULT_SAMPLING,
                                     status=EvaluationStatus.SUCCEEDED)
    EvaluationSample.objects.create(evaluation=done, column="1", prompt=0, sample=0, score=1.0, correct=True)
    out = jobs.folder(done)
    outside = tmp_path / "elsewhere"
    if linked == "evaluations":
        (outside / str(done.pk)).mkdir(parents=True)
        (outside / str(done.pk) / "precious.txt").write_text("keep me")
        out.parent.parent.mkdir(parents=True, exist_ok=True)
        out.parent.symlink_to(outside, target_is_directory=True)
        kept = outside / str(done.pk) / "precious.txt"
    else:
        outside.mkdir()
        (outside / "precious.txt").write_text("keep me")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.symlink_to(outside, target_is_directory=True)
        kept = outside / "precious.txt"
    assert (out / "precious.txt").read_text() == "keep me"  # the link is live
    r = api_client(alice).delete(f"/api/v1/runs/{run_with_ckpts.pk}/evaluations/{done.pk}/")
    assert r.status_code == 204, r.content
    assert not Evaluation.objects.filter(pk=done.pk).exists() and not EvaluationSample.objects.exists()
    assert kept.read_text() == "keep me" and (out / "precious.txt").exists()  # nothing followed, link kept


def test_a_failed_evaluations_log_tail_and_paths_are_its_managers_not_a_readers(
        alice, bob, make_user, staff, run_with_ckpts, data, published, monkeypatch):
    """A failed evaluation of a shared run: its `error` (the job's exception, paths replaced) is every
    reader's on the API (list, detail) and the run page's card; its `error_log` (the job log's tail, the
    checkpoint's path and the server's code) is the run's owner's and staff's, "" for a reader by name
    or as everyone, and the page shows it only to the owner and staff."""
    from django.test import Client
    from django.utils import timezone

    from rlstudio.evaluations import jobs
    from rlstudio.evaluations.reconcile import reconcile_evaluations
    from rlstudio.runs import ray_jobs
    from rlstudio.runs.failure import PATH_MARK

    ev = Evaluation.objects.create(run=run_with_ckpts, owner=alice, dataset=data, checkpoints=[1], k=2, max_prompts=4,
                                   sampling=services.DEFAULT_SAMPLING, status=EvaluationStatus.RUNNING,
                                   started=timezone.now(), ray_submission_id="rlstudio-eval-shared")
    missing = jobs.folder(ev).parent.parent / "global_step_1" / "actor" / "model.pt"
    code = "/srv/rlstudio/trainer/evaluate_job.py"
    written = f"FileNotFoundError: [Errno 2] No such file or directory: '{missing}'"
    log = f'Traceback (most recent call last):\n  File "{code}", line 70, in main\n{written}\n'
    message = f"Job entrypoint command failed with exit code 1, last available logs (truncated to 20,000 chars):\n{log}"
    monkeypatch.setattr(ray_jobs, "job_info", lambda sid: ray_jobs.JobInfo(sid, ray_jobs.FAILED, message, 1))
    monkeypatch.setattr(ray_jobs, "logs", lambda sid: log)
    jobs.folder(ev).mkdir(parents=True)
    (jobs.folder(ev) / "error.json").write_text(f'{{"error": "{written}"}}')
    assert reconcile_evaluations()["moved"] == {ev.pk: EvaluationStatus.FAILED}
    reason = f"FileNotFoundError: [Errno 2] No such file or directory: '{PATH_MARK}'"
    base, page = f"/api/v1/runs/{run_with_ckpts.pk}/evaluations/", f"/runs/{run_with_ckpts.pk}/"

    def seen(user):
        listed, detail = api_client(user).get(base), api_client(user).get(f"{base}{ev.pk}/")
        c = Client()
        c.force_login(user)
        html = c.get(page).content.decode()
        return listed, detail, html

    for manager in (alice, staff):
        listed, detail, html = seen(manager)
        for body in (listed.json()[0], detail.json()):
            assert body["error"] == reason and body["error_log"] == log.strip(), manager.username
        assert 'class="eval-error-log"' in html and str(missing) in html and code in html, manager.username
    carol = make_user("carol")
    run_share(run=run_with_ckpts, by=alice, add=["bob"])  # bob by name, carol once it is everyone's
    for reader, visibility in ((bob, "private"), (carol, "everyone")):
        run_share(run=run_with_ckpts, by=alice, visibility=visibility)
        listed, detail, html = seen(reader)
        for body in (listed.json()[0], detail.json()):
            assert body["error"] == reason and body["error_log"] == "", reader.username
        assert "No such file or directory" in html and "eval-error-log" not in html, reader.username
        for resp in (listed, detail):
            assert str(missing) not in resp.content.decode() and code not in resp.content.decode()
        assert str(missing) not in html and code not in html and "Traceback" not in html, reader.username
