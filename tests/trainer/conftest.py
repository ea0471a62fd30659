"""Shared trainer fixtures: a tiny model and the arithmetic demo data, built once per test session.

Both are made locally and deterministically (never downloaded): `tiny_model_dir` with
trainer.models.tiny.make_tiny_model(preset="smoke"), `demo_data_dir` with trainer.tasks.arith
(train.jsonl / test.jsonl in verl's row format, sft.jsonl conversations).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread():
    # Test machines may have 2 cores shared by several suites: one thread per test process
    # (docs/design.md §5, "Threads").
    # Only where a test module already loaded torch: importing it here would hide import-cost bugs.
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)
    yield


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    from trainer.models.tiny import make_tiny_model

    return Path(make_tiny_model(tmp_path_factory.mktemp("tiny_model"), preset="smoke", seed=0))


@pytest.fixture(scope="session")
def demo_data_dir(tmp_path_factory) -> Path:
    from trainer.tasks import arith

    out = tmp_path_factory.mktemp("demo_data")
    for name, rows in (("train.jsonl", arith.make_rl_rows("train", 64, seed=0)),
                       ("test.jsonl", arith.make_rl_rows("test", 8, seed=1)),
                       ("sft.jsonl", arith.make_sft_conversations(32, seed=2))):
        with open(out / name, "w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row) + "\n")
    return out
