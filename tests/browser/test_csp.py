"""The Content-Security-Policy breaks nothing: a real Chromium walks every kind of page (upload with the
drop zone, the dataset's histogram, the live run page's plotly charts and WebSocket, a transcript, the
runs filter, the admin, the API docs, the login page) and the browser reports no violation.

Violations are caught twice: the document's `securitypolicyviolation` events (an init script keeps
them in sessionStorage across navigations) and Chromium's console ("Refused to ...").
"""
from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

pytestmark = [pytest.mark.django_db(transaction=True)]

T0 = 1_764_440_000.0
ROWS = "".join(json.dumps({"question": f"What is {i}+{i}?", "answer": f"{i}+{i}={2 * i}\n#### {2 * i}"}) + "\n"
               for i in range(1, 9))
RECORD = """
document.addEventListener("securitypolicyviolation", (e) => {
  const seen = JSON.parse(sessionStorage.getItem("csp") || "[]");
  seen.push(`${e.violatedDirective} ${e.blockedURI} at ${e.sourceFile}:${e.lineNumber} on ${location.pathname}`);
  sessionStorage.setItem("csp", JSON.stringify(seen));
});
"""


def _watch(page) -> list[str]:
    refused: list[str] = []
    page.context.add_init_script(RECORD)
    page.on("console", lambda m: refused.append(f"{m.text} on {page.url}")
            if "Content Security Policy" in m.text or m.text.startswith("Refused to") else None)
    return refused


def _violations(page, console: list[str]) -> list[str]:
    page.wait_for_timeout(300)
    return json.loads(page.evaluate("sessionStorage.getItem('csp') || '[]'")) + console


def test_pages_run_under_the_csp_without_violations(page_as, make_user, register_model, ingest, services,
                                                     browser):
    from rlstudio.catalog.models import Dataset
    from rlstudio.quotas.models import GpuQuota
    from rlstudio.runs.services import run_create

    alice = make_user("alice", staff=True)
    model = register_model(alice)
    GpuQuota.objects.create(user=alice, max_gpus=0, gpu_hours_per_month=0, max_concurrent_runs=0)
    page = page_as(alice, bypass_csp=False)
    console = _watch(page)

    # The upload page's drop zone, the upload through the request gate, the dataset page's histogram.
    page.goto("/datasets/upload/")
    page.fill("input[name=name]", "csp data")
    page.select_option("select[name=preset]", "gsm8k")
    page.evaluate("""(text) => {
        const dt = new DataTransfer();
        dt.items.add(new File([text], "csp.jsonl", {type: "application/json"}));
        document.getElementById("dropzone").dispatchEvent(
            new DragEvent("drop", {dataTransfer: dt, bubbles: true, cancelable: true}));
    }""", ROWS)
    page.click("#upload-form button[type=submit]")
    page.wait_for_url(re.compile(r".*/datasets/\d+/$"), timeout=60_000)
    page.wait_for_selector("#dataset-status[data-status=ready]", timeout=90_000)  # the nonce'd reload
    page.wait_for_load_state("load")
    ds = Dataset.objects.get(owner=alice)
    if page.locator("#histogram-data").count():
        page.wait_for_selector(".js-plotly-plot .main-svg", timeout=20_000)

    # The live run page: plotly charts from stored metrics, then a live one over the WebSocket.
    run, token = run_create(owner=alice, name="csp-run", dataset=ds, model=model,
                            config={"trainer": {"total_training_steps": 3}}, gpus=0)
    metrics = [{"seq": s, "type": "metrics", "time": T0 + s,
                "data": {"step": s, "metrics": {"critic/score/mean": 0.1 * s, "actor/pg_loss": -0.01 * s}}}
               for s in (1, 2)]
    assert ingest(run.pk, token, metrics)["accepted"] == 2
    page.goto(f"/runs/{run.pk}/")
    # Locator waits, not wait_for_function: its predicate is eval'd in the page, which the CSP refuses.
    expect(page.locator("#live-conn")).to_have_attribute("data-socket", "open", timeout=20_000)
    page.wait_for_selector(".js-plotly-plot .main-svg", timeout=20_000)
    assert ingest(run.pk, token, [{"seq": 3, "type": "metrics", "time": T0 + 3,
                                   "data": {"step": 3, "metrics": {"critic/score/mean": 0.3}}}])["accepted"] == 1
    page.wait_for_timeout(1000)

    # The runs list's filter (a nonce'd script in base.html submits it on change: no inline handler).
    page.goto("/runs/")
    page.select_option("#id_status", "queued")
    page.wait_for_url(re.compile(r".*status=queued.*"), timeout=10_000)

    # The compare page: its data through json_script, its charts and controls from run_compare.js.
    page.goto(f"/runs/compare/?ids={run.pk}")
    page.wait_for_selector(".compare-panel .main-svg", timeout=20_000)
    page.fill("#smoothing", "0.5")
    page.select_option("#metric-add", "actor/pg_loss")
    expect(page.locator(".compare-panel")).to_have_count(2, timeout=20_000)

    # The run page's evaluations card (issue 19): curve, table and matrix from json_script, a cell's
    # transcripts fetched by run_evaluations.js (the rows the reconcile stores from a job's files).
    from rlstudio.evaluations.models import Evaluation, EvaluationSample

    cell = {"n": 2, "correct": 1, "mean_at_k": 0.5, "pass_at_k": 1.0, "maj_at_k": 1.0, "sample": "#### 2"}
    ev = Evaluation.objects.create(
        run=run, owner=alice, dataset=ds, checkpoints=[1], include_base=True, k=2, max_prompts=1,
        sampling={"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_new_tokens": 8, "seed": 0}, status="succeeded",
        results={"checkpoints": [{"key": key, "step": step, "base": key == "base", "mean_at_k": 0.5, "pass_at_k": 1.0,
                                  "maj_at_k": 1.0, "samples": 2, "seconds": 1.0, "samples_per_s": 2.0}
                                 for key, step in (("base", 0), ("1", 1))],
                 "prompts": [{"index": 0, "prompt": "What is 1+1?", "ground_truth": "2",
                              "cells": {"base": cell, "1": cell}}]})
    EvaluationSample.objects.bulk_create([
        EvaluationSample(evaluation=ev, column=col, prompt=0, sample=i, score=float(i), correct=bool(i), answer="2",
                         finish_reason="stop", turns=[{"role": "assistant", "content": "#### 2"}])
        for col in ("base", "1") for i in (0, 1)])
    page.goto(f"/runs/{run.pk}/")
    page.wait_for_selector("#eval-curve .main-svg", timeout=20_000)
    page.locator("#eval-matrix details.eval-cell summary").first.click()
    expect(page.locator("#eval-matrix .eval-sample")).to_have_count(2, timeout=20_000)

    from rlstudio.sweeps.models import Sweep

    sweep = Sweep.objects.create(owner=alice, name="csp sweep", dataset=ds, model=model,
                                 axes=[{"key": "actor_rollout_ref.rollout.n", "values": [2, 4]}])
    from rlstudio.projects.services import project_create
    from rlstudio.runs.services import run_set_project

    project = project_create(owner=alice, name="csp project", description="its runs")
    run_set_project(run=run, by=alice, project_id=project.pk)
    for path in ("/runs/new/", "/datasets/", "/models/", "/accounts/profile/", "/api/v1/docs/", "/admin/",
                 "/admin/accounts/auditevent/", "/alerts/", "/runs/quota/", "/playground/", "/no-such-page/",
                 "/sweeps/", "/sweeps/new/", f"/sweeps/{sweep.pk}/", f"/admin/sweeps/sweep/{sweep.pk}/change/",
                 "/projects/", f"/projects/{project.pk}/", f"/admin/projects/project/{project.pk}/change/"):
        page.goto(path)
        page.wait_for_load_state("load")
    seen = _violations(page, console)
    assert seen == [], "\n".join(seen)

    # Logged out: the login page and its lockout page.
    ctx = browser.new_context(base_url=services["base"])
    try:
        anon = ctx.new_page()
        anon_console = _watch(anon)
        anon.goto("/accounts/login/")
        anon.wait_for_load_state("load")
        seen = _violations(anon, anon_console)
        assert seen == [], "\n".join(seen)
    finally:
        ctx.close()
