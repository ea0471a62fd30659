"""The Celery processes `make run` starts (rlstudio.launcher.workers): the playground worker runs as many
processes as the site admits sessions, and the launcher hands that one number to every child."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from rlstudio.config.env import PLAYGROUND_MAX_ACTIVE_DEFAULT
from rlstudio.launcher.cli import Launcher, parse_args
from rlstudio.launcher.workers import WorkerSettingError, celery_processes, playground_slots
from tests.conftest import _service_env, stop_process_group, wait_until

REPO = Path(__file__).resolve().parents[3]
QUEUES = {"RLSTUDIO_PLAYGROUND_QUEUE": "playground", "RLSTUDIO_DATASETS_QUEUE": "datasets"}


def _by_name(env, tmp_path):
    return {name: (argv, grace) for name, argv, grace in
            celery_processes(env, tag="t", beat_schedule=tmp_path / "beat")}


def test_slots_follow_the_sites_setting():
    assert playground_slots({}) == PLAYGROUND_MAX_ACTIVE_DEFAULT == 4
    assert playground_slots({"RLSTUDIO_PLAYGROUND_MAX_ACTIVE": " 2 "}) == 2


@pytest.mark.parametrize("raw", ["two", "0", "-1", "65", "1.5"])
def test_an_unusable_setting_is_refused_by_name(raw):
    with pytest.raises(WorkerSettingError, match="RLSTUDIO_PLAYGROUND_MAX_ACTIVE") as info:
        playground_slots({"RLSTUDIO_PLAYGROUND_MAX_ACTIVE": raw})
    assert repr(raw.strip()) in str(info.value) or raw.strip() in str(info.value)


def test_the_playground_worker_has_one_process_per_admitted_session(tmp_path):
    procs = _by_name({**QUEUES, "RLSTUDIO_PLAYGROUND_MAX_ACTIVE": "3"}, tmp_path)
    assert list(procs) == ["celery-worker", "celery-playground", "celery-datasets", "celery-beat"]
    playground = procs["celery-playground"][0]
    assert "--pool=prefork" in playground and "--concurrency=3" in playground
    assert "--max-tasks-per-child=1" in playground
    assert playground[playground.index("-Q") + 1] == "playground"
    datasets = procs["celery-datasets"][0]
    assert datasets[datasets.index("-Q") + 1] == "datasets"
    assert "-Q" not in procs["celery-worker"][0]  # the main worker serves the default queue
    assert str(tmp_path / "beat") in procs["celery-beat"][0]


def test_the_children_share_the_number(tmp_path):
    base = {"RLSTUDIO_STATE_DIR": str(tmp_path), "PATH": os.environ["PATH"]}
    env = Launcher(parse_args([], base), base)._child_env({})
    assert env["RLSTUDIO_PLAYGROUND_MAX_ACTIVE"] == "4"
    given = {**base, "RLSTUDIO_PLAYGROUND_MAX_ACTIVE": "2"}
    assert Launcher(parse_args([], given), given)._child_env({})["RLSTUDIO_PLAYGROUND_MAX_ACTIVE"] == "2"
    bad = {**base, "RLSTUDIO_PLAYGROUND_MAX_ACTIVE": "many"}
    with pytest.raises(WorkerSettingError, match="'many'"):
        Launcher(parse_args([], bad), bad)._child_env({})


def test_a_real_worker_from_the_command_line_runs_that_many_processes(test_database_url, tmp_path):
    """The argv as built starts a Celery worker whose pool holds the slots (its own queue: it takes no
    task of the session's)."""
    from rlstudio.config.celery import app

    queue = f"test-playground-{os.getpid()}"
    env = _service_env(DATABASE_URL=test_database_url, RLSTUDIO_STATE_DIR=str(tmp_path),
                       RLSTUDIO_PLAYGROUND_QUEUE=queue, RLSTUDIO_DATASETS_QUEUE="unused",
                       RLSTUDIO_PLAYGROUND_MAX_ACTIVE="3")
    argv = _by_name(env, tmp_path)["celery-playground"][0]
    name = f"rlstudio-playground-t@{os.uname().nodename}"
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=REPO, env=env,
                                start_new_session=True)
    try:
        stats = wait_until(lambda: (app.control.inspect(destination=[name], timeout=1.0).stats() or {}).get(name),
                           timeout=90, what="the playground worker", proc=proc, log=log, interval=0.5)
        assert stats["pool"]["max-concurrency"] == 3
        assert len(stats["pool"]["processes"]) == 3
        active = app.control.inspect(destination=[name], timeout=1.0).active_queues() or {}
        assert [q["name"] for q in active.get(name, [])] == [queue]
    finally:
        stop_process_group(proc, grace=20)
