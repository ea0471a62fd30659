"""The demo task, evaluated as the platform's evaluation job runs it (`python -m trainer evaluate` with
a spec of the platform's shape): the warm-started demo model (the base, "step 0") against the
checkpoint of GRPO_STEPS GRPO steps of the demo recipe from it; the later one is better on pass@k.

Cost: the session fixture `demo_eval_run` (tests/fixtures/demo_eval.py: the warm start, 240 SFT steps on
two threads, and 10 GRPO steps, about 65 s in all on 2 quiet cores, built in the background from the
session's start; shared with the evaluation browser journey) and the evaluation (2 x 32 prompts x 4 samples, about 15 s). Measured there: base
pass@4 0.125, step 10 pass@4 0.719 (mean@4 0.031 -> 0.477).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest


from tests.conftest import DEMO_GRPO_STEPS as GRPO_STEPS
from tests.conftest import DEMO_PROMPTS as PROMPTS

K = 4


@pytest.mark.timeout(1800)  # with demo_eval_run's build: over 600 s on a loaded 2-core machine
def test_the_later_checkpoint_of_the_demo_task_is_better_on_pass_at_k(demo_eval_run, tmp_path):
    from trainer.evaluate_job import RESULTS, SAMPLES, main

    spec = {"config": demo_eval_run["config"], "data_file": str(demo_eval_run["test"]), "max_prompts": PROMPTS,
            "columns": [{"key": "base", "step": 0, "path": None},
                        {"key": str(GRPO_STEPS), "step": GRPO_STEPS, "path": str(demo_eval_run["step"])}],
            "k": K, "sampling": {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_new_tokens": 64, "seed": 0},
            "device": "cpu", "torch_threads": 1}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    assert main([str(tmp_path / "spec.json"), "--output", str(tmp_path / "out")]) == 0
    results = json.loads((tmp_path / "out" / RESULTS).read_text())
    base, trained = results["checkpoints"]
    assert (base["key"], base["base"], trained["key"]) == ("base", True, str(GRPO_STEPS))
    assert trained["pass_at_k"] > base["pass_at_k"] + 0.2, results["checkpoints"]
    assert trained["mean_at_k"] > base["mean_at_k"]
    samples = [json.loads(line) for line in (tmp_path / "out" / SAMPLES).read_text().splitlines()]
    assert len(samples) == 2 * PROMPTS * K
    # every figure is the samples': a cell's correct count is its stored transcripts' count
    cell = results["prompts"][0]["cells"][str(GRPO_STEPS)]
    mine = [s for s in samples if s["column"] == str(GRPO_STEPS) and s["prompt"] == 0]
    assert [s["sample"] for s in mine] == list(range(K)) and sum(s["correct"] for s in mine) == cell["correct"]
    assert all(s["turns"] and all(set(t) - {"tool_calls"} == {"role", "content"} for t in s["turns"]) for s in samples)
    calls = [c for s in samples for t in s["turns"] for c in t.get("tool_calls", [])]
    assert all(set(c) == {"name", "arguments"} and isinstance(c["arguments"], str) for c in calls)


def test_a_failing_job_writes_its_error_and_exits_1(tmp_path):
    from trainer.evaluate_job import ERROR, RESULTS, main

    (tmp_path / "spec.json").write_text(json.dumps({"config": {}, "data_file": str(tmp_path / "none.jsonl"),
                                                    "max_prompts": 1, "columns": [], "k": 1,
                                                    "sampling": {"temperature": 1.0, "top_p": 1.0, "top_k": -1,
                                                                 "max_new_tokens": 4}}))
    assert main([str(tmp_path / "spec.json"), "--output", str(tmp_path / "out")]) == 1
    error = json.loads((tmp_path / "out" / ERROR).read_text())["error"]
    assert error and not (tmp_path / "out" / RESULTS).exists()
    assert Path(tmp_path / "out").is_dir()


def test_a_checkpoint_pruned_since_the_evaluation_was_asked_fails_it_naming_the_step(tmp_path):
    """The run keeps max_actor_ckpt_to_keep checkpoints under the platform's cap: one an evaluation was
    asked for can be gone when the job starts. The job fails at once, saying which step and why, and
    the error names no server path."""
    from trainer.evaluate_job import ERROR, main

    gone = tmp_path / "runs" / "7" / "global_step_3"
    (tmp_path / "rows.jsonl").write_text("")
    (tmp_path / "spec.json").write_text(json.dumps({
        "config": {}, "data_file": str(tmp_path / "rows.jsonl"), "max_prompts": 1, "k": 1,
        "columns": [{"key": "3", "step": 3, "path": str(gone)}],
        "sampling": {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_new_tokens": 4}}))
    assert main([str(tmp_path / "spec.json"), "--output", str(tmp_path / "out")]) == 1
    error = json.loads((tmp_path / "out" / ERROR).read_text())["error"]
    assert error.startswith("CheckpointGone: the checkpoint of step 3 is no longer on disk: its run pruned it")
    assert str(tmp_path) not in error
