"""trainer.checkpoint: commit marker last, resume modes, pruning, RNG round trip."""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from trainer import checkpoint as ckpt


def _save(root, step):
    return ckpt.save_checkpoint(root, step, actor_state={"model": {"w": torch.full((2,), float(step))},
                                                         "optimizer": {"s": step}, "scheduler": {"l": step}},
                                loader_state={"epoch": 0, "position": step}, trainer_state={"seq": 10 * step},
                                config={"k": "v"})


def test_save_load_and_marker(tmp_path):
    assert ckpt.latest_step(tmp_path) is None
    assert ckpt.resolve_resume(tmp_path, mode="auto", resume_from_path=None) is None
    _save(tmp_path, 1)
    random.seed(5), np.random.seed(5), torch.manual_seed(5)
    _save(tmp_path, 2)
    expect = (random.random(), np.random.rand(), torch.rand(1).item())
    assert ckpt.latest_step(tmp_path) == 2
    path = ckpt.resolve_resume(tmp_path, mode="auto", resume_from_path=None)
    state = ckpt.load_checkpoint(path)
    assert state["actor"]["model"]["w"].tolist() == [2.0, 2.0] and state["actor"]["optimizer"] == {"s": 2}
    assert state["loader"] == {"epoch": 0, "position": 2} and state["trainer_state"] == {"global_step": 2, "seq": 20}
    ckpt.set_rng_state(state["rng"])
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expect
    assert ckpt.resolve_resume(tmp_path, mode="disable", resume_from_path=None) is None
    explicit = ckpt.resolve_resume(tmp_path, mode="resume_path", resume_from_path=str(tmp_path / "global_step_1"))
    assert ckpt.load_checkpoint(explicit)["loader"]["position"] == 1
    with pytest.raises(ValueError, match="global_step_N"):
        ckpt.resolve_resume(tmp_path, mode="resume_path", resume_from_path=str(tmp_path))


def test_uncommitted_step_is_ignored(tmp_path):
    _save(tmp_path, 1)
    # a crash while writing step 2: its folder exists only as .tmp, the marker still says 1
    (tmp_path / "global_step_2.tmp" / "actor").mkdir(parents=True)
    assert ckpt.latest_step(tmp_path) == 1
    _save(tmp_path, 2)  # a later save replaces the leftover
    assert ckpt.latest_step(tmp_path) == 2 and not (tmp_path / "global_step_2.tmp").exists()
    (tmp_path / ckpt.MARKER).write_text("7")
    with pytest.raises(FileNotFoundError, match="global_step_7"):
        ckpt.latest_step(tmp_path)


def test_prune_keeps_newest(tmp_path):
    for s in (1, 2, 3, 4):
        _save(tmp_path, s)
    removed = ckpt.prune(tmp_path, 2)
    assert sorted(p.name for p in removed) == ["global_step_1", "global_step_2"]
    assert sorted(p.name for p in tmp_path.glob("global_step_*")) == ["global_step_3", "global_step_4"]
    assert ckpt.prune(tmp_path, None) == []


def test_reading_a_pruned_checkpoint_says_which_step_is_gone(tmp_path, monkeypatch):
    """An export or the playground asking for a checkpoint the run pruned meanwhile: CheckpointGone (a
    FileNotFoundError) naming the step, not the path; also when it vanishes while being read."""
    import shutil

    from trainer.export import export_checkpoint

    with pytest.raises(ckpt.CheckpointGone, match=r"^the checkpoint of step 12 is no longer on disk") as err:
        ckpt.read_actor_model(tmp_path / "global_step_12")
    assert isinstance(err.value, FileNotFoundError) and str(tmp_path) not in str(err.value)
    step = tmp_path / "global_step_4"
    (step / "actor").mkdir(parents=True)
    (step / "actor" / "model.pt").write_bytes(b"")
    real_load = torch.load

    def load_while_pruned(path, *args, **kwargs):  # the run prunes the step as its file is opened
        shutil.rmtree(step)
        return real_load(path, *args, **kwargs)

    monkeypatch.setattr(torch, "load", load_while_pruned)
    with pytest.raises(ckpt.CheckpointGone, match="step 4"):
        ckpt.read_actor_model(step)
    with pytest.raises(ckpt.CheckpointGone, match="step 4"):
        export_checkpoint({}, step, tmp_path / "export")
