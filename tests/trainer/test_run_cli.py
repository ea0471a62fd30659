"""`python -m trainer run` argument handling: spec vs recipe, overrides (after options too), errors, a
missing tracker, --prepare-demo."""
from __future__ import annotations

import json
import sys

from trainer.run import build_config, main, prepare_demo
from trainer.recipes import get_recipe


def test_bad_override_and_missing_paths_exit_2(capsys):
    assert main(["--recipe", "cpu_smoke", "actor_rollout_ref.rollout.nope=1"]) == 2
    assert "nope" in capsys.readouterr().err
    assert main(["--recipe", "cpu_smoke"]) == 2  # no data / model path
    assert "data.train_files" in capsys.readouterr().err
    assert main(["--recipe", "no_such_recipe"]) == 2


def test_spec_file_overrides_and_output(tmp_path):
    import argparse

    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(get_recipe("cpu_smoke").to_dict()))
    args = argparse.Namespace(spec=str(spec), recipe=None, overrides=["actor_rollout_ref.rollout.n=4"],
                              output=str(tmp_path / "o"))
    cfg = build_config(args)
    assert cfg.actor_rollout_ref.rollout.n == 4 and cfg.trainer.default_local_dir == str(tmp_path / "o")


def test_prepare_demo_fills_model_and_data(tmp_path, monkeypatch):
    from trainer.config import apply_overrides

    cfg = apply_overrides(get_recipe("cpu_smoke"), {"trainer.default_local_dir": str(tmp_path / "run"),
                                                   "actor_rollout_ref.model.path": str(tmp_path / "given")})
    out = prepare_demo(cfg)
    assert out.actor_rollout_ref.model.path == str(tmp_path / "given")  # never overwritten
    assert out.data.train_files == str(tmp_path / "run" / "demo_data" / "train.jsonl")
    rows = (tmp_path / "run" / "demo_data" / "train.jsonl").read_text().splitlines()
    assert len(rows) == 256 and json.loads(rows[0])["data_source"] == "arith"


def test_overrides_may_follow_an_option(tmp_path, tiny_model_dir, demo_data_dir, monkeypatch):
    # As a verl user types them: argparse alone stops taking positionals at the first option, so
    # "--output DIR key=value" was refused.
    import trainer.run as run_module

    got = []

    def fake_run(cfg):
        got.append(cfg)
        return 0

    monkeypatch.setattr(run_module, "run", fake_run)
    rc = main(["--recipe", "cpu_smoke", f"actor_rollout_ref.model.path={tiny_model_dir}", "--output",
               str(tmp_path / "out"), f"data.train_files={demo_data_dir / 'train.jsonl'}", "trainer.project_name='demo'"])
    assert rc == 0
    (cfg,) = got
    assert cfg.trainer.default_local_dir == str(tmp_path / "out") and cfg.trainer.project_name == "demo"
    assert cfg.data.train_files == str(demo_data_dir / "train.jsonl")


def test_a_missing_tracker_is_an_error_line_not_a_traceback(tmp_path, tiny_model_dir, demo_data_dir, monkeypatch,
                                                             capsys):
    # verl's default trainer.logger is [console, wandb]; without wandb installed the run says so and exits 2.
    monkeypatch.setitem(sys.modules, "wandb", None)  # importing it raises ImportError
    rc = main(["--recipe", "cpu_smoke", f"actor_rollout_ref.model.path={tiny_model_dir}",
               f"data.train_files={demo_data_dir / 'train.jsonl'}", f"trainer.default_local_dir={tmp_path / 'out'}",
               "trainer.logger=['console','wandb']"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("error: trainer.logger lists 'wandb' but 'wandb' is not installed")
    assert "Traceback" not in err
