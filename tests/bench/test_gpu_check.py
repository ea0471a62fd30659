"""bench/gpu_check.py's SGLang section without a GPU: the "not installed" report, and a dry run of its
wiring on the CPU (gloo, FSDP2 at world size 1, the trainer with rollout.name=sglang) over the
stand-in Engine from tests/trainer/rollout/test_sglang_engine.py. The dry run checks the code path a
GPU session will run (config keys, metric names, the release/resume probe, the report); the figures
it produces mean nothing.
"""
import argparse
import importlib.machinery
import json
import types

import pytest

from bench import gpu_check  # bench/ is a namespace package on the pytest pythonpath (".")
from tests.trainer.rollout.test_sglang_engine import FakeSGLangEngine


def args(**over):
    base = dict(preset="smoke", batch=2, n=2, sglang="only", sglang_steps=1, sglang_mem_fraction=0.2,
                sglang_engine_kwargs='{"attention_backend": "triton"}')
    return argparse.Namespace(**{**base, **over})


def test_not_installed_is_reported(tmp_path, monkeypatch):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "sglang" else find_spec(name, *a))
    (tmp_path / "results.json").write_text(json.dumps({"device": "x"}))
    (tmp_path / "results.md").write_text("main table\n")
    assert gpu_check.run_sglang_section(args(), tmp_path) == 0
    assert json.loads((tmp_path / "results.json").read_text()) == {
        "device": "x", "sglang": {"status": "not run: sglang not installed"}}
    assert (tmp_path / "results.md").read_text() == "main table\n\nSGLang hybrid engine: not run: sglang not installed\n"


def test_section_wiring_dry_run_on_cpu(monkeypatch):
    built = []

    class Engine(FakeSGLangEngine):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            built.append(self)

    fake = types.ModuleType("sglang")
    fake.__spec__ = importlib.machinery.ModuleSpec("sglang", None)
    fake.Engine = Engine
    monkeypatch.setitem(__import__("sys").modules, "sglang", fake)
    from trainer.config import checks

    original = checks._check_multi_turn

    def allow_sglang_on_cpu(cfg):  # the dry run only: the real check refuses sglang without a GPU
        try:
            original(cfg)
        except checks.ConfigError as exc:
            if "sglang needs a GPU" not in str(exc):
                raise

    monkeypatch.setattr(checks, "_check_multi_turn", allow_sglang_on_cpu)
    from trainer.rollout import base

    resolve = base.resolve_engine_name  # the engine resolution refuses sglang on the CPU as well

    def sglang_on_cpu(name, device=None):
        return name if name == "sglang" else resolve(name, device)

    monkeypatch.setattr(base, "resolve_engine_name", sglang_on_cpu)
    section = gpu_check.sglang_section(args(), device="cpu")
    (engine,) = built
    assert engine.kwargs["attention_backend"] == "triton" and engine.kwargs["enable_memory_saver"]
    assert engine.calls[-1] == ("shutdown",)  # trainer.close() shut the Engine down
    assert section["engine"] == "sglang" and section["fsdp2_sharded"]
    (step,) = section["steps"]
    assert step["perf/weight_sync_buckets"] >= 1 and "rollout_corr/kl" in step
    assert {"rollout", "update", "sync"} <= set(section["memory_by_phase"])
    assert section["probe"]["same_after_resume"] and len(section["probe"]["greedy_before"]) == 16
    kinds = [c[0] for c in engine.calls]
    assert kinds.count("release") == 2 and kinds.count("resume") == 2  # after the rollout and in the probe
    md = gpu_check.sglang_markdown(section)
    assert "| 1 |" in md and "Release/resume" in md


def test_results_are_written_as_the_check_goes(tmp_path, monkeypatch):
    """A run stopped (or failing) at step 2 still leaves the NCCL check and step 1 in results.json /
    results.md, with the error's last lines; --from-json then renders them into the docs without --out."""
    from trainer.loop import Trainer

    train_step = Trainer.train_step

    def step(self, s):
        if s == 2:
            raise RuntimeError("boom at step 2")
        return train_step(self, s)

    monkeypatch.setattr(Trainer, "train_step", step)
    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="boom"):
        gpu_check.main(["--device", "cpu", "--preset", "smoke", "--steps", "3", "--batch", "2", "--n", "2",
                        "--sglang", "skip", "--out", str(out)])
    res = json.loads((out / "results.json").read_text())
    assert res["nccl"]["all_reduce_ok"] and res["nccl"]["backend"] == "gloo" and res["fsdp2_sharded"]
    assert len(res["steps"]) == 1 and res["steps"][0]["timing_s/step"] > 0 and "boom at step 2" in res["error"]
    md = (out / "results.md").read_text()
    assert "| 1 |" in md and "| 2 |" not in md and "1 of 3 steps" in md and "boom at step 2" in md
    doc = tmp_path / "benchmarks.md"
    doc.write_text(f"# B\n\n{gpu_check.BEGIN}\npending\n{gpu_check.END}\n\nafter\n")
    assert gpu_check.main(["--from-json", str(out / "results.json"), "--write", str(doc)]) == 0
    text = doc.read_text()
    assert "pending" not in text and "| 1 |" in text and text.endswith("after\n")
