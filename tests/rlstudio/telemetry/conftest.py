"""Fixtures of the telemetry tests."""
import json

import pytest
from django.test import Client, TestCase

from rlstudio.runs.services import run_create

T0 = 1_764_440_000.0


@pytest.fixture
def run_with_metrics(make_dataset, make_model):
    """make(owner, [(step, {metric: value}), ...], name=...): a run whose metric rows came in through
    the trainer's ingest (one event a step, seconds apart from T0), returned."""

    def make(owner, metrics_by_step, *, name: str = "metrics-run"):
        run, token = run_create(owner=owner, name=name, dataset=make_dataset(owner), model=make_model(owner),
                                config={}, gpus=0)
        events = [{"seq": i + 1, "type": "metrics", "time": T0 + i, "data": {"step": step, "metrics": m}}
                  for i, (step, m) in enumerate(metrics_by_step)]
        with TestCase.captureOnCommitCallbacks(execute=True):
            r = Client().post(f"/api/v1/runs/{run.pk}/events/", json.dumps({"events": events}),
                              content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
        assert r.json()["accepted"] == len(metrics_by_step)
        return run

    return make


@pytest.fixture
def alice_client(alice):
    """A test Client signed in as alice."""
    c = Client()
    c.force_login(alice)
    return c
