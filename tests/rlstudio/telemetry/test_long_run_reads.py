"""Reads of a long run whose cost must not follow its size (bench/long_run.py measures them at 3,000
steps and 300,000 samples): the shape of their SQL and their query counts, at two sizes where it matters."""
import pytest
from django.db import connection
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
        "advantage": 0.0, "response_length": seq % 7, "num_turns": 1,
        "finish_reason": "length" if seq % 5 == 0 else "stop",
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


def _plan(sql: str, params) -> str:
    """PostgreSQL's plan of a query with sequential scans and whole sorts ruled out (a test's tables are
    tiny, where both are cheapest: the question is whether an index serves the query's filter and order,
    as on a long run's tables; an incremental sort of an index's order is allowed)."""
    knobs = ("enable_seqscan", "enable_sort")
    with connection.cursor() as cur:
        cur.execute("ANALYZE telemetry_sample")  # the planner's estimates from the rows the test made
        for knob in knobs:
            cur.execute(f"SET LOCAL {knob} = off")
        cur.execute("EXPLAIN " + sql, params)
        plan = "\n".join(row[0] for row in cur.fetchall())
        for knob in knobs:
            cur.execute(f"SET LOCAL {knob} = on")
    return plan


def _captured(fn, needle: str) -> tuple[str, tuple]:
    """The SQL and parameters of the one query `fn()` runs that contains `needle`."""
    from django.db import connection as conn

    seen = []
    def wrapper(execute, sql, params, many, context):
        seen.append((sql, params))
        return execute(sql, params, many, context)
    with conn.execute_wrapper(wrapper):
        fn()
    found = [(sql, params) for sql, params in seen if needle in sql]
    assert len(found) == 1, seen
    return found[0]


def test_log_tail_reads_the_partial_index_of_log_events(long_run, alice):
    """The log tail (run page, logs API) is served by runevent_run_log_idx, not a backward scan of every
    event of the run filtered by type."""
    from rlstudio.telemetry import selectors as sel

    run = long_run(20, 10, logs_every=5)
    lines = []
    sql, params = _captured(lambda: lines.extend(sel.logs_tail(run=run, user=alice, tail=3)), "telemetry_runevent")
    assert [x["message"] for x in lines] == ["step 10", "step 15", "step 20"]
    assert "runevent_run_log_idx" in _plan(sql, params)


@pytest.mark.parametrize("order,index", [("-response_length", "sample_run_length_idx"),
                                         ("advantage", "sample_run_advantage_idx")])
def test_samples_sorted_by_length_or_advantage_read_an_index(long_run, order, index):
    from rlstudio.telemetry import selectors as sel

    run = long_run(10, 10)
    qs = sel.samples_for(run=run, flt=sel.SampleFilter(order=order))[:50]
    sql, params = qs.query.sql_with_params()
    assert index in _plan(sql, params)


def test_memory_api_answers_the_latest_points_up_to_its_limit(long_run, alice_client):
    run = long_run(30, 1)  # 60 memory points
    base = f"/api/v1/runs/{run.pk}/memory/"
    whole = alice_client.get(base).json()
    assert len(whole["points"]) == 60 and whole["truncated"] is False
    seqs = [p["seq"] for p in whole["points"]]
    assert seqs == sorted(seqs)
    r = alice_client.get(base, {"limit": 7}).json()
    assert [p["seq"] for p in r["points"]] == seqs[-7:] and r["truncated"] is True
    assert alice_client.get(base, {"limit": 60}).json()["truncated"] is False
    for bad in ("0", "50001", "x"):
        assert alice_client.get(base, {"limit": bad}).status_code == 400


def test_run_page_holds_at_most_the_latest_memory_points(long_run, alice_client, monkeypatch):
    """The page's memory timeline does not grow with the run: at 10 and at 40 steps it holds the latest
    MEMORY_POINTS_DEFAULT points (here 12) and says earlier ones were left out."""
    import json as _json

    from rlstudio.telemetry import selectors as sel

    monkeypatch.setattr(sel, "MEMORY_POINTS_DEFAULT", 12)
    for steps in (10, 40):
        run = long_run(steps, 1)
        r = alice_client.get(f"/runs/{run.pk}/")
        live = _json.loads(r.content.decode().split('id="live-data" type="application/json">', 1)[1]
                           .split("</script>", 1)[0])
        points = [dict(zip(live["memory"]["fields"], row, strict=True)) for row in live["memory"]["rows"]]
        assert len(points) == 12 and points[-1]["step"] == steps
        assert points == [{k: p[k] for k in live["memory"]["fields"]}
                          for p in alice_client.get(f"/api/v1/runs/{run.pk}/memory/?limit=12").json()["points"]]
        assert b'id="memory-truncated"' in r.content


def test_metric_names_are_kept_by_the_ingest(alice, alice_client, run_with_metrics):
    """The compare API and the metrics CSV name every metric of the runs from the names the ingest keeps
    (RunIngestCount.metric_names), reading no row's metrics; a new metric is named at once, also one
    merged into an old step."""
    from rlstudio.telemetry.models import RunIngestCount
    from rlstudio.telemetry.services import events_ingest as ingest

    a = run_with_metrics(alice, [(s, {"critic/score/mean": 0.1 * s, "actor/pg_loss": 1.0}) for s in range(1, 9)],
                         name="a")
    b = run_with_metrics(alice, [(s, {"critic/score/mean": 0.2, "perf/throughput": 3.0}) for s in range(1, 5)],
                         name="b")
    assert RunIngestCount.objects.get(run=a).metric_names == ["actor/pg_loss", "critic/score/mean"]
    url = f"/api/v1/runs/compare/?ids={a.pk},{b.pk}"

    def expansions(path):
        with CaptureQueriesContext(connection) as ctx:
            r = alice_client.get(path)
        assert r.status_code == 200
        body = r.json() if path.startswith("/api/v1/runs/compare") else b"".join(r.streaming_content).decode()
        return body, sum("jsonb_object_keys" in q["sql"] for q in ctx.captured_queries)

    body, n = expansions(url)
    assert n == 0 and body["metrics"] == ["actor/pg_loss", "critic/score/mean", "perf/throughput"]
    csv, n = expansions(f"/api/v1/runs/{a.pk}/metrics.csv")
    assert n == 0 and csv.splitlines()[0] == "step,time,actor/pg_loss,critic/score/mean"
    ingest(run=b, raw_events=[{"seq": 100, "type": "metrics", "time": T0 + 100,
                               "data": {"step": 9, "metrics": {"actor/entropy": 0.5}}}])
    body, n = expansions(url)
    assert n == 0 and "actor/entropy" in body["metrics"]
    ingest(run=a, raw_events=[{"seq": 100, "type": "metrics", "time": T0 + 3.5,
                               "data": {"step": 2, "metrics": {"actor/kl_loss": 0.5}}}])
    assert "actor/kl_loss" in expansions(url)[0]["metrics"]


def test_metric_names_of_a_run_stored_before_they_were_kept(alice, alice_client, run_with_metrics):
    """A run with no counter row (stored before the counters): its rows' keys are expanded, once per
    state of its rows; its next batch makes the counter row with the names of what was stored before;
    the migration's backfill gives a counted run the names of its rows."""
    import importlib

    from rlstudio.telemetry.models import RunIngestCount
    from rlstudio.telemetry.services import events_ingest as ingest

    old = run_with_metrics(alice, [(s, {"critic/score/mean": 0.1, "é/ü": 1.0, "Z": 2.0}) for s in range(1, 4)],
                           name="old")
    RunIngestCount.objects.filter(run=old).delete()
    url = f"/api/v1/runs/compare/?ids={old.pk}"

    def expansions():
        with CaptureQueriesContext(connection) as ctx:
            body = alice_client.get(url).json()
        return body["metrics"], sum("jsonb_object_keys" in q["sql"] for q in ctx.captured_queries)

    assert expansions() == (["Z", "critic/score/mean", "é/ü"], 1)
    assert expansions()[1] == 0  # cached while its rows do not change
    ingest(run=old, raw_events=[{"seq": 50, "type": "metrics", "time": T0 + 50,
                                 "data": {"step": 9, "metrics": {"actor/entropy": 0.5}}}])
    assert RunIngestCount.objects.get(run=old).metric_names == ["Z", "actor/entropy", "critic/score/mean", "é/ü"]
    assert expansions() == (["Z", "actor/entropy", "critic/score/mean", "é/ü"], 0)

    # a counter row whose names are not known (null: made before they were kept) is filled by the
    # migration's backfill, or else by the run's next batch, from the rows
    migration = importlib.import_module("rlstudio.telemetry.migrations.0009_run_metric_names")
    RunIngestCount.objects.filter(run=old).update(metric_names=None)
    with connection.cursor() as cur:
        cur.execute(migration.BACKFILL_ONE, [old.pk])
    assert RunIngestCount.objects.get(run=old).metric_names == ["Z", "actor/entropy", "critic/score/mean", "é/ü"]
    RunIngestCount.objects.filter(run=old).update(metric_names=None)
    assert expansions()[1] == 1  # not known: read from the rows (and cached)
    ingest(run=old, raw_events=[{"seq": 51, "type": "heartbeat", "time": T0 + 51, "data": {"step": 9}}])
    assert RunIngestCount.objects.get(run=old).metric_names == ["Z", "actor/entropy", "critic/score/mean", "é/ü"]


def test_script_json_is_json_script_through_orjson():
    """The run page's data element: the same JSON value and escaping as Django's json_script."""
    import json as _json

    from django.utils.html import json_script

    from rlstudio.telemetry.codec import script_json

    value = {"metrics": [{"step": 1, "metrics": {"a/b": 0.5, "big": 2**40}}], "name": "</script><b>&amp; é",
             "none": None, "ok": True}
    ours, django = str(script_json(value, "live-data")), str(json_script(value, "live-data"))
    assert ours.count("</script>") == 1 and ours.endswith("</script>") and "<b>" not in ours
    body = lambda html: _json.loads(html.split(">", 1)[1].rsplit("</script>", 1)[0])  # noqa: E731
    assert body(ours) == body(django) == value


def test_samples_filtered_by_finish_reason_read_an_index(long_run, alice_client):
    """The finish_reason filter's count and its page (here with a reward range) are served by
    sample_run_finish_idx, not by reading every sample row of the run."""
    run = long_run(10, 10)
    with CaptureQueriesContext(connection) as ctx:
        r = alice_client.get(f"/api/v1/runs/{run.pk}/samples/?finish_reason=length&min_reward=1&order=-reward")
    assert r.status_code == 200
    filtered = [q["sql"] for q in ctx.captured_queries if "finish_reason\" = 'length'" in q["sql"]]
    assert len(filtered) == 2 and any(sql.startswith("SELECT COUNT(*)") for sql in filtered)
    for sql in filtered:
        assert "sample_run_finish_idx" in _plan(sql, None), sql


@pytest.mark.parametrize("query,needle,index", [
    ("has_tool_call=true", "has_tool_call", "sample_run_tool_idx"),
    ("uid=g-3-0", "\"uid\" = 'g-3-0'", "sample_run_uid_idx"),
])
def test_samples_filtered_by_tool_call_or_uid_read_an_index(long_run, alice_client, query, needle, index):
    """The "has a tool call" filter and ?uid= across steps: count and page each served by an index."""
    from rlstudio.telemetry.models import Sample

    run = long_run(10, 10)
    Sample.objects.filter(run=run, seq__lt=5).update(has_tool_call=True, uid="g-3-0")  # one group
    with CaptureQueriesContext(connection) as ctx:
        r = alice_client.get(f"/api/v1/runs/{run.pk}/samples/?{query}")
    assert r.status_code == 200 and r.json()["count"] == Sample.objects.filter(run=run, seq__lt=5).count() > 0
    filtered = [q["sql"] for q in ctx.captured_queries if needle in q["sql"]]
    assert len(filtered) >= 2 and any(sql.startswith("SELECT COUNT(*)") for sql in filtered), filtered
    for sql in filtered:
        assert index in _plan(sql, None), sql


def test_compare_reads_each_runs_rows_once_per_state(alice, alice_client, run_with_metrics):
    """The compare API's names, held-out figures and series read every stored row of each run; they are
    kept per run while its rows do not change, so a second request reads no row's metrics, and a new step
    of one run is read (that run's alone) at the next request."""
    from rlstudio.telemetry.services import events_ingest as ingest

    val = "val-core/arith/reward/mean@1"
    a = run_with_metrics(alice, [(s, {"critic/score/mean": 0.1 * s, **({val: 0.05 * s} if s % 2 == 0 else {})})
                                 for s in range(1, 9)], name="a")
    b = run_with_metrics(alice, [(s, {"critic/score/mean": 0.2, val: 0.3}) for s in range(1, 5)], name="b")
    url = f"/api/v1/runs/compare/?ids={a.pk},{b.pk}"

    def get():
        with CaptureQueriesContext(connection) as ctx:
            body = alice_client.get(url).json()
        reads = [q["sql"] for q in ctx.captured_queries if "telemetry_metricrow" in q["sql"]]
        row_reads = [sql for sql in reads if "jsonb_object_keys" in sql or "metrics ->" in sql]
        return body, row_reads, len(ctx.captured_queries)

    first, reads, n_first = get()
    assert reads and first["held_out_metric"] == val
    assert first["runs"][0]["held_out"][val] == {"best": 0.4, "best_step": 8, "last": 0.4, "last_step": 8}
    again, reads, n_again = get()
    assert reads == [] and n_again < n_first
    assert again["series"] == first["series"] and again["runs"] == first["runs"]
    ingest(run=b, raw_events=[{"seq": 100, "type": "metrics", "time": T0 + 100,
                               "data": {"step": 5, "metrics": {"critic/score/mean": 0.9, val: 0.95}}}])
    third, reads, _ = get()
    assert reads and all(f"ARRAY[{b.pk}]" in sql or f"IN ({b.pk})" in sql for sql in reads), reads
    series = {s["run"]: s for s in third["series"]["critic/score/mean"]}
    assert series[b.pk]["step"][-1] == 5 and series[b.pk]["value"][-1] == 0.9
    assert series[a.pk] == {s["run"]: s for s in first["series"]["critic/score/mean"]}[a.pk]
    assert third["runs"][1]["held_out"][val]["best"] == 0.95


def test_metrics_page_reads_the_same_values_as_the_json_field(alice, run_with_metrics):
    """metrics_page reads the metrics as JSON text through orjson: the same numbers as the model's field
    gives, as doubles (what a browser reads either way: PostgreSQL writes 1.5e300 out in 301 digits,
    which json reads as an int and orjson as the float it was sent as)."""
    from rlstudio.telemetry import selectors as sel
    from rlstudio.telemetry.models import MetricRow

    values = {"a": 0.1, "b": 1e-7, "c": -3, "d": 2**70, "e": 1.5e300, "f/g h": 12345.678901234567}
    run = run_with_metrics(alice, [(1, values), (2, {"a": 0.2})])
    page, more = sel.metrics_page(run=run, limit=1)
    as_doubles = lambda m: {k: float(v) for k, v in m.items()}  # noqa: E731
    stored = MetricRow.objects.get(run=run, step=1).metrics
    assert more == 1 and as_doubles(page[0]["metrics"]) == as_doubles(stored) == as_doubles(values)
    assert {k: type(v) for k, v in page[0]["metrics"].items() if k not in "de"} == {
        k: type(v) for k, v in stored.items() if k not in "de"}
    assert sel.metrics_page(run=run, after_step=1)[0][0]["metrics"] == {"a": 0.2}
