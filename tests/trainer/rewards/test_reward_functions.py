"""GSM8K strict/flexible scoring as verl does it, the arith reward, dispatch and custom functions."""
import pytest

from trainer.rewards import compute_score, get_reward_fn, load_custom_function
from trainer.rewards.gsm8k import compute_score as gsm8k_score
from trainer.rewards.gsm8k import extract_solution


def test_strict_takes_the_last_match_and_strips_commas():
    """verl's: the last `#### n` (a multi-turn response holds every attempt; the last one counts)."""
    assert extract_solution("a #### 9 then #### 1,234") == "1234"
    assert extract_solution("a #### 1,234 then #### 9") == "9"
    assert extract_solution("#### -3.5") == "-3.5"
    assert extract_solution("answer: 42") is None
    assert extract_solution("####42") is None  # strict needs the space


def test_only_the_last_300_characters_are_read():
    """As verl: the answer is looked for in the text's last 300 characters only."""
    assert extract_solution("#### 7" + " " * 300) is None
    assert extract_solution("#### 7" + " " * 294) == "7"
    assert extract_solution("12" + " " * 300, method="flexible") is None


def test_flexible_takes_last_valid_number():
    assert extract_solution("3 apples and 4 pears. .", method="flexible") == "4"
    assert extract_solution("no digits", method="flexible") is None
    assert extract_solution("total 1,000", method="flexible") == "1,000"  # verl keeps the comma
    with pytest.raises(ValueError):
        extract_solution("x", method="loose")


def test_gsm8k_scores():
    assert gsm8k_score("so #### 72", "72") == 1.0
    assert gsm8k_score("so #### 71", "72") == 0.0
    assert gsm8k_score("so #### 71", "72", format_score=0.1) == 0.1
    assert gsm8k_score("so 72", "72", format_score=0.1) == 0.0  # nothing extracted: 0, not format
    assert gsm8k_score("the answer is 72", "72", method="flexible") == 1.0
    assert gsm8k_score("#### 72.0", "72") == 0.0  # string compare, as verl


def test_default_dispatch():
    assert compute_score("openai/gsm8k", "#### 6 #### 5", "5") == 1.0
    assert compute_score("openai/gsm8k", "#### 5 #### 6", "5") == 0.0  # the last answer counts
    assert compute_score("gsm8k", "#### 6", "5") == 0.0
    assert compute_score("arith", "calc 1776\n#### 1776", 1776) == 1.0
    assert compute_score("demo_tool_arith", "#### -7", "-7") == 1.0
    assert compute_score("arith", "#### 1775", 1776) == 0.0
    assert compute_score("arith", "1776", 1776) == 0.0
    with pytest.raises(NotImplementedError, match="data_source"):
        compute_score("unknown/source", "#### 1", "1")


def test_get_reward_fn_by_name_and_format_score():
    fn = get_reward_fn({"reward": {"name": "gsm8k_flexible", "reward_kwargs": {}, "format_score": 0.0}})
    assert fn("x", "it is 9", "9") == 1.0
    fn = get_reward_fn({"reward": {"name": "default", "format_score": 0.25}})
    assert fn("openai/gsm8k", "#### 8", "9") == 0.25
    with pytest.raises(KeyError, match="not registered"):
        get_reward_fn({"reward": {"name": "nope"}})


def test_custom_reward_function(tmp_path):
    f = tmp_path / "my_reward.py"
    f.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None, bonus=0.0):\n"
                 "    return {'score': float(solution_str == ground_truth) + bonus, 'len': len(solution_str)}\n"
                 "VALUE = 3\n")
    fn = get_reward_fn({"custom_reward_function": {"path": str(f), "name": "compute_score"},
                        "reward": {"name": "default", "reward_kwargs": {"bonus": 0.5}}})
    assert fn("src", "ab", "ab", None) == {"score": 1.5, "len": 2}
    with pytest.raises(FileNotFoundError, match="no such file"):
        load_custom_function(tmp_path / "missing.py")
    with pytest.raises(AttributeError, match="defines no 'other'"):
        load_custom_function(f, "other")
    with pytest.raises(TypeError, match="not callable"):
        load_custom_function(f, "VALUE")
