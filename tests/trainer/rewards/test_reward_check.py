"""`python -m trainer.rewards.check`: a reward function loaded as the trainer loads it, called as the
trainer's loop calls it, each row's score or error reported; a file that does not load is reported
with where it broke."""
import json
import subprocess
import sys

import pytest

from trainer.rewards import module_file
from trainer.rewards.check import score_rows, score_value

ROWS = [{"data_source": "openai/gsm8k", "solution_str": "so #### 72", "ground_truth": "72", "extra_info": {}},
        {"data_source": "arith", "solution_str": "#### 5", "ground_truth": "6", "extra_info": {"index": 1}}]


def _file(tmp_path, body: str, name: str = "reward.py"):
    path = tmp_path / name
    path.write_text(body)
    return str(path)


def test_a_good_file_scores_each_row_as_the_trainer_calls_it(tmp_path):
    path = _file(tmp_path, "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                           "    ok = solution_str.endswith(str(ground_truth))\n"
                           "    return {'score': float(ok), 'turns': extra_info['num_turns']}\n")
    out = score_rows({"path": path, "rows": ROWS})
    assert out == {"ok": True, "path": path, "results": [{"score": 1.0, "extra": {"turns": 1}},
                                                         {"score": 0.0, "extra": {"turns": 1}}]}


@pytest.mark.parametrize("body, stage, words", [
    ("def compute_score(:\n", "load", "SyntaxError"),
    ("import no_such_module_xyz\n", "load", "ModuleNotFoundError: No module named 'no_such_module_xyz'"),
    ("raise RuntimeError('boom at import')\n", "load", "RuntimeError: boom at import"),
    ("import sys\nsys.exit(3)\n", "load", "SystemExit: 3"),
    ("def other(*a):\n    return 1.0\n", "function", "defines no 'compute_score'"),
    ("compute_score = 3\n", "function", "is not callable"),
])
def test_a_file_that_does_not_load_says_where(tmp_path, body, stage, words):
    out = score_rows({"path": _file(tmp_path, body), "rows": ROWS})
    assert out["ok"] is False and out["stage"] == stage
    assert words in out["error"], out["error"]


def test_a_syntax_error_names_the_file_and_line(tmp_path):
    path = _file(tmp_path, "x = 1\ndef compute_score(:\n")
    error = score_rows({"path": path, "rows": ROWS})["error"]
    assert path in error and "line 2" in error


@pytest.mark.parametrize("body, words", [
    ("    return 1 / 0\n", "ZeroDivisionError: division by zero"),
    ("    return 'high'\n", "returned str 'high'"),
    ("    return None\n", "returned NoneType"),
    ("    return {'value': 1.0}\n", "returned a dict without 'score'"),
    ("    return float('nan')\n", "not a finite number"),
    ("    return [1.0]\n", "returned list"),
])
def test_each_rows_error_is_reported(tmp_path, body, words):
    path = _file(tmp_path, "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n" + body)
    out = score_rows({"path": path, "rows": ROWS[:1]})
    assert out["ok"] is True and "score" not in out["results"][0]
    assert words in out["results"][0]["error"], out["results"][0]


def test_numbers_and_score_dicts_are_scores():
    assert score_value(1) == (1.0, {})
    assert score_value({"score": 0.5, "acc": True}) == (0.5, {"acc": True})
    with pytest.raises(ValueError, match="returned bool"):
        score_value(True)


def test_a_module_is_resolved_to_its_file():
    import trainer.rewards as rewards

    assert module_file("trainer.rewards") == str(__import__("pathlib").Path(rewards.__file__).resolve())
    out = score_rows({"module": "trainer.rewards", "function": "compute_score", "rows": ROWS})
    assert out["ok"] is True and [r["score"] for r in out["results"]] == [1.0, 0.0]
    for bad, words in [("os;rm", "not a dotted module path"), ("no_such_pkg_xyz.mod", "No module named"),
                       ("trainer.rewards.no_such", "no module named"), ("import.x", "not a dotted module path")]:
        out = score_rows({"module": bad, "rows": ROWS})
        assert out["ok"] is False and words in out["error"], (bad, out)


def test_the_command_writes_its_result(tmp_path):
    path = _file(tmp_path, "def compute_score(*a, **k):\n    return 0.25\n")
    request, result = tmp_path / "req.json", tmp_path / "res.json"
    request.write_text(json.dumps({"path": path, "rows": ROWS}))
    proc = subprocess.run([sys.executable, "-m", "trainer.rewards.check", str(request), str(result)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert [r["score"] for r in json.loads(result.read_text())["results"]] == [0.25, 0.25]
