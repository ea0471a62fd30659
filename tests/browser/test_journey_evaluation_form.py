"""The evaluation form (a model's page; a run's page uses the same script) in a real Chromium: a box
left empty is left out of the request, so the server's default applies (temperature 1.0, 32 prompts,
256 new tokens) or the server names the missing field. It once sent 0 for an empty box: an empty
temperature evaluated greedily (k identical samples) without a word, an empty k or prompts count was
refused as "got 0".

The model page's card also follows an evaluation that is running: it finishes while the page is open
and the row's status, its figures and the prompts matrix show without a reload (the card's fragment,
/models/{id}/evaluations/card/, polled by the shared fragment_poller.js)."""
from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.django_db(transaction=True)]


def test_empty_boxes_are_left_out_of_the_evaluation_request(page_as, make_user, tmp_path):
    from rlstudio.catalog.models import Dataset, ModelAsset
    from rlstudio.evaluations.models import Evaluation

    alice = make_user("alice")
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"prompt": [{"role": "user", "content": "1+1?"}], "ground_truth": "2"}) + "\n")
    Dataset.objects.create(owner=alice, name="held-out", file_path=str(data), sha256="f0" * 32, status="ready")
    model = ModelAsset.objects.create(owner=alice, name="tiny", path=str(tmp_path / "tiny"))
    page = page_as(alice)
    page.goto(f"/models/{model.pk}/")
    form = page.locator("#eval-form")
    msg = page.locator("#eval-form-msg")

    # An empty k reaches the server without a value: refused on k, by name, and nothing is saved.
    form.locator("input[name=k]").fill("")
    form.locator("button[type=submit]").click()
    page.wait_for_function("document.getElementById('eval-form-msg').textContent.startsWith('k:')")
    assert msg.inner_text() == "k: k is required: an integer from 1 to 16"
    assert not Evaluation.objects.exists()

    # Empty temperature, prompts and budget: left out, so the server's defaults apply (the request is
    # answered here: what it carries is the point, not a Ray job).
    sent = []

    def answer(route):
        sent.append(json.loads(route.request.post_data))
        route.fulfill(status=201, content_type="application/json", body=json.dumps({"id": 1, "status": "queued"}))

    page.route("**/api/v1/models/*/evaluations/", answer)
    form.locator("input[name=k]").fill("4")
    for name in ("temperature", "max_prompts", "max_new_tokens"):
        form.locator(f"input[name={name}]").fill("")
    form.locator("button[type=submit]").click()
    page.wait_for_function("document.getElementById('eval-form-msg').textContent.startsWith('evaluation #1')")
    assert len(sent) == 1
    body = sent[0]
    assert body["k"] == 4 and body["gpus"] == 0 and body["reward"] == "default"
    assert "max_prompts" not in body and body["sampling"] == {}, body


def test_deleting_the_shown_evaluation_takes_its_figures_off_the_card(page_as, make_user, tmp_path):
    """Delete on the evaluation whose prompts the card shows: the card no longer shows them (the row
    went, but its matrix stayed on the page until a reload)."""
    from rlstudio.catalog.models import Dataset, ModelAsset
    from rlstudio.evaluations.models import Evaluation, EvaluationStatus
    from rlstudio.evaluations.services import DEFAULT_SAMPLING

    alice = make_user("alice")
    data = Dataset.objects.create(owner=alice, name="held-out", file_path=str(tmp_path / "rows.jsonl"),
                                  sha256="f1" * 32, status="ready")
    model = ModelAsset.objects.create(owner=alice, name="tiny", path=str(tmp_path / "tiny"))
    figures = [{"key": "base", "step": 0, "base": True, "mean_at_k": 0.625, "pass_at_k": 0.875, "maj_at_k": 0.5,
                "samples": 8, "seconds": 2.0, "samples_per_s": 4.0}]
    prompts = [{"index": 0, "prompt": "What is 3 + 4?", "ground_truth": "7",
                "cells": {"base": {"n": 2, "correct": 1, "mean_at_k": 0.5, "pass_at_k": 1.0, "maj_at_k": 0.0,
                                   "sample": "#### 7"}}}]
    ev = Evaluation.objects.create(model=model, owner=alice, dataset=data, include_base=True, k=2, max_prompts=4,
                                   sampling=DEFAULT_SAMPLING, status=EvaluationStatus.SUCCEEDED,
                                   results={"checkpoints": figures, "prompts": prompts})
    page = page_as(alice)
    page.goto(f"/models/{model.pk}/")
    assert "What is 3 + 4?" in page.inner_text("#eval-matrix")
    page.click(f"#eval-list button.eval-delete[data-id='{ev.pk}']")
    page.wait_for_function("!document.getElementById('eval-matrix')")
    assert not Evaluation.objects.filter(pk=ev.pk).exists()
    assert page.locator("#eval-list").count() == 0 and "What is 3 + 4?" not in page.inner_text("#evaluations-card")


def test_the_model_pages_card_shows_a_running_evaluation_finish_without_a_reload(page_as, make_user, tmp_path):
    from django.utils import timezone

    from rlstudio.catalog.models import Dataset, ModelAsset
    from rlstudio.evaluations.models import Evaluation, EvaluationStatus
    from rlstudio.evaluations.services import DEFAULT_SAMPLING

    alice = make_user("alice")
    data = Dataset.objects.create(owner=alice, name="held-out", file_path=str(tmp_path / "rows.jsonl"),
                                  sha256="f2" * 32, status="ready")
    model = ModelAsset.objects.create(owner=alice, name="tiny", path=str(tmp_path / "tiny"))
    # Admitted just now, its job not submitted yet: the reconcile leaves it be for RLSTUDIO_SUBMIT_TIMEOUT_S.
    ev = Evaluation.objects.create(model=model, owner=alice, dataset=data, include_base=True, k=2, max_prompts=4,
                                   sampling=DEFAULT_SAMPLING, status=EvaluationStatus.RUNNING,
                                   started=timezone.now())
    page = page_as(alice)
    page.goto(f"/models/{model.pk}/")
    row = f"#eval-list tr[data-evaluation-id='{ev.pk}']"
    assert page.get_attribute(row, "data-active") == "1" and "running" in page.inner_text(row)
    assert page.locator("#eval-matrix").count() == 0
    page.evaluate("window.__noReload = 1")  # gone if the page reloads

    figures = [{"key": "base", "step": 0, "base": True, "mean_at_k": 0.625, "pass_at_k": 0.875, "maj_at_k": 0.5,
                "samples": 8, "seconds": 2.0, "samples_per_s": 4.0}]
    prompts = [{"index": 0, "prompt": "What is 3 + 4?", "ground_truth": "7",
                "cells": {"base": {"n": 2, "correct": 1, "mean_at_k": 0.5, "pass_at_k": 1.0, "maj_at_k": 0.0,
                                   "sample": "#### 7"}}}]
    Evaluation.objects.filter(pk=ev.pk).update(status=EvaluationStatus.SUCCEEDED, finished=timezone.now(),
                                               results={"checkpoints": figures, "prompts": prompts})
    page.wait_for_function(f"(document.querySelector(\"{row}\") || {{}}).dataset?.active === '0'", timeout=30_000)
    assert "succeeded" in page.inner_text(row) and "0.625" in page.inner_text(row)
    page.wait_for_selector("#eval-matrix tbody tr")
    assert "What is 3 + 4?" in page.inner_text("#eval-matrix")
    assert page.inner_text("#eval-matrix thead").startswith("prompt")
    assert page.evaluate("window.__noReload") == 1, "the page reloaded"
