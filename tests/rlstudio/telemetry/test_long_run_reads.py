"""Reads of a long run whose cost must not follow its size (bench/long_run.py measures them at 3,000
steps and 300,000 samples): the shape of their SQL and their query counts, at two sizes where it matters."""
import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from rlstudio.runs.services import run_create
from rlstudio.telemetry.models import Sample
from rlstudio.telemetry.services import events_ingest

pytestmark = pytest.mark.django_db
T0 = 1_764_440_000.0


@pytest.fixture(autouse=True)
def _rollout_dir(settings, tmp_path):
    settings.RLSTUDIO_ROLLOUT_DIR = str(tmp_path / "runs")


def _sample(seq: int, step: int) -> dict:
    return {"seq": seq, "type": "sample", "time": T0 + seq, "data": {
        "step": step, "uid": f"u{step}-{seq % 3}", "index": seq % 4, "reward": float(seq % 3 == 0),
        "advantage": 0.0, "response_length": seq % 7, "num_turns": 1, "finish_reason": "stop",
        "messages": [{"role": "user", "content": f"q{seq}"}, {"role": "assistant", "content": "a"}]}}


@pytest.fixture
def long_run(alice, make_dataset, make_model):
    """make(steps, samples_per_step, logs_every=...): a run with that many sample, memory and log events."""

    def make(steps: int, per_step: int, *, logs_every: int = 1):
        run, _ = run_create(owner=alice, name=f"long-{steps}", dataset=make_dataset(alice),
                            model=make_model(alice), config={}, gpus=0)
        events, seq = [], 0
        for step in range(1, steps + 1):
            for _ in range(per_step):
                seq += 1
                events.append(_sample(seq, step))
            for phase in ("rollout", "update"):
                seq += 1
                events.append({"seq": seq, "type": "memory", "time": T0 + seq,
                               "data": {"step": step, "phase": phase, "device": "cpu", "rss": seq}})
            if step % logs_every == 0:
                seq += 1
                events.append({"seq": seq, "type": "log", "time": T0 + seq,
                               "data": {"level": "info", "message": f"step {step}"}})
        assert events_ingest(run=run, raw_events=events).accepted == len(events)
        return run

    return make


@pytest.fixture
def alice_client(alice):
    c = Client()
    c.force_login(alice)
    return c


@pytest.mark.parametrize("order", ["seq", "-seq"])
@pytest.mark.parametrize("query", ["", "&min_reward=1"])
def test_samples_pages_in_seq_order_are_found_by_seq_alone(long_run, alice_client, order, query):
    """A page in seq order is the same rows as the plain slice, at any offset; its OFFSET query reads
    only seq (so PostgreSQL answers it from the (run, seq) index), and a deep page costs the queries
    of the first."""
    run = long_run(12, 10)
    expected = list(Sample.objects.filter(run=run, **({"reward__gte": 1} if query else {}))
                    .order_by(order).values_list("seq", flat=True))
    counts = []
    for offset in (0, 7, len(expected) - 5):
        with CaptureQueriesContext(connection) as ctx:
            r = alice_client.get(f"/api/v1/runs/{run.pk}/samples/?order={order}&limit=20&offset={offset}{query}")
        assert r.status_code == 200
        body = r.json()
        assert body["count"] == len(expected)
        assert [s["seq"] for s in body["results"]] == expected[offset:offset + 20]
        paged = [q["sql"] for q in ctx.captured_queries if "OFFSET" in q["sql"] or "LIMIT 20" in q["sql"]]
        assert len(paged) == 1 and paged[0].startswith('SELECT "telemetry_sample"."seq" AS "seq" FROM'), paged
        assert '"telemetry_sample"."id"' not in paged[0].split("FROM", 1)[1]  # no tie on id: seq is unique
        counts.append(len(ctx.captured_queries))
    assert len(set(counts)) == 1, counts


def test_samples_pages_in_other_orders_keep_their_tie_on_seq(long_run, alice_client):
    run = long_run(6, 10)
    expected = list(Sample.objects.filter(run=run).order_by("-reward", "seq").values_list("seq", flat=True))
    r = alice_client.get(f"/api/v1/runs/{run.pk}/samples/?order=-reward&limit=25&offset=10")
    assert [s["seq"] for s in r.json()["results"]] == expected[10:35]
