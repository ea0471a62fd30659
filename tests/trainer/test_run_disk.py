"""A run's disk in the trainer: checkpoints kept under the operator's cap (trainer.max_ckpt_to_keep_cap),
the output folder held to trainer.disk_budget_gb, and both in a real CPU run."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from trainer import checkpoint as ckpt
from trainer.config import ConfigError, Config, apply_overrides, validate
from trainer.resume import save_run

MIB = 2**20


def _fake_step(root: Path, step: int, size: int = MIB) -> Path:
    """A committed step folder holding one file of `size` bytes (the marker then names it)."""
    path = ckpt.step_dir(root, step)
    (path / "actor").mkdir(parents=True)
    (path / "actor" / "shard.distcp").write_bytes(b"\0" * size)
    (root / ckpt.MARKER).write_text(str(step))
    return path


def _steps(root: Path) -> list[int]:
    return sorted(int(m.group(1)) for p in root.iterdir() if (m := ckpt.STEP_DIR.match(p.name)))


# --------------------------------------------------------------------------------- checkpoints kept
@pytest.mark.parametrize("keep,cap,kept", [
    (None, None, None),  # verl's default: keep all
    (None, 5, 5),        # the user left it unset: the operator's cap
    (3, 5, 3),           # the user's smaller number
    (20, 5, 5),          # a larger one (a run queued before the cap was lowered) is held to the cap
    (7, None, 7),        # no cap (RLSTUDIO_MAX_CHECKPOINTS_PER_RUN=0)
    (0, 4, 4), (None, 0, None),
])
def test_keep_count_is_the_smaller_bound(keep, cap, kept):
    assert ckpt.keep_count(keep, cap) == kept


def test_prune_under_the_cap_keeps_the_newest(tmp_path):
    for s in range(1, 8):
        _fake_step(tmp_path, s)
    removed = ckpt.prune(tmp_path, ckpt.keep_count(None, 3))
    assert [p.name for p in removed] == ["global_step_1", "global_step_2", "global_step_3", "global_step_4"]
    assert _steps(tmp_path) == [5, 6, 7]
    assert ckpt.resolve_resume(tmp_path, mode="auto", resume_from_path=None) == ckpt.step_dir(tmp_path, 7)


def test_prune_never_removes_the_committed_checkpoint(tmp_path):
    """A folder whose marker names an older step (a run resumed from it by path) keeps that step."""
    for s in (1, 2, 3, 4):
        _fake_step(tmp_path, s)
    (tmp_path / ckpt.MARKER).write_text("2")
    ckpt.prune(tmp_path, 1)
    assert _steps(tmp_path) == [2, 4]
    assert ckpt.resolve_resume(tmp_path, mode="auto", resume_from_path=None) == ckpt.step_dir(tmp_path, 2)


# ------------------------------------------------------------------------------------- disk budget
def test_folder_bytes_counts_files_and_follows_no_symlink(tmp_path):
    run = tmp_path / "run"
    _fake_step(run, 1, 3 * MIB)
    (run / "events.jsonl").write_bytes(b"x" * 1000)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "big.bin").write_bytes(b"\0" * (8 * MIB))
    os.symlink(outside, run / "linked_dir")
    os.symlink(outside / "big.bin", run / "linked_file")
    assert ckpt.folder_bytes(run) == 3 * MIB + 1000 + len("1")  # the shard, the events, the marker


def test_within_the_budget_nothing_is_pruned(tmp_path):
    for s in (1, 2, 3):
        _fake_step(tmp_path, s)
    use = ckpt.enforce_disk_budget(tmp_path, 4 * MIB / ckpt.GIB)
    assert use.pruned == [] and _steps(tmp_path) == [1, 2, 3]
    assert 3 * MIB < use.size < 4 * MIB
    assert ckpt.enforce_disk_budget(tmp_path, None).size == use.size  # no budget: only measured


def test_over_the_budget_it_prunes_to_the_newest(tmp_path):
    for s in (1, 2, 3):
        _fake_step(tmp_path, s)
    use = ckpt.enforce_disk_budget(tmp_path, 2.5 * MIB / ckpt.GIB)
    assert [p.name for p in use.pruned] == ["global_step_1", "global_step_2"]
    assert _steps(tmp_path) == [3] and MIB < use.size < 2 * MIB


def test_still_over_the_budget_with_the_newest_alone_fails(tmp_path):
    for s in (1, 2):
        _fake_step(tmp_path, s, 3 * MIB)
    budget = 2 * MIB / ckpt.GIB
    with pytest.raises(ckpt.DiskBudgetExceeded) as exc:
        ckpt.enforce_disk_budget(tmp_path, budget)
    message = str(exc.value)
    assert f"disk budget of {budget:g} GB" in message and "holds 0.00 GB" in message
    assert "trainer.disk_budget_gb" in message and "RLSTUDIO_RUN_DISK_BUDGET_GB" in message
    assert str(tmp_path) not in message  # a server path is not the user's to read
    assert exc.value.size > 3 * MIB and exc.value.budget_gb == budget
    # the newest checkpoint is kept, committed and resumable
    assert _steps(tmp_path) == [2]
    assert ckpt.resolve_resume(tmp_path, mode="auto", resume_from_path=None) == ckpt.step_dir(tmp_path, 2)


def test_the_schema_checks_the_platform_keys():
    validate(apply_overrides(Config(), {"trainer.max_ckpt_to_keep_cap": 5, "trainer.disk_budget_gb": 0.5}),
             require_paths=False)
    for key, value in (("trainer.max_ckpt_to_keep_cap", 0), ("trainer.disk_budget_gb", 0),
                       ("trainer.disk_budget_gb", -1.0)):
        with pytest.raises(ConfigError) as exc:
            validate(apply_overrides(Config(), {key: value}), require_paths=False)
        assert exc.value.key == key


# ------------------------------------------------------------------------------ save_run, with fakes
class _Group:
    """Writes an actor shard of `size` bytes where the workers would."""

    def __init__(self, size: int):
        self.size = size

    def call(self, method: str, *, path: str, critic_path: str) -> None:
        assert method == "save"
        (Path(path) / "shard.distcp").write_bytes(b"\0" * self.size)


class _Loader:
    def state_dict(self):
        return {"epoch": 0, "position": 0}


class _Emitter:
    def __init__(self):
        self.events: list[tuple] = []

    def checkpoint(self, step, path):
        self.events.append(("checkpoint", step, path))

    def log(self, level, message):
        self.events.append(("log", level, message))


def _save(out, step, cfg, emitter, size=MIB, final=False, ends="stopped"):
    return save_run(out, step, group=_Group(size), loader=_Loader(), trainer_state={"epoch": 0, "seq": 0},
                    cfg=cfg, emitter=emitter, final=final, ends=ends)


def test_save_run_keeps_min_of_the_users_number_and_the_cap(tmp_path):
    cfg = apply_overrides(Config(), {"trainer.max_actor_ckpt_to_keep": 4, "trainer.max_ckpt_to_keep_cap": 2})
    emitter = _Emitter()
    for step in range(1, 6):
        saved = _save(tmp_path, step, cfg, emitter)
    assert _steps(tmp_path) == [4, 5] and saved.path == ckpt.step_dir(tmp_path, 5)
    assert saved.folder_bytes == ckpt.folder_bytes(tmp_path) > 2 * MIB
    assert [e[1] for e in emitter.events if e[0] == "checkpoint"] == [1, 2, 3, 4, 5]
    # without the cap the user's number applies (verl's behaviour)
    other = tmp_path / "other"
    for step in range(1, 6):
        _save(other, step, apply_overrides(cfg, {"trainer.max_ckpt_to_keep_cap": None}), emitter)
    assert _steps(other) == [2, 3, 4, 5]


def test_save_run_over_the_budget_prunes_then_fails_after_reporting_the_checkpoint(tmp_path):
    cfg = apply_overrides(Config(), {"trainer.disk_budget_gb": 2.5 * MIB / ckpt.GIB})
    emitter = _Emitter()
    _save(tmp_path, 1, cfg, emitter)
    _save(tmp_path, 2, cfg, emitter)
    assert emitter.events[-1][0] == "checkpoint"  # 2 MiB and a few bytes: within
    _save(tmp_path, 3, cfg, emitter)
    warning = emitter.events[-1]
    assert warning[:2] == ("log", "warning") and "pruned 2 older checkpoint(s)" in warning[2]
    assert _steps(tmp_path) == [3]
    with pytest.raises(ckpt.DiskBudgetExceeded):
        _save(tmp_path, 4, cfg, emitter, size=3 * MIB)
    assert emitter.events[-1][:2] == ("checkpoint", 4)  # the platform learns of the checkpoint first
    assert _steps(tmp_path) == [4]


def test_a_stops_final_checkpoint_over_the_budget_is_kept_with_a_warning(tmp_path):
    """The run ends after a stop's checkpoint anyway (`final`): over the budget, the older checkpoints
    are pruned as always; still over with the newest alone, it is kept (committed, resumable) and a
    warning naming the budget, not the folder's path, replaces DiskBudgetExceeded."""
    budget = 2.5 * MIB / ckpt.GIB
    cfg = apply_overrides(Config(), {"trainer.disk_budget_gb": budget})
    emitter = _Emitter()
    for step in (1, 2):
        _save(tmp_path, step, cfg, emitter)
    saved = _save(tmp_path, 3, cfg, emitter, size=3 * MIB, final=True)
    assert emitter.events[-2][:2] == ("checkpoint", 3)
    level, message = emitter.events[-1][1:]
    assert level == "warning" and message.startswith("the run's folder holds ")
    assert f"disk budget of {budget:g} GB (trainer.disk_budget_gb" in message and "ends stopped" in message
    assert str(tmp_path) not in message
    assert _steps(tmp_path) == [3] and saved.path == ckpt.step_dir(tmp_path, 3)
    assert saved.folder_bytes == ckpt.folder_bytes(tmp_path) > 3 * MIB
    assert ckpt.resolve_resume(tmp_path, mode="auto", resume_from_path=None) == ckpt.step_dir(tmp_path, 3)
    # pruned back within the budget: the usual warning, nothing more
    other, emitter = tmp_path / "other", _Emitter()
    for step in (1, 2):
        _save(other, step, cfg, emitter)
    _save(other, 3, cfg, emitter, final=True)
    assert emitter.events[-1][:2] == ("log", "warning") and "pruned 2 older checkpoint(s)" in emitter.events[-1][2]
    assert _steps(other) == [3]


@pytest.mark.parametrize("export", [True, False])
def test_the_last_steps_checkpoint_over_the_budget_is_kept_with_a_warning(tmp_path, export):
    """The last step's checkpoint (`final`, the run ending succeeded): kept over the budget like a
    stop's, the warning saying training is complete (not that a resume fails), and that the export
    still follows when trainer.export_hf asks for it."""
    budget = 2.5 * MIB / ckpt.GIB
    cfg = apply_overrides(Config(), {"trainer.disk_budget_gb": budget, "trainer.export_hf": export})
    emitter = _Emitter()
    _save(tmp_path, 1, cfg, emitter)
    saved = _save(tmp_path, 2, cfg, emitter, size=3 * MIB, final=True, ends="succeeded")
    assert emitter.events[-2][:2] == ("checkpoint", 2)
    level, message = emitter.events[-1][1:]
    assert level == "warning" and message.startswith("the run's folder holds 0.00 GB")
    assert f"disk budget of {budget:g} GB (trainer.disk_budget_gb" in message
    assert "training is complete: the run ends succeeded with that checkpoint kept" in message
    assert ("Hugging Face export (trainer.export_hf) is still written" in message) is export
    assert "resumed" not in message and str(tmp_path) not in message
    assert _steps(tmp_path) == [2] and saved.folder_bytes > 3 * MIB
    assert (tmp_path / ckpt.MARKER).read_text() == "2"
    with pytest.raises(ckpt.DiskBudgetExceeded):  # not final: fails as before
        _save(tmp_path / "other", 1, cfg, _Emitter(), size=3 * MIB)


# ---------------------------------------------------------------------------------- a real CPU run
def _run(tmp_path, model, train, **over):
    from trainer.recipes import get_recipe
    from trainer.run import run

    cfg = apply_overrides(get_recipe("cpu_smoke"), {
        "data.train_files": str(train), "actor_rollout_ref.model.path": str(model),
        "trainer.default_local_dir": str(tmp_path / "out"), "trainer.logger": ["jsonl"],
        "trainer.val_before_train": False, "trainer.export_hf": False, "trainer.save_freq": 1, **over})
    code = run(cfg)
    out = tmp_path / "out"
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    return code, out, events


def test_a_run_keeps_the_capped_number_and_reports_its_folder(tmp_path, tiny_model_dir, demo_data_dir):
    code, out, events = _run(tmp_path, tiny_model_dir, demo_data_dir / "train.jsonl",
                             **{"trainer.total_training_steps": 3, "trainer.max_ckpt_to_keep_cap": 2})
    assert code == 0
    assert _steps(out) == [2, 3]
    sizes = [e["data"]["metrics"]["perf/run_folder_gb"] for e in events if e["type"] == "metrics"]
    assert len(sizes) == 3 and all(s > 0 for s in sizes)
    assert sizes[-1] == pytest.approx(ckpt.folder_bytes(out) / ckpt.GIB, rel=0.05)


def test_a_run_over_its_disk_budget_fails_with_the_budgets_message(tmp_path, tiny_model_dir, demo_data_dir):
    code, out, events = _run(tmp_path, tiny_model_dir, demo_data_dir / "train.jsonl",
                             **{"trainer.total_training_steps": 3, "trainer.disk_budget_gb": 1e-6})
    assert code == 1
    status = [e["data"] for e in events if e["type"] == "status"]
    assert status[-1]["state"] == "failed" and status[-1]["step"] == 1
    assert status[-1]["message"].startswith("the run's folder holds ")
    assert "disk budget of 1e-06 GB (trainer.disk_budget_gb" in status[-1]["message"]
    assert "Traceback" not in status[-1]["message"]
    assert [e["data"]["step"] for e in events if e["type"] == "checkpoint"] == [1]
    assert _steps(out) == [1]


def _stop_already_asked(monkeypatch):
    """The trainer's StopFlag replaced by one a SIGTERM has already raised (its handler not installed):
    the run stops at the end of its first step."""
    from trainer import run as run_module

    class StoppedFlag(run_module.StopFlag):
        def __init__(self):
            super().__init__()
            self.requested, self.signal_name = True, "SIGTERM"

        def install(self):
            pass

    monkeypatch.setattr(run_module, "StopFlag", StoppedFlag)


def test_a_run_stopped_over_its_disk_budget_ends_stopped_with_a_warning(tmp_path, tiny_model_dir, demo_data_dir,
                                                                       monkeypatch):
    """A stop (here asked before the first step ends, as a SIGTERM would) checkpoints step 1, which is
    over the budget on its own: the run still ends stopped (exit 0, the platform's "stopped"), its
    checkpoint kept and committed, with a warning event naming the budget before the status."""
    _stop_already_asked(monkeypatch)
    code, out, events = _run(tmp_path, tiny_model_dir, demo_data_dir / "train.jsonl",
                             **{"trainer.total_training_steps": 3, "trainer.disk_budget_gb": 1e-6})
    assert code == 0
    status = [e["data"] for e in events if e["type"] == "status"]
    assert status[-1]["state"] == "stopped" and status[-1]["step"] == 1
    assert "SIGTERM" in status[-1]["message"] and "failed" not in [s["state"] for s in status]
    warnings = [e["data"]["message"] for e in events if e["type"] == "log" and e["data"]["level"] == "warning"]
    assert len(warnings) == 1 and "disk budget of 1e-06 GB (trainer.disk_budget_gb" in warnings[0]
    assert str(out) not in warnings[0]
    at = {e["type"] if e["type"] != "log" or e["data"]["level"] != "warning" else "warning": i
          for i, e in enumerate(events)}
    assert at["checkpoint"] < at["warning"] < at["status"] == len(events) - 1
    assert [e["data"]["step"] for e in events if e["type"] == "checkpoint"] == [1]
    assert _steps(out) == [1] and (out / ckpt.MARKER).read_text() == "1"


def test_a_run_whose_last_checkpoint_is_over_its_disk_budget_ends_succeeded_and_exports(tmp_path, tiny_model_dir,
                                                                                      demo_data_dir):
    """A run that trained to its end (checkpointing only there, trainer.save_freq -1) with that
    checkpoint alone over the budget: it ends succeeded (exit 0), the checkpoint kept and committed, a
    warning naming the budget and no path, and the Hugging Face export still written."""
    code, out, events = _run(tmp_path, tiny_model_dir, demo_data_dir / "train.jsonl",
                             **{"trainer.total_training_steps": 2, "trainer.disk_budget_gb": 1e-6,
                                "trainer.save_freq": -1, "trainer.export_hf": True})
    assert code == 0
    status = [e["data"] for e in events if e["type"] == "status"]
    assert status[-1]["state"] == "succeeded" and "failed" not in [s["state"] for s in status]
    warnings = [e["data"]["message"] for e in events if e["type"] == "log" and e["data"]["level"] == "warning"]
    assert len(warnings) == 1 and "disk budget of 1e-06 GB (trainer.disk_budget_gb" in warnings[0]
    assert "ends succeeded with that checkpoint kept" in warnings[0] and str(out) not in warnings[0]
    assert [e["data"]["step"] for e in events if e["type"] == "checkpoint"] == [2]
    assert _steps(out) == [2] and (out / ckpt.MARKER).read_text() == "2"
    assert (out / "huggingface" / "config.json").is_file()
    assert any(p.suffix == ".safetensors" for p in (out / "huggingface").iterdir())


def test_a_stop_at_the_last_step_over_its_disk_budget_ends_succeeded(tmp_path, tiny_model_dir, demo_data_dir,
                                                                    monkeypatch):
    """A stop that arrives at the last step: that checkpoint is the last step's, over the budget
    alone; training is complete, so the run ends succeeded with it kept, not failed."""
    _stop_already_asked(monkeypatch)
    code, out, events = _run(tmp_path, tiny_model_dir, demo_data_dir / "train.jsonl",
                             **{"trainer.total_training_steps": 1, "trainer.disk_budget_gb": 1e-6})
    assert code == 0
    status = [e["data"] for e in events if e["type"] == "status"]
    assert status[-1]["state"] == "succeeded" and "failed" not in [s["state"] for s in status]
    warnings = [e["data"]["message"] for e in events if e["type"] == "log" and e["data"]["level"] == "warning"]
    assert len(warnings) == 1 and "ends succeeded with that checkpoint kept" in warnings[0]
    assert _steps(out) == [1] and (out / ckpt.MARKER).read_text() == "1"
