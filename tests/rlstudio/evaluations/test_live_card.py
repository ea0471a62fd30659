"""The run page's Evaluations card follows the open page: it is served as a fragment
(GET /runs/{id}/evaluations/card/) that run_evaluations.js fetches again while an evaluation is queued
or running, while the run is live, after a request and on a status event, taking from it the list
(each row's data-active), the checkpoints offered and the newest finished evaluation's data. Readers
get the card as the run page shows it to them, anyone else a 404.

A catalog model's card follows its page the same way, from GET /models/{id}/evaluations/card/: whoever
may see the model gets the card with their own evaluations of it, anyone else a 404; the page polls it
only while one of them is queued or running."""
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.test import Client

from rlstudio.evaluations import services
from rlstudio.evaluations.models import Evaluation, EvaluationStatus
from rlstudio.runs.services import run_share

pytestmark = pytest.mark.django_db


def _client(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def test_the_run_page_marks_the_card_and_its_parts_for_the_refresh(alice, run_with_ckpts):
    html = _client(alice).get(f"/runs/{run_with_ckpts.pk}/").content.decode()
    assert f'id="evaluations-card" data-url="/runs/{run_with_ckpts.pk}/evaluations/card/"' in html
    assert 'id="eval-steps"' in html and 'id="eval-list-box"' in html and 'id="eval-latest" data-id=""' in html


def test_a_checkpoint_saved_after_the_page_loaded_is_offered_by_the_fragment(alice, run_with_ckpts):
    run = run_with_ckpts
    box = '<input type="checkbox" name="checkpoints" value="3"> step 3'
    assert box not in _client(alice).get(f"/runs/{run.pk}/").content.decode()  # 3 is uncommitted
    (Path(django_settings.RUNS_DIR) / str(run.pk) / "global_step_3" / "actor").mkdir(parents=True)
    r = _client(alice).get(f"/runs/{run.pk}/evaluations/card/")
    assert r.status_code == 200 and box in r.content.decode()


def test_the_list_follows_an_evaluation_to_its_end(alice, run_with_ckpts, data):
    run = run_with_ckpts
    ev = Evaluation.objects.create(run=run, owner=alice, dataset=data, checkpoints=[1, 2], k=2, max_prompts=4,
                                   sampling=services.DEFAULT_SAMPLING, status=EvaluationStatus.QUEUED)
    html = _client(alice).get(f"/runs/{run.pk}/evaluations/card/").content.decode()
    assert f'<tr data-id="{ev.pk}" data-active="1">' in html and 'id="eval-latest" data-id=""' in html
    figures = [{"step": s, "mean_at_k": 0.5, "pass_at_k": 1.0, "maj_at_k": 0.0, "samples": 2, "seconds": 1.0,
                "samples_per_s": 2.0} for s in (1, 2)]
    Evaluation.objects.filter(pk=ev.pk).update(status=EvaluationStatus.SUCCEEDED,
                                               results={"checkpoints": figures, "prompts": []})
    html = _client(alice).get(f"/runs/{run.pk}/evaluations/card/").content.decode()
    assert f'<tr data-id="{ev.pk}" data-active="0">' in html
    assert f'id="eval-latest" data-id="{ev.pk}"' in html and 'id="eval-curve"' in html
    assert f'"latest": {{"id": {ev.pk}' in html  # the data the page draws the new curve from


def test_a_reader_gets_the_card_as_they_see_it_and_others_a_404(alice, bob, make_user, run_with_ckpts, data):
    run = run_with_ckpts
    run_share(run=run, by=alice, add=["bob"])
    html = _client(bob).get(f"/runs/{run.pk}/evaluations/card/").content.decode()
    assert 'id="evaluations-card"' in html and 'id="eval-form"' not in html
    assert _client(make_user("carol")).get(f"/runs/{run.pk}/evaluations/card/").status_code == 404
    assert Client().get(f"/runs/{run.pk}/evaluations/card/").status_code in (302, 401)  # not logged in
    assert _client(alice).post(f"/runs/{run.pk}/evaluations/card/").status_code == 405


def _model_eval(model, owner, data, status):
    return Evaluation.objects.create(model=model, owner=owner, dataset=data, include_base=True, k=2, max_prompts=4,
                                     sampling=services.DEFAULT_SAMPLING, status=status)


def test_the_model_page_marks_its_card_and_parts_for_the_refresh(alice, make_model):
    model = make_model(alice, "alice-base", tokenizer_ok=True)
    html = _client(alice).get(f"/models/{model.pk}/").content.decode()
    assert f'id="evaluations-card" data-url="/models/{model.pk}/evaluations/card/"' in html
    assert 'id="eval-list-box"' in html and 'id="eval-latest" data-id=""' in html
    assert "js/fragment_poller.js" in html and "js/run_evaluations.js" in html


def test_the_models_card_follows_an_evaluation_to_its_end(alice, make_model, data):
    model = make_model(alice, "alice-base", tokenizer_ok=True)
    ev = _model_eval(model, alice, data, EvaluationStatus.RUNNING)
    r = _client(alice).get(f"/models/{model.pk}/evaluations/card/")
    assert r.status_code == 200
    html = r.content.decode()
    assert f'<tr data-evaluation-id="{ev.pk}" data-active="1">' in html and 'id="eval-latest" data-id=""' in html
    assert 'id="eval-form"' in html and f'class="eval-stop danger" data-id="{ev.pk}"' in html
    figures = [{"key": "base", "step": 0, "base": True, "mean_at_k": 0.625, "pass_at_k": 0.875, "maj_at_k": 0.5,
                "samples": 8, "seconds": 2.0, "samples_per_s": 4.0}]
    prompts = [{"index": 0, "prompt": "What is 3 + 4?", "ground_truth": "7",
                "cells": {"base": {"n": 2, "correct": 1, "mean_at_k": 0.5, "pass_at_k": 1.0, "maj_at_k": 0.0,
                                   "sample": "#### 7"}}}]
    Evaluation.objects.filter(pk=ev.pk).update(status=EvaluationStatus.SUCCEEDED,
                                               results={"checkpoints": figures, "prompts": prompts})
    html = _client(alice).get(f"/models/{model.pk}/evaluations/card/").content.decode()
    assert f'<tr data-evaluation-id="{ev.pk}" data-active="0">' in html and 'data-active="1"' not in html
    assert '<td class="num">0.625</td>' in html  # the row's mean@k
    assert f'id="eval-latest" data-id="{ev.pk}"' in html and 'id="eval-matrix"' in html
    assert f'"latest": {{"id": {ev.pk}' in html and "What is 3 + 4?" in html  # the data the matrix is drawn from


def test_the_models_card_is_for_whoever_sees_the_model_each_with_their_own_evaluations(
        alice, bob, make_user, make_model, data):
    model = make_model(alice, "alice-base", tokenizer_ok=True)
    mine = _model_eval(model, alice, data, EvaluationStatus.QUEUED)
    url = f"/models/{model.pk}/evaluations/card/"
    assert _client(bob).get(url).status_code == 404  # alice's private model
    assert _client(make_user("carol")).get("/models/999999/evaluations/card/").status_code == 404
    assert Client().get(url).status_code in (302, 401)  # not logged in
    assert _client(alice).post(url).status_code == 405
    model.visibility = "everyone"
    model.save(update_fields=["visibility"])
    html = _client(bob).get(url).content.decode()
    assert 'id="evaluations-card"' in html and 'id="eval-form"' in html  # a shared policy model: bob may evaluate it
    assert f'data-evaluation-id="{mine.pk}"' not in html  # but alice's evaluations stay hers
    assert f'data-evaluation-id="{mine.pk}"' in _client(make_user("root", staff=True)).get(url).content.decode()
