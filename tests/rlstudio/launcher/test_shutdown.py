"""The launcher's first step on Ctrl-C (rlstudio.launcher.shutdown): RLSTUDIO_SHUTDOWN_STOP_S read as seconds,
the stop command run as a supervised one-shot child whose lines reach the terminal as they come, and each
way it can end (done, failed, skipped by a second signal, past its time). The command itself, against a
real run, is tests/e2e/test_shutdown_stop_runs.py."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from rlstudio.launcher import shutdown
from rlstudio.launcher.supervisor import Supervisor


def test_the_wait_comes_from_the_environment():
    assert shutdown.shutdown_stop_seconds({}) == 60.0
    assert shutdown.shutdown_stop_seconds({"RLSTUDIO_SHUTDOWN_STOP_S": " 0 "}) == 0.0
    assert shutdown.shutdown_stop_seconds({"RLSTUDIO_SHUTDOWN_STOP_S": "2.5"}) == 2.5


@pytest.mark.parametrize("raw", ["soon", "-1", "nan"])
def test_a_wait_that_is_not_seconds_is_refused_naming_the_variable(raw):
    with pytest.raises(SystemExit) as err:
        shutdown.shutdown_stop_seconds({"RLSTUDIO_SHUTDOWN_STOP_S": raw})
    assert "RLSTUDIO_SHUTDOWN_STOP_S" in str(err.value) and repr(raw) in str(err.value)


def test_the_relay_says_complete_lines_once_and_skips_the_supervisors_header(tmp_path):
    log = tmp_path / "shutdown.log"
    log.write_text("an earlier start's line\n")
    said: list[str] = []
    relay = shutdown.LogRelay(log, said.append)
    with open(log, "a") as f:
        f.write("\n=== 2026-12-07 12:00:00 python manage.py rlstudio_stop_runs\nstopping 1 active run(s)")
    relay()
    assert said == []  # the header is not the command's, the second line is not complete yet
    with open(log, "a") as f:
        f.write(" with a checkpoint\nrun #3: stopped\n")
    relay()
    relay()
    assert said == ["  stopping 1 active run(s) with a checkpoint", "  run #3: stopped"]


def test_the_relay_escapes_control_characters_of_a_line(tmp_path):
    """A line of the command's log holds run names (users' text): an escape sequence or a carriage return
    in one reaches the terminal escaped, not acted on."""
    log = tmp_path / "shutdown.log"
    said: list[str] = []
    relay = shutdown.LogRelay(log, said.append)
    log.write_bytes("run #4 “x\x1b]0;owned\x07\r[rlstudio] done\u202e”: stopped\n".encode())
    relay()
    assert said == ["  run #4 “x\\x1b]0;owned\\x07\\r[rlstudio] done\\u202e”: stopped"]


def _script(tmp_path: Path, body: str) -> Path:
    """A stand-in for manage.py: the launcher runs `python <it> rlstudio_stop_runs --wait S`."""
    path = tmp_path / "fake_manage.py"
    path.write_text("import sys, time\nargs = sys.argv[1:]\n" + body)
    return path


def _run(tmp_path, body, *, wait_s=5.0, skip=lambda: False):
    logs, run = tmp_path / "logs", tmp_path / "run"
    logs.mkdir(exist_ok=True)
    run.mkdir(exist_ok=True)
    sup = Supervisor(str(tmp_path), logs, run)
    said: list[str] = []
    outcome = shutdown.stop_runs(sup, env=dict(os.environ), cwd=tmp_path, manage_py=_script(tmp_path, body),
                                 wait_s=wait_s, skip=skip, say=said.append)
    assert sup.children == [] and not list(run.iterdir())  # the one-shot child is gone with its pid file
    return outcome, said


def test_done_relays_every_line_and_passes_the_wait(tmp_path):
    outcome, said = _run(tmp_path, "print('asked', ' '.join(args), flush=True)\n"
                                   "time.sleep(0.3)\nprint('run #1: stopped', flush=True)\n", wait_s=7)
    assert outcome == "done"
    assert said == ["  asked rlstudio_stop_runs --wait 7", "  run #1: stopped"]


def test_a_failing_command_is_failed(tmp_path):
    outcome, said = _run(tmp_path, "print('boom', flush=True)\nsys.exit(3)\n")
    assert outcome == "failed" and said == ["  boom"]


def test_a_second_signal_skips_the_wait(tmp_path):
    t0 = time.monotonic()
    outcome, _ = _run(tmp_path, "time.sleep(60)\n", skip=lambda: time.monotonic() - t0 > 0.5)
    assert outcome == "skipped" and time.monotonic() - t0 < 20


def test_a_command_past_its_time_is_timeout(tmp_path, monkeypatch):
    monkeypatch.setattr(shutdown, "SLACK_S", 0.5)
    t0 = time.monotonic()
    outcome, _ = _run(tmp_path, "time.sleep(60)\n", wait_s=0.5)
    assert outcome == "timeout" and time.monotonic() - t0 < 20


def test_the_children_are_stopped_even_when_stopping_the_runs_first_raises(tmp_path, monkeypatch):
    """Whatever goes wrong in the runs' stop (the terminal gone after a SIGHUP: writing to it is an
    OSError; no room for the command's log), the launcher still stops every child it started (they run
    in their own sessions: left alone, PostgreSQL, Redis, Ray, Celery and Daphne would outlive it)."""
    from rlstudio.launcher import cli

    base = {"RLSTUDIO_STATE_DIR": str(tmp_path), "PATH": os.environ["PATH"]}
    launcher = cli.Launcher(cli.parse_args([], base), base)
    launcher.layout.create()
    launcher.ready = launcher.ray_started = True
    for name in ("ray", "celery-worker"):
        launcher.sup.spawn(name, ["sleep", "60"], env=dict(os.environ), cwd=tmp_path, grace=2.0)
    children = list(launcher.sup.children)

    def broken(*_a, **_kw):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(cli, "stop_runs", broken)
    try:
        launcher._shutdown()
    except OSError:
        pass
    alive = [c.name for c in children if c.alive()]
    for child in children:  # never leave a sleep behind, whatever the outcome
        if child.alive():
            child.popen.kill()
            child.popen.wait()
    assert alive == [] and launcher.sup.children == []
