"""Journey 5: a second user sees none of the first user's things: not in the lists, 404 on every page
and API of them, and the run's websocket closes with 4403 (a real Chromium, the real server)."""
from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.django_db(transaction=True)]
T0 = 1_764_440_000.0


def _sample(seq: int) -> dict:
    return {"seq": seq, "type": "sample", "time": T0 + seq, "data": {
        "step": 1, "uid": "p0", "index": 0, "reward": 1.0, "advantage": 0.5, "response_length": 2,
        "num_turns": 1, "finish_reason": "stop", "tool_calls": 0,
        "messages": [{"role": "user", "content": "2+3?"}, {"role": "assistant", "content": "#### 5"}],
        "token_view": {"ids": [5, 6], "pieces": ["#", "5"], "loss_mask": [1, 1], "logprobs": [-0.1, -2.0],
                       "ref_logprobs": None, "advantages": [0.5, 0.5]}}}


WS_CLOSE_CODE = """(path) => new Promise((resolve) => {
    const ws = new WebSocket(`ws://${location.host}${path}`);
    let messages = 0;
    ws.onmessage = () => { messages += 1; };
    ws.onclose = (ev) => resolve({code: ev.code, messages});
    setTimeout(() => resolve({code: null, messages}), 10000);
})"""


def test_a_second_user_sees_none_of_the_first_users_things(page_as, make_user, register_model, ingest, ui,
                                                          gsm8k_test_file, tmp_path):
    from rlstudio.catalog.models import Dataset
    from rlstudio.quotas.models import GpuQuota
    from rlstudio.runs.models import Run
    from rlstudio.runs.services import run_create
    from rlstudio.telemetry.models import Sample

    alice, mallory = make_user("alice"), make_user("mallory")
    model = register_model(alice, "alice-secret-model")
    GpuQuota.objects.create(user=alice, max_gpus=0, gpu_hours_per_month=0, max_concurrent_runs=0)
    small = tmp_path / "gsm8k-8.jsonl"
    small.write_text("".join(gsm8k_test_file.read_text(encoding="utf-8").splitlines(keepends=True)[:8]))

    page = page_as(alice)
    ds_id = ui.upload_dataset(page, small, name="alice-secret-data")
    run, token = run_create(owner=alice, name="alice-secret-run", dataset=Dataset.objects.get(pk=ds_id),
                            model=model, config={"trainer": {"total_training_steps": 3}}, gpus=0)
    assert ingest(run.pk, token, [_sample(1)])["accepted"] == 1
    sample = Sample.objects.get(run=run)
    pages = [f"/runs/{run.pk}/", f"/runs/{run.pk}/samples/{sample.pk}/", f"/runs/{run.pk}/groups/?step=1&uid=p0",
             f"/runs/{run.pk}/prompts/?uid=p0", f"/datasets/{ds_id}/"]
    apis = [f"/api/v1/runs/{run.pk}/", f"/api/v1/runs/{run.pk}/samples/", f"/api/v1/runs/{run.pk}/samples/{sample.pk}/",
            f"/api/v1/runs/{run.pk}/metrics/",
            f"/api/v1/datasets/{ds_id}/", f"/api/v1/datasets/{ds_id}/rows/", f"/api/v1/models/{model.pk}/"]
    # The owner sees every one of them (so the 404s below are about ownership, not broken pages).
    for url in pages:
        assert page.goto(url).status == 200, url
    for url in apis:
        assert page.request.get(url).status == 200, url
    assert page.evaluate(WS_CLOSE_CODE, f"/ws/runs/{run.pk}/")["code"] is None  # still open after 10 s

    other = page_as(mallory)
    for url, secret in (("/runs/", "alice-secret-run"), ("/datasets/", "alice-secret-data"),
                        ("/models/", "alice-secret-model"), ("/runs/quota/", "alice-secret-run")):
        other.goto(url)
        assert secret not in other.content(), url
    other.goto("/runs/")
    ui.shot(other, "isolation-empty-runs")
    for url in pages:
        resp = other.goto(url)
        assert resp.status == 404, (url, resp.status)
        assert "alice-secret" not in other.content(), url
    ui.shot(other, "isolation-404")
    for url in apis:
        resp = other.request.get(url)
        assert resp.status == 404, (url, resp.status)
        assert json.loads(resp.text())["error"]["code"] == "not_found", url
    # Page controls refuse too (a real CSRF token from mallory's own session).
    other.goto("/runs/")
    csrf = other.locator("input[name=csrfmiddlewaretoken]").first.get_attribute("value")
    for verb in ("stop", "resume", "clone"):
        resp = other.request.post(f"/runs/{run.pk}/{verb}/", form={"csrfmiddlewaretoken": csrf},
                                  headers={"Referer": other.url})
        assert resp.status == 404, (verb, resp.status)
    closed = other.evaluate(WS_CLOSE_CODE, f"/ws/runs/{run.pk}/")
    assert closed == {"code": 4403, "messages": 0}, closed
    run.refresh_from_db()
    assert run.status == "queued" and not Run.objects.filter(parent=run).exists()
