"""A user registers a Qwen3- or Llama-3-format model folder, the platform says which family it found,
and a multi-turn tool-calling GRPO run trains on it: API → Celery → Ray job → trainer → ingest, all
real (the cpu_smoke recipe: multi-turn with the calculator tool, 2 steps on the CPU); the exported
policy is registered in the catalog for its owner.
"""
from __future__ import annotations

import json
import time

import pytest
from rest_framework.test import APIClient

from rlstudio.catalog.models import Dataset, ModelAsset
from rlstudio.quotas.models import GpuQuota
from rlstudio.runs.models import Run, RunStatus
from rlstudio.telemetry.models import Sample
from tests.e2e.test_run_lifecycle import _gsm8k_rows, _wait
from tests.fixtures import families

S = RunStatus
pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def family_assets(tmp_path_factory):
    root = tmp_path_factory.mktemp("family-run-assets")
    data = root / "gsm8k-train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in _gsm8k_rows(8)), encoding="utf-8")
    return {"root": root, "data": str(data),
            "models": {f: families.build(f, root / f.replace(".", "")) for f in ("qwen3", "llama3")}}


@pytest.mark.parametrize("family,parser", [("qwen3", "qwen25"), ("llama3", "llama3")])
def test_a_family_model_is_detected_and_a_tool_calling_run_trains_on_it(
        family, parser, family_assets, celery_worker, ray_head, settings, transactional_db):
    from django.contrib.auth import get_user_model

    settings.RLSTUDIO_MODEL_ROOTS = [str(family_assets["root"])]
    settings.RAY_ADDRESS = settings.RAY_DASHBOARD_URL = ray_head
    user = get_user_model().objects.create_user(username=f"u-{family}", password="pw-for-tests-1")
    GpuQuota.objects.create(user=user, max_gpus=0, gpu_hours_per_month=0, max_concurrent_runs=5)
    dataset = Dataset.objects.create(owner=user, name="gsm8k-8", file_path=family_assets["data"], sha256="0" * 64,
                                     status="ready", format="jsonl")
    api = APIClient()
    api.force_authenticate(user)

    resp = api.post("/api/v1/models/", {"path": str(family_assets["models"][family]), "name": family}, format="json")
    assert resp.status_code == 201, resp.json()
    model = resp.json()
    assert model["chat_family"] == family and model["tool_parser"] == parser

    body = {"name": f"{family}-tools", "dataset": dataset.pk, "model": model["id"], "preset": "cpu_smoke",
            "gpus": 0, "overrides": {"trainer.total_training_steps": 2, "trainer.export_hf": True}}
    resp = api.post("/api/v1/runs/", body, format="json")
    assert resp.status_code == 201, resp.content
    run_id = resp.json()["id"]
    assert resp.json()["config"]["actor_rollout_ref"]["rollout"]["multi_turn"]["format"] == parser
    run = _wait(run_id, lambda r: r.is_terminal, timeout=240, what="a terminal state")
    assert run.status == S.SUCCEEDED, run.error
    assert run.step == 2 and run.checkpoint_path.endswith("global_step_2")
    # The transcripts came through the ingest API, in the family's format, tools offered.
    samples = list(Sample.objects.filter(run_id=run_id))
    assert samples, "no sample reported"
    first = samples[0].transcript
    assert first["messages"][0]["role"] in ("system", "user")
    assert any(m["role"] == "assistant" for m in first["messages"])
    assert Run.objects.get(pk=run_id).config["actor_rollout_ref"]["model"]["path"] == str(
        family_assets["models"][family].resolve())
    # The exported policy is in the catalog, the owner's, in the same chat format (the worker's task).
    deadline = time.monotonic() + 60
    while not (exported := ModelAsset.objects.filter(source_run_id=run_id).first()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert exported is not None and exported.owner == user and exported.source == "run_export"
    assert exported.chat_family == family and exported.tool_parser == parser
