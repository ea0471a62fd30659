"""The `rlstudio` command-line client end to end: its main() in this process, Django's real server
(`live_server`) on the test database, real API tokens, runs made by the runs' services and metrics
reported through the real ingest. Nothing trains: a launch is checked by the run it creates."""
from __future__ import annotations

import csv
import io
import json
import os
import stat

import pytest

from rlstudio.catalog.models import Dataset
from rlstudio.runs.models import Run, RunConfig, RunStatus
from rlstudio_cli import client as cli_client
from rlstudio_cli import common as cli_common
from rlstudio_cli import runs as cli_runs
from tests.cli.conftest import T0, metric_events


def test_login_checks_the_token_and_saves_it_readable_by_its_owner_only(server, alice, token_of, cli,
                                                                        _isolated_config):
    key = token_of(alice)
    refused = cli("login", "--url", server, "--token", key + "x")
    assert refused.code == 2, refused
    assert "refused this token" in refused.err and "nothing was saved" in refused.err
    assert not _isolated_config.exists()

    done = cli("login", "--url", server + "/api/v1/", "--token", key)
    assert done.code == 0, done
    assert key not in done.out + done.err
    assert stat.S_IMODE(os.stat(_isolated_config).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(_isolated_config.parent).st_mode) == 0o700
    assert json.loads(_isolated_config.read_text()) == {"url": server, "token": key}  # /api/v1/ dropped

    elsewhere = cli("login", "--url", server + "/accounts/", "--token", key)  # a page's address, not the site's
    assert elsewhere.code == 2 and elsewhere.err.startswith(f"error: url: {server}/accounts has no RL Studio API ("), \
        elsewhere
    assert "nothing was saved" in elsewhere.err and json.loads(_isolated_config.read_text())["url"] == server

    # Later commands need no flag: the saved URL and token are used.
    listed = cli("runs", "list")
    assert listed.code == 0 and listed.out.split()[:3] == ["ID", "NAME", "STATUS"], listed


def test_a_token_from_the_environment_and_a_bad_one_say_how_to_log_in(server, alice, token_of, cli,
                                                                      monkeypatch):
    monkeypatch.setenv("RLSTUDIO_URL", server)
    monkeypatch.setenv("RLSTUDIO_TOKEN", token_of(alice))
    assert cli("runs", "list").code == 0

    bad = cli("--token", "rls_not-a-token", "runs", "list")  # the flag wins over the environment
    assert bad.code == 2 and bad.out == ""
    assert bad.err.startswith("error: ") and "rlstudio login" in bad.err and "rls_not-a-token" not in bad.err


def test_no_server_is_exit_1(cli, tmp_path):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = cli("--url", f"http://127.0.0.1:{port}", "--token", "rls_x", "runs", "list")
    assert r.code == 1 and r.err.startswith(f"error: cannot reach http://127.0.0.1:{port}"), r


def test_runs_list_and_show(as_alice, alice, bob, make_run):
    first, _ = make_run(alice, "first")
    second, _ = make_run(alice, "second")
    make_run(bob, "bobs")  # not alice's: never listed

    r = as_alice("runs", "list")
    assert r.code == 0, r
    lines = r.out.splitlines()
    assert lines[0].split() == ["ID", "NAME", "STATUS", "STEP", "REWARD", "GPUS", "PROJECT", "CREATED"]
    assert [ln.split()[:3] for ln in lines[1:]] == [[str(second.pk), "second", "queued"],
                                                    [str(first.pk), "first", "queued"]]  # newest first
    assert len({ln.index("queued") for ln in lines[1:]}) == 1  # aligned columns

    as_json = as_alice("runs", "list", "--json", "--status", "queued")
    body = json.loads(as_json.out)
    assert body["count"] == 2 and [run["name"] for run in body["results"]] == ["second", "first"]
    assert json.loads(as_alice("runs", "list", "--json", "--status", "running").out)["count"] == 0

    bad_status = as_alice("runs", "list", "--status", "sleeping")
    assert bad_status.code == 2 and bad_status.err.startswith("error: status: unknown status 'sleeping'")

    shown = as_alice("runs", "show", first.pk)
    assert shown.code == 0 and "name:" in shown.out and "first" in shown.out and "queued" in shown.out
    detail = json.loads(as_alice("runs", "show", first.pk, "--json").out)
    assert detail["id"] == first.pk and "config" in detail


def test_another_users_run_is_not_found(as_alice, bob, make_run):
    theirs, _ = make_run(bob, "bobs")
    for argv, where in ((("runs", "show", theirs.pk), f"GET /api/v1/runs/{theirs.pk}/"),
                        (("runs", "stop", theirs.pk), f"POST /api/v1/runs/{theirs.pk}/stop/"),
                        (("runs", "metrics", theirs.pk), f"GET /api/v1/runs/{theirs.pk}/metrics/")):
        r = as_alice(*argv)
        assert r.code == 2 and r.out == "", (argv, r)
        assert r.err.strip() == f"error: Not found. ({where})", (argv, r)  # which request, so which id
    assert Run.objects.get(pk=theirs.pk).status == RunStatus.QUEUED


def test_launch_creates_a_run_and_a_bad_key_is_refused_naming_it(as_alice, alice, make_assets, tmp_path):
    dataset, model = make_assets(alice)
    bad = as_alice("runs", "launch", "--name", "bad", "--dataset", dataset.pk, "--model", model.pk,
                   "--set", "actor_rollout_ref.rollout.nn=4")
    assert bad.code == 2 and bad.out == ""
    assert bad.err.startswith("error: actor_rollout_ref.rollout.nn: "), bad.err
    assert not Run.objects.exists()

    config = tmp_path / "cfg.yaml"
    config.write_text("trainer:\n  bogus: 1\n")
    bad_file = as_alice("runs", "launch", "--name", "bad", "--dataset", dataset.pk, "--model", model.pk,
                        "--config", config)
    assert bad_file.code == 2 and bad_file.err.startswith("error: trainer.bogus: "), bad_file.err

    not_kv = as_alice("runs", "launch", "--name", "x", "--dataset", dataset.pk, "--model", model.pk, "--set", "n")
    assert not_kv.code == 2 and not_kv.err.startswith("error: --set: expected key=value"), not_kv

    ok = as_alice("runs", "launch", "--name", "lr", "--dataset", dataset.pk, "--model", model.pk,
                  "--preset", "cpu_smoke", "--set", "actor_rollout_ref.rollout.n=4", "--json")
    assert ok.code == 0, ok
    body = json.loads(ok.out)
    run = Run.objects.get(pk=body["id"])
    assert run.owner == alice and run.name == "lr" and run.dataset == dataset and run.model == model
    assert run.status in (RunStatus.QUEUED, RunStatus.SUBMITTING)  # admitted or waiting; nothing trains here
    assert run.config["actor_rollout_ref"]["rollout"]["n"] == 4


def test_stop_a_queued_run(as_alice, alice, make_run):
    run, _ = make_run(alice, "to-stop")
    r = as_alice("runs", "stop", run.pk)
    assert r.code == 0 and r.out.strip() == f"run {run.pk} to-stop: stopped", r
    assert Run.objects.get(pk=run.pk).status == RunStatus.STOPPED
    again = as_alice("runs", "stop", run.pk)  # already final: the API's 409
    assert again.code == 2 and again.err.startswith("error: "), again


STEPS = [0, 1, 2, 5, 6, 9, 10, 11, 17, 40]  # gaps: the pages are keyed by step


def test_metrics_follow_the_pages_to_the_end(as_alice, alice, make_run, report, monkeypatch):
    run, token = make_run(alice, "metrics")
    assert report(run, token, metric_events(STEPS))["accepted"] == len(STEPS)
    monkeypatch.setattr(cli_runs, "METRICS_PAGE", 4)  # 4 + 4 + 2 rows
    pages = []
    request = cli_client.Client.request

    def counting(self, method, path, **kw):
        if "/metrics/" in path:
            pages.append(kw.get("params", {}).get("after_step"))
        return request(self, method, path, **kw)

    monkeypatch.setattr(cli_client.Client, "request", counting)

    r = as_alice("runs", "metrics", run.pk, "--csv")
    assert r.code == 0, r
    rows = list(csv.reader(io.StringIO(r.out)))
    assert rows[0] == ["step", "time", "actor/entropy", "critic/score/mean"]
    assert [int(row[0]) for row in rows[1:]] == STEPS  # every row once, in step order
    assert [float(row[3]) for row in rows[1:]] == [s / 10 for s in STEPS]
    assert pages == [None, 5, 11]  # from the first step, then each page's next_after_step

    table = as_alice("runs", "metrics", run.pk, "-m", "critic/score/mean")
    assert table.out.splitlines()[0].split() == ["STEP", "TIME", "critic/score/mean"]
    assert len(table.out.splitlines()) == 1 + len(STEPS)
    assert [r["step"] for r in json.loads(as_alice("runs", "metrics", run.pk, "--json").out)] == STEPS


def test_watch_prints_each_step_and_exits_by_how_the_run_ended(as_alice, alice, make_run, report):
    ok, ok_token = make_run(alice, "ok")
    report(ok, ok_token, metric_events([1, 2, 3]))
    Run.objects.filter(pk=ok.pk).update(status=RunStatus.SUCCEEDED, step=3, total_steps=3)
    r = as_alice("runs", "watch", ok.pk, "--interval", "0.1")
    assert r.code == 0, r
    lines = r.out.splitlines()
    assert [ln.split()[:2] for ln in lines] == [["step", "1/3"], ["step", "2/3"], ["step", "3/3"]]
    assert "critic/score/mean=0.2" in lines[1] and "actor/entropy=3" in lines[1]
    assert "succeeded" in r.err

    bad, _ = make_run(alice, "bad")
    Run.objects.filter(pk=bad.pk).update(status=RunStatus.FAILED, error="CUDA out of memory")
    failed = as_alice("runs", "watch", bad.pk)
    assert failed.code == 1 and "failed" in failed.err and "error: CUDA out of memory" in failed.err


def test_datasets_upload_a_small_jsonl_and_list_it(as_alice, alice, tmp_path, _no_broker):
    content = b"".join(json.dumps({"question": f"What is {i} + 1?", "answer": f"#### {i + 1}"}).encode() + b"\n"
                       for i in range(3))
    path = tmp_path / "tiny.jsonl"
    path.write_bytes(content)
    r = as_alice("datasets", "upload", path, "--name", "tiny", "--preset", "gsm8k")
    assert r.code == 0, r
    ds = Dataset.objects.get(owner=alice)
    assert r.out.strip() == f"dataset {ds.pk} tiny: validating"
    assert ds.name == "tiny" and ds.preset == "gsm8k" and ds.size_bytes == len(content)
    assert any(ds.pk in task for task in _no_broker)  # its validation was handed to the worker

    again = as_alice("datasets", "upload", path, "--name", "tiny", "--preset", "gsm8k", "--json")
    assert again.code == 0 and json.loads(again.out)["duplicate"] is True

    listed = as_alice("datasets", "list")
    assert listed.code == 0 and [ln.split()[:3] for ln in listed.out.splitlines()[1:]] == [
        [str(ds.pk), "tiny", "validating"]]

    bad_split = as_alice("datasets", "upload", path, "--name", "x", "--split", "test")
    assert bad_split.code == 2 and "invalid choice" in bad_split.err  # argparse's own usage error


def test_datasets_upload_streams_the_file_from_the_disk(as_alice, alice, tmp_path, _no_broker, monkeypatch):
    """The file is sent piece by piece (a dataset can be GiBs), never read whole: with 7-byte pieces the
    stored upload is the same bytes, and read_bytes (the old way) is never called."""
    import hashlib
    from pathlib import Path

    rows = [{"question": f"What is {i} * 3?", "answer": f"#### {i * 3}"} for i in range(50)]
    content = "".join(json.dumps(r) + "\n" for r in rows).encode()
    path = tmp_path / "streamed.jsonl"
    path.write_bytes(content)
    reads: list[int] = []

    class Counted(io.BufferedReader):
        def read(self, n=-1):
            reads.append(n)
            return super().read(n)

    monkeypatch.setattr(cli_client, "DOWNLOAD_CHUNK", 7)
    monkeypatch.setattr(cli_client, "open", lambda file, mode: Counted(io.FileIO(file, mode.replace("b", ""))),
                        raising=False)
    monkeypatch.setattr(Path, "read_bytes", lambda self: pytest.fail("the upload read the whole file"))
    r = as_alice("datasets", "upload", path, "--name", "streamed", "--preset", "gsm8k")
    assert r.code == 0, r
    ds = Dataset.objects.get(owner=alice, name="streamed")
    assert ds.size_bytes == len(content) and ds.sha256 == hashlib.sha256(content).hexdigest()
    assert reads and max(reads) == 7 and len(reads) == -(-len(content) // 7)

    missing = as_alice("datasets", "upload", tmp_path / "nope.jsonl")
    assert missing.code == 2 and missing.err.startswith("error: file: cannot read "), missing
    folder = as_alice("datasets", "upload", tmp_path)
    assert folder.code == 2 and folder.err.startswith("error: file: cannot read "), folder


def test_datasets_upload_wait_gives_up_after_its_timeout(as_alice, tmp_path, _no_broker, monkeypatch):
    """Nothing validates here (the broker is recorded): --wait polls until --timeout, then exits 1."""
    polls: list[float] = []
    monkeypatch.setattr(cli_common, "sleep", polls.append)
    path = tmp_path / "w.jsonl"
    path.write_text(json.dumps({"question": "What is 1 + 1?", "answer": "#### 2"}) + "\n")
    r = as_alice("datasets", "upload", path, "--name", "w", "--preset", "gsm8k", "--wait", "--timeout", "5")
    assert r.code == 1, r
    assert "still validating after 5 s" in r.err
    assert polls == [2.0, 2.0, 2.0]  # 0, 2, 4 s waited: a third look, then 6 >= 5


def test_models_and_configs_lists(as_alice, alice, bob, make_assets):
    _, model = make_assets(alice, "mine")
    make_assets(bob, "theirs")
    RunConfig.objects.create(owner=alice, name="lr-small", description="lower lr", config={})
    models = as_alice("models", "list")
    assert models.code == 0 and [ln.split()[:2] for ln in models.out.splitlines()[1:]] == [
        [str(model.pk), "mine-model"]]
    configs = as_alice("configs", "list")
    assert configs.code == 0 and configs.out.splitlines()[1].split()[1:3] == ["lr-small", "lower"]
    assert json.loads(as_alice("configs", "list", "--json").out)["results"][0]["name"] == "lr-small"


HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x1b[31mred\x1b[0m\rover\u202eevil\x9b31m"


def test_server_text_cannot_drive_the_terminal(as_alice, alice, make_run, report):
    run, token = make_run(alice, "name" + HOSTILE)
    report(run, token, [{"seq": 1, "type": "log", "time": 1_764_440_000.0,
                         "data": {"level": "info", "message": "model said: " + HOSTILE + "\nnext line"}}])
    outputs = [as_alice("runs", "list"), as_alice("runs", "show", run.pk), as_alice("runs", "logs", run.pk)]
    for r in outputs:
        assert r.code == 0, r
        assert not any(ch in r.out for ch in "\x1b\x07\r\x9b\u202e"), repr(r.out)
    assert "namered overevil31m" in outputs[0].out  # a table cell: one line, the \r a space
    log = outputs[2].out
    assert "model said: redoverevil31m" in log and log.rstrip().endswith("next line")  # newlines kept in logs

    # --json keeps the data exact, the dangerous characters as JSON escapes.
    raw = as_alice("runs", "show", run.pk, "--json").out
    assert not any(ch in raw for ch in "\x1b\x07\r\x9b\u202e")
    assert json.loads(raw)["name"] == "name" + HOSTILE


@pytest.mark.parametrize("argv", [("runs",), ("runs", "show", "abc"), ("runs", "show", "0"), ("nope",)])
def test_usage_errors_are_exit_2(cli, argv):
    assert cli(*argv).code == 2


def test_watch_prints_new_steps_once_across_polls(as_alice, alice, make_run, report, monkeypatch):
    run, token = make_run(alice, "live")
    Run.objects.filter(pk=run.pk).update(total_steps=4)
    report(run, token, metric_events([1, 2]))
    polls = []

    def between_polls(seconds):  # what the trainer does while the client waits
        polls.append(seconds)
        if len(polls) == 1:
            Run.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING)
        elif len(polls) == 2:
            report(run, token, metric_events([3, 4], first_seq=3))
        else:
            Run.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED, step=4)

    monkeypatch.setattr(cli_common, "sleep", between_polls)
    r = as_alice("runs", "watch", run.pk, "--interval", "7", "-m", "critic/score/mean")
    assert r.code == 0, r
    assert r.out.splitlines() == [f"step {s}/4  critic/score/mean={s / 10:g}" for s in (1, 2, 3, 4)]
    assert polls == [7.0, 7.0, 7.0]
    # live_server is a WSGI server: no websocket, so the watch says it polls, and does.
    notes = [ln for ln in r.err.splitlines() if ln.startswith("note: ")]
    assert notes == ["note: no live updates (the server answered 404 Not Found to the websocket handshake); "
                     "looking every 7 s"]
    assert [ln.split(": ")[-1] for ln in r.err.splitlines() if ln not in notes] == ["queued", "running", "succeeded"]


def test_watch_gives_up_after_its_timeout(as_alice, alice, make_run, monkeypatch):
    """A run that never ends: --timeout 10 at --interval 4 looks three times (0, 4, 8 s), then exit 1."""
    run, _token = make_run(alice, "stuck")
    polls: list[float] = []
    monkeypatch.setattr(cli_common, "sleep", polls.append)
    r = as_alice("runs", "watch", run.pk, "--interval", "4", "--timeout", "10")
    assert r.code == 1, r
    assert polls == [4.0, 4.0, 4.0]
    assert f"run {run.pk} is still queued after 10 s (--timeout)" in r.err


def test_runs_list_by_project(as_alice, alice, make_assets):
    from rlstudio.projects.models import Project
    from rlstudio.runs.services import run_create

    project = Project.objects.create(owner=alice, name="grid")
    dataset, model = make_assets(alice)
    inside, _ = run_create(owner=alice, name="inside", dataset=dataset, model=model, config={}, gpus=0,
                           project_id=project.pk)
    run_create(owner=alice, name="outside", dataset=dataset, model=model, config={}, gpus=0)
    r = as_alice("runs", "list", "--project", project.pk)
    assert r.code == 0 and [ln.split()[:2] + ln.split()[-3:-2] for ln in r.out.splitlines()[1:]] == [
        [str(inside.pk), "inside", "grid"]]


def test_show_lists_the_kept_checkpoints(as_alice, finished_run, make_run, alice):
    """The steps `evaluations start --steps`, `exports start --step` and `runs fork --step` take."""
    shown = as_alice("runs", "show", finished_run.pk)
    assert shown.code == 0, shown
    assert "checkpoints: 1,2" in shown.out.splitlines()
    queued, _ = make_run(alice, "fresh")
    assert "checkpoints: -" in as_alice("runs", "show", queued.pk).out.splitlines()
    assert "checkpoints" not in json.loads(as_alice("runs", "show", finished_run.pk, "--json").out)


@pytest.mark.parametrize("message, line, shown", [
    ("line 1, field 'answer': missing", 1, "error: answer: line 1, field 'answer': missing"),  # said once
    ("a row has no answer", 7, "error: answer: a row has no answer (line 7)"),
])
def test_datasets_upload_wait_on_an_invalid_file_names_its_line_once(as_alice, tmp_path, _no_broker, monkeypatch,
                                                                     message, line, shown):
    """The validator (a worker, not running here) marks the dataset invalid while --wait polls."""
    def validated(seconds):
        Dataset.objects.filter(status="validating").update(status="invalid", error=message, error_line=line,
                                                           error_field="answer")

    monkeypatch.setattr(cli_common, "sleep", validated)
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"question": "What is 1 + 1?"}) + "\n")
    r = as_alice("datasets", "upload", path, "--name", "bad", "--preset", "gsm8k", "--wait")
    assert r.code == 1, r
    assert r.out.strip().endswith("bad: invalid") and r.err.strip() == shown, r


def test_watch_and_metrics_show_the_held_out_reward_of_validation_steps(as_alice, alice, make_run, report):
    """verl validates before the first step (step 0: val-core metrics only) and every test_freq steps:
    the held-out reward is shown on those lines; step 0 was a bare "step 0/3"."""
    run, token = make_run(alice, "val")
    val = "val-core/arith/reward/mean@1"
    data = {0: {val: 0.25}, 1: {"critic/score/mean": 0.5}, 2: {"critic/score/mean": 0.75, val: 0.625}}
    report(run, token, [{"seq": s + 1, "type": "metrics", "time": T0 + s, "data": {"step": s, "metrics": m}}
                        for s, m in data.items()])
    Run.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED, step=2, total_steps=3)
    r = as_alice("runs", "watch", run.pk)
    assert r.code == 0, r
    assert r.out.splitlines() == [f"step 0/3  {val}=0.25", "step 1/3  critic/score/mean=0.5",
                                  f"step 2/3  critic/score/mean=0.75  {val}=0.625"]
    table = as_alice("runs", "metrics", run.pk).out.splitlines()
    assert table[0].split() == ["STEP", "TIME", "critic/score/mean", val]
    assert table[1].split()[-2:] == ["-", "0.25"] and table[3].split()[-2:] == ["0.75", "0.625"]


def test_a_run_reporting_fast_is_looked_at_at_most_once_a_second(as_alice, alice, make_run, report, monkeypatch):
    """The live stream wakes the watch at every report; looks are kept LIVE_GAP_S apart (a run that
    reports many times a second would otherwise be fetched as often). A stand-in stream always says
    'reported'; the gap is waited in common.sleep, where this test plays the trainer."""
    from rlstudio_cli import runs as cli_runs

    run, token = make_run(alice, "fast")
    Run.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING, total_steps=2)

    class AlwaysReported:
        closed = False

        def wait(self, seconds):
            return True

        def close(self):
            self.closed = True

    stream = AlwaysReported()
    monkeypatch.setattr(cli_runs, "_open_stream", lambda client, args: stream)
    gaps = []

    def between_looks(seconds):
        gaps.append(seconds)
        if len(gaps) == 1:
            report(run, token, metric_events([1, 2]))
        else:
            Run.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED, step=2)

    monkeypatch.setattr(cli_common, "sleep", between_looks)
    r = as_alice("runs", "watch", run.pk, "-m", "critic/score/mean")
    assert r.code == 0, r
    assert r.out.splitlines() == ["step 1/2  critic/score/mean=0.1", "step 2/2  critic/score/mean=0.2"]
    assert len(gaps) == 2 and all(0.5 < g <= cli_runs.LIVE_GAP_S for g in gaps), gaps
    assert stream.closed
