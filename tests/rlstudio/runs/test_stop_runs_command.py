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
