"""Journey of issue 19 (item 2) in a real Chromium against the running platform: on a run's page the
owner evaluates the run's base model and its checkpoint (the demo task: `demo_eval_run`, the warm start
and 10 GRPO steps from it); the evaluation runs as a Ray job through the real worker and reconcile; the
card then shows the curve, the table (base model and step 10) and the prompts x checkpoints matrix; a
cell opens its k transcripts, model text shown as text (a prompt that looks like HTML stays text).
Screenshots 17-evaluation and 18-evaluation-transcripts (docs/user-guide.md).
"""
from __future__ import annotations

import json
import shutil

import pytest

from tests.conftest import DEMO_GRPO_STEPS, poll_until

# demo_eval_run takes about 65 s on 2 quiet cores and over 10 minutes at load 11: more than the default 600 s.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(1800)]

HTML = "<img src=x onerror=\"document.title='pwned'\"> "
PROMPTS, K = 16, 4


def test_evaluate_the_base_model_and_a_checkpoint_then_open_a_cells_transcripts(
        demo_eval_run, page_as, make_user, services, tmp_path, shot):
    from rlstudio.catalog.models import Dataset, ModelAsset
    from rlstudio.evaluations.models import Evaluation
    from rlstudio.runs.models import Run
    from rlstudio.runs.services import run_create

    rows = [json.loads(line) for line in demo_eval_run["test"].read_text().splitlines()]
    rows[0]["prompt"][-1]["content"] = HTML + rows[0]["prompt"][-1]["content"]
    held_out = tmp_path / "held_out.jsonl"
    held_out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    alice = make_user("alice")
    dataset = Dataset.objects.create(owner=alice, name="arith held-out", file_path=str(held_out), sha256="e1" * 32,
                                     status="ready")
    model = ModelAsset.objects.create(owner=alice, name="demo warm start", path=str(demo_eval_run["warm"]))
    run, _token = run_create(owner=alice, name="demo-grpo", dataset=dataset, model=model, config={}, gpus=0)
    # A finished run as the platform records one: submitted, its frozen spec naming its own folder (where
    # every process, the web server's and the worker's, finds its checkpoints), which holds the checkpoint.
    folder = tmp_path / "runs" / str(run.pk)
    shutil.copytree(demo_eval_run["step"], folder / f"global_step_{DEMO_GRPO_STEPS}")
    config = json.loads(json.dumps(demo_eval_run["config"]))
    config["trainer"]["default_local_dir"] = str(folder)
    Run.objects.filter(pk=run.pk).update(config=config, status="succeeded", step=DEMO_GRPO_STEPS,
                                         total_steps=DEMO_GRPO_STEPS, ray_submission_id=f"rlstudio-run-{run.pk}-done")

    page = page_as(alice)
    page.goto(f"/runs/{run.pk}/")
    form = page.locator("#eval-form")
    form.locator("input[name=include_base]").check()
    form.locator(f"input[name=checkpoints][value='{DEMO_GRPO_STEPS}']").check()
    form.locator("select[name=dataset]").select_option(str(dataset.pk))
    form.locator("input[name=k]").fill(str(K))
    form.locator("input[name=max_prompts]").fill(str(PROMPTS))
    form.locator("input[name=max_new_tokens]").fill("64")
    form.locator("button[type=submit]").click()
    page.wait_for_function("document.getElementById('eval-form-msg').textContent.includes('evaluation #')")
    assert "running" in page.locator("#eval-form-msg").inner_text()
    ev = Evaluation.objects.get(run=run)
    poll_until(lambda: Evaluation.objects.get(pk=ev.pk).status in ("succeeded", "failed"), timeout=300,
               what="the evaluation's Ray job to finish")
    ev.refresh_from_db()
    assert ev.status == "succeeded", ev.error
    assert ev.ray_submission_id.startswith(f"rlstudio-eval-{ev.pk}-")
    # the line beside the button follows the evaluation's row, polled while it was running
    page.wait_for_function("document.getElementById('eval-form-msg').textContent.includes('has ended')",
                           timeout=30_000)
    assert page.locator("#eval-form-msg").inner_text() == f"evaluation #{ev.pk} has ended: see the list below"

    page.reload()
    page.wait_for_selector("#eval-curve .main-svg")
    figures = page.locator("#eval-figures tbody tr")
    assert figures.count() == 2
    assert figures.nth(0).locator("td").first.inner_text() == "base model"
    assert figures.nth(1).locator("td").first.inner_text() == f"step {DEMO_GRPO_STEPS}"
    heads = page.locator("#eval-matrix thead th").all_inner_texts()
    assert heads[2].startswith("base model") and heads[3].startswith(f"step {DEMO_GRPO_STEPS}")
    assert page.locator("#eval-matrix tbody tr").count() == PROMPTS
    assert HTML.strip() in page.locator("#eval-matrix tbody tr").first.locator("td").first.inner_text()
    page.evaluate("document.getElementById('eval-curve').scrollIntoView()")
    shot(page, "17-evaluation")

    cell = page.locator("#eval-matrix tbody tr").nth(1).locator("details.eval-cell").nth(1)
    cell.locator("summary").click()
    cell.locator(".eval-sample").nth(K - 1).wait_for()
    assert cell.locator(".eval-sample").count() == K
    assert cell.locator("pre.sample-text").first.inner_text().startswith("assistant: ")
    page.evaluate("document.getElementById('eval-matrix').scrollIntoView()")
    shot(page, "18-evaluation-transcripts")
    assert page.locator("#eval-matrix img").count() == 0 and page.title() != "pwned"
    # A transcript's tool calls as the sample page shows them: the tool's name, its arguments as JSON
    from rlstudio.evaluations.models import EvaluationSample

    called = next((s for s in EvaluationSample.objects.filter(evaluation=ev).order_by("prompt", "column", "sample")
                   if any(t.get("tool_calls") for t in s.turns)), None)
    if called is not None:  # the warm model calls the calculator in some of its episodes
        call = next(c for t in called.turns for c in t.get("tool_calls") or [])
        other = page.locator("#eval-matrix tbody tr").nth(called.prompt).locator("details.eval-cell").nth(
            ev.columns.index(called.column))
        if other.get_attribute("open") is None:  # (it may be the cell opened above)
            other.locator("summary").click()
        other.locator(".eval-sample").nth(K - 1).wait_for()
        assert call["name"] in other.locator(".toolcall code").all_inner_texts()
        assert "[{" not in " ".join(other.locator("pre.sample-text").all_inner_texts())  # no raw JSON list

    # A finished evaluation is deleted from its row (after the confirm dialog), transcripts and all.
    page.on("dialog", lambda dialog: dialog.accept())
    page.locator(f"#eval-list button.eval-delete[data-id='{ev.pk}']").click()
    page.wait_for_function(f"!document.querySelector(\"#eval-list button.eval-delete[data-id='{ev.pk}']\")")
    assert not Evaluation.objects.filter(pk=ev.pk).exists()
