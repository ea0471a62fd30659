"""`manage.py rlstudio_stop_runs --wait S` refuses a wait that is not a number of seconds >= 0 (NaN
included: its deadline would never come, so the command would wait for the runs with no end), as the
launcher's RLSTUDIO_SHUTDOWN_STOP_S does. The command against real runs is tests/e2e/test_shutdown_stop_runs.py."""
import pytest
from django.core.management import CommandError, call_command

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("wait", [-1.0, float("nan")])
def test_a_wait_that_is_not_seconds_is_refused(wait):
    with pytest.raises(CommandError, match="--wait"):
        call_command("rlstudio_stop_runs", wait=wait)


def test_no_active_run_says_so(capsys):
    call_command("rlstudio_stop_runs", wait=1.0)
    assert "no active runs" in capsys.readouterr().out


def test_the_queue_admits_nothing_while_paused_and_goes_on_after(alice, make_run):
    """`queue_paused` (held by the command while it stops the runs) holds QUEUE_LOCK from a connection of
    its own: a pass meanwhile admits nothing, even a run its owner's quota admits; after it, one does."""
    from rlstudio.quotas.models import GpuQuota
    from rlstudio.runs.models import Run, RunStatus
    from rlstudio.runs.services import queue_admit_all, queue_paused

    GpuQuota.objects.create(user=alice, max_gpus=0, gpu_hours_per_month=0, max_concurrent_runs=2)
    run = make_run(alice, "waits-for-the-restart", gpus=0)
    with queue_paused(wait_s=1.0) as paused:
        assert paused
        assert queue_admit_all() == []
        assert Run.objects.get(pk=run.pk).status == RunStatus.QUEUED
        with queue_paused(wait_s=0.2) as second:  # one holder at a time: a second one waits, then says so
            assert not second
    assert queue_admit_all() == [run.pk]
    assert Run.objects.get(pk=run.pk).status == RunStatus.SUBMITTING


def test_a_run_the_shutdown_stopped_says_so_on_its_page(alice, bob, make_run):
    """The run page's controls say why a run is stopped when the platform's shutdown stopped it (the
    `run.shutdown_stop` audit event the command records), to its readers too; another stopped run says
    nothing of it."""
    from django.test import Client

    from rlstudio.accounts.services import audit_record
    from rlstudio.runs.models import Run, RunStatus
    from rlstudio.runs.selectors import SHUTDOWN_STOP_ACTION
    from rlstudio.runs.services import run_share

    shut, other = make_run(alice, "shut-down"), make_run(alice, "stopped-by-hand")
    Run.objects.filter(pk__in=[shut.pk, other.pk]).update(status=RunStatus.STOPPED, step=12, total_steps=400,
                                                          checkpoint_path="/tmp/ckpt/global_step_12")
    audit_record(actor=None, action=SHUTDOWN_STOP_ACTION, obj=shut, data={"reason": "stopped: the platform was shut down"})
    run_share(run=shut, by=alice, add=["bob"])
    for user in (alice, bob):
        c = Client()
        c.force_login(user)
        html = c.get(f"/runs/{shut.pk}/controls/").content.decode()
        assert 'id="run-stop-reason"' in html, user
        assert "Stopped when the platform was shut down, not by its owner, with a checkpoint at step 12" in html
        assert ("<strong>Resume</strong> continues from it" in html) == (user == alice)  # a reader cannot resume
    c = Client()
    c.force_login(alice)
    assert 'id="run-stop-reason"' not in c.get(f"/runs/{other.pk}/controls/").content.decode()


def test_a_run_name_cannot_write_control_characters_to_the_operators_terminal(alice, make_run):
    """A run's name is its owner's text, and the command's lines go to the terminal that ran `make run`
    (the launcher relays them): a name holding an escape sequence (a window title, OSC 52's clipboard
    write) or a new line (a forged line of the launcher's) is written with its control characters
    escaped, on one line."""
    from rlstudio.runs.management.commands.rlstudio_stop_runs import stop_active_runs
    from rlstudio.runs.models import Run, RunStatus

    run = make_run(alice, "hostile")
    name = "x\x1b]52;c;ZWNobyBwd25lZA==\x07\x1b[2J\r\n[rlstudio] all runs stopped\u202e"
    Run.objects.filter(pk=run.pk).update(name=name, status=RunStatus.STOPPING)  # followed, not asked (no Ray)
    lines: list[str] = []
    stop_active_runs(wait_s=0, say=lines.append)
    assert len(lines) == 2 and lines[1].startswith(f"run #{run.pk} "), lines
    for line in lines:
        assert not any(ord(c) < 32 or 0x7f <= ord(c) < 0xa0 or c == "\u202e" for c in line), repr(line)
    assert "\\x1b]52;c;ZWNobyBwd25lZA==" in lines[1] and "[rlstudio] all runs stopped" in lines[1]


def test_a_stop_by_the_platform_must_say_why(alice, make_run):
    """run_stop(by=None) is the platform's own stop (shutdown, auto-pause): without a reason it is refused,
    so no stop is ever recorded with neither a user nor a reason."""
    from rlstudio.runs.models import RunStatus
    from rlstudio.runs.services import run_stop

    run = make_run(alice, "no-reason")
    with pytest.raises(ValueError, match="needs its reason"):
        run_stop(run=run, by=None)
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED
