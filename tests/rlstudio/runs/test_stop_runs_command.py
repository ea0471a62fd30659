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
