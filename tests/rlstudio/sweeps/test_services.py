"""sweep_launch and sweep_stop on real PostgreSQL: the runs made through the runs' launch path, each
refusal naming its field, all or nothing, the caps and the queue."""
import pytest

from rlstudio.accounts.models import AuditEvent
from rlstudio.quotas.models import GpuQuota
from rlstudio.runs.errors import RunInputInvalid, RunRefused
from rlstudio.runs.models import Run, RunStatus
from rlstudio.sweeps.models import Sweep, SweepRun
from rlstudio.sweeps.services import SweepInputs, sweep_launch, sweep_stop
from tests.rlstudio.sweeps.conftest import LR, N

pytestmark = pytest.mark.django_db


def _nothing_left():
    assert Sweep.objects.count() == 0 and SweepRun.objects.count() == 0 and Run.objects.count() == 0


def test_a_2x2_sweep_makes_four_runs_named_tagged_and_launched(alice, inputs):
    sweep = sweep_launch(owner=alice, name="lr-n", inputs=inputs,
                         axes=[{"key": LR, "values": [1e-6, 3e-6]}, {"key": N, "values": [2, 4]}])
    links = list(sweep.sweep_runs.select_related("run").order_by("index"))
    assert [link.params for link in links] == [{LR: 1e-6, N: 2}, {LR: 1e-6, N: 4}, {LR: 3e-6, N: 2}, {LR: 3e-6, N: 4}]
    for link in links:
        run = link.run
        cfg = run.config["actor_rollout_ref"]
        assert (cfg["actor"]["optim"]["lr"], cfg["rollout"]["n"]) == (link.params[LR], link.params[N])
        assert run.name == f"lr-n/{LR}={link.params[LR]},{N}={link.params[N]}"
        assert run.tags == ["lr-n"] and run.owner == alice
        assert run.config["data"]["train_files"] == inputs.dataset.file_path  # the platform's keys written
        actions = set(AuditEvent.objects.filter(object_id=str(run.pk)).values_list("action", flat=True))
        assert {"run.create", "run.launch"} <= actions  # the launch path of a run made by hand
    assert sweep.base_config["data"]["train_files"] != inputs.dataset.file_path  # the user's view only
    assert sweep.axes == [{"key": LR, "values": [1e-6, 3e-6]}, {"key": N, "values": [2, 4]}]
    assert AuditEvent.objects.filter(action="sweep.launch", object_id=str(sweep.pk)).exists()


@pytest.mark.parametrize("axes,field", [
    ([{"key": "trainer.default_local_dir", "values": ["/tmp/x"]}], "axes[0].key"),  # the platform's key
    ([{"key": "data.train_files", "values": ["a", "b"]}], "axes[0].key"),
    ([{"key": LR, "values": [1e-6]}, {"key": "custom_reward_function.path", "values": ["x"]}], "axes[1].key"),
    ([{"key": "no.such.key", "values": [1]}], "axes[0].key"),
    ([{"key": N, "values": [2, -1]}], "axes[0]"),  # out of the gate's bounds
    ([{"key": N, "values": [2, "many"]}], "axes[0]"),  # not the schema's type
    ([{"key": LR, "values": [1e-6]}, {"key": N, "values": [0]}], "axes[1]"),
    ([{"key": N, "values": [2]}] * 2, "axes[1].key"),
    ("lr=1e-6", "axes"),
])
def test_each_bad_input_is_refused_naming_its_field_and_nothing_is_made(alice, inputs, axes, field):
    with pytest.raises(RunInputInvalid) as err:
        sweep_launch(owner=alice, name="bad", inputs=inputs, axes=axes)
    assert err.value.field == field
    _nothing_left()


def test_the_refusal_names_the_axis_the_value_and_the_key(alice, inputs):
    with pytest.raises(RunInputInvalid) as err:
        sweep_launch(owner=alice, name="bad", inputs=inputs, axes=[{"key": N, "values": [2, 4, -3]}])
    msg = str(err.value)
    assert err.value.field == "axes[0]" and f"axes[0] {N} = -3" in msg and "run 3 of 3" in msg


def test_a_value_bad_only_in_the_third_combination_leaves_nothing(alice, inputs):
    # A mini-batch of 8 prompts fits steps of 8 and 16 prompts, not of 4: each value is fine on its own
    # axis (train_batch_size=4 with the preset's mini-batch), only the 3rd run (4, 8) is refused.
    mini = "actor_rollout_ref.actor.ppo_mini_batch_size"
    with pytest.raises(RunInputInvalid) as err:
        sweep_launch(owner=alice, name="mb", inputs=inputs,
                     axes=[{"key": "data.train_batch_size", "values": [8, 16, 4]}, {"key": mini, "values": [8]}])
    assert "run 3 of 3" in str(err.value) and "data.train_batch_size=4" in str(err.value)
    assert err.value.field.startswith("axes")
    _nothing_left()
    # the same values without the 3rd: both runs are made
    sweep = sweep_launch(owner=alice, name="mb", inputs=inputs,
                         axes=[{"key": "data.train_batch_size", "values": [8, 16]}, {"key": mini, "values": [8]}])
    assert sweep.sweep_runs.count() == 2


def test_a_combination_refused_on_a_later_key_names_it(alice, inputs):
    mini = "actor_rollout_ref.actor.ppo_mini_batch_size"
    with pytest.raises(RunInputInvalid) as err:
        sweep_launch(owner=alice, name="mb", inputs=inputs,
                     axes=[{"key": mini, "values": [2, 8]}, {"key": "data.train_batch_size", "values": [8, 4]}])
    assert "run 4 of 4" in str(err.value) and f"{mini}=8, data.train_batch_size=4" in str(err.value)
    _nothing_left()


def test_the_name_is_checked(alice, inputs):
    for name in ("", "   ", "x" * 101, "a\nb"):
        with pytest.raises(RunInputInvalid) as err:
            sweep_launch(owner=alice, name=name, inputs=inputs, axes=[{"key": N, "values": [2]}])
        assert err.value.field == "name"
    _nothing_left()


def test_the_grid_is_capped_by_the_setting(alice, inputs, settings):
    settings.RLSTUDIO_MAX_SWEEP_RUNS = 3
    with pytest.raises(RunInputInvalid) as err:
        sweep_launch(owner=alice, name="big", inputs=inputs,
                     axes=[{"key": N, "values": [2, 4]}, {"key": LR, "values": [1e-6, 2e-6]}])
    assert err.value.field == "axes" and "4 runs" in str(err.value) and "RLSTUDIO_MAX_SWEEP_RUNS" in str(err.value)
    _nothing_left()


def test_more_runs_than_the_queued_runs_cap_allows_refuse_the_whole_sweep(alice, inputs):
    GpuQuota.objects.create(user=alice, max_gpus=1, gpu_hours_per_month=10, max_concurrent_runs=0,
                            max_queued_runs=2)
    with pytest.raises(RunRefused) as err:
        sweep_launch(owner=alice, name="q", inputs=inputs, axes=[{"key": N, "values": [2, 4, 8]}])
    assert "run 3 of the sweep's 3" in str(err.value) and "max_queued_runs" in str(err.value)
    _nothing_left()


def test_runs_past_the_concurrent_cap_wait_in_the_queue(alice, inputs):
    GpuQuota.objects.create(user=alice, max_gpus=1, gpu_hours_per_month=10, max_concurrent_runs=1,
                            max_queued_runs=10)
    sweep = sweep_launch(owner=alice, name="q", inputs=inputs, axes=[{"key": N, "values": [2, 4, 8]}])
    runs = [link.run for link in sweep.sweep_runs.select_related("run").order_by("index")]
    assert [r.status for r in runs] == [RunStatus.SUBMITTING, RunStatus.QUEUED, RunStatus.QUEUED]
    assert all(r.queue_reason for r in runs[1:])


def test_another_users_dataset_is_refused_by_the_run_path(alice, bob, inputs, make_dataset):
    theirs = make_dataset(bob, name="not-ready", status="validating")
    bad = SweepInputs(dataset=theirs, model=inputs.model, preset="cpu_smoke")
    with pytest.raises(RunInputInvalid) as err:
        sweep_launch(owner=alice, name="x", inputs=bad, axes=[{"key": N, "values": [2]}])
    assert err.value.field == "dataset"
    _nothing_left()


def test_stop_all_cancels_the_queued_runs_and_reports_the_others(alice, inputs):
    GpuQuota.objects.create(user=alice, max_gpus=1, gpu_hours_per_month=10, max_concurrent_runs=1,
                            max_queued_runs=10)
    sweep = sweep_launch(owner=alice, name="s", inputs=inputs, axes=[{"key": N, "values": [2, 4, 8]}])
    runs = [link.run for link in sweep.sweep_runs.select_related("run").order_by("index")]
    done = sweep_stop(sweep=sweep, by=alice)
    assert done.stopped == [runs[1].pk, runs[2].pk]
    assert list(done.refused) == [runs[0].pk] and "submitted" in done.refused[runs[0].pk]
    assert Run.objects.get(pk=runs[2].pk).status == RunStatus.STOPPED
