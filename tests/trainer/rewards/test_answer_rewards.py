"""The built-in rewards math_boxed, exact_match and multiple_choice: extraction and normalisation,
table-driven with hand-worked cases, hostile responses in bounded time, and the `default` routing."""

import time

import pytest

from trainer.rewards import compute_score, default_reward_name, get_reward_fn, registered_rewards
from trainer.rewards.math_answer import (
    extract_answer,
    is_equiv,
    last_boxed,
    normalize,
    number_value,
)
from trainer.rewards.text_answer import extract_choice, final_answer, normalize_text

BOXED = [
    ("so the answer is \\boxed{42}.", "42"),
    ("\\boxed{1} then \\boxed{2}", "2"),  # the last box
    ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),  # balanced inner braces
    ("\\fbox{7}", "7"),
    ("\\boxed {3}", "3"),
    ("\\boxed 5$ done", "5"),  # the bare form, up to "$"
    ("\\boxed{\\boxed{9}}", "9"),  # a box in a box: the inner one
    ("\\boxed{\\{1,2\\}}", "\\{1,2\\}"),  # escaped braces do not group
    ("\\boxed{4} and then \\boxed{5", "4"),  # the last box never closes: the one before
    ("\\boxed{x", None),
    ("\\boxedfoo{3}", None),  # another command
    ("no box here", None),
    ("", None),
]


@pytest.mark.parametrize("text,expected", BOXED)
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected


@pytest.mark.parametrize(
    "text,expected",
    [
        ("work...\nAnswer: 17", "17"),  # DAPO's answer line, when there is no box
        ("Answer: 3\nanswer:  $\\frac{1}{4}$ \nthanks", "$\\frac{1}{4}$"),
        ("Answer: 3 but \\boxed{4}", "4"),  # a box wins
        ("Answer:\n", None),
        ("nothing", None),
    ],
)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


NORMALISED = [
    ("\\dfrac{1}{2}", "\\frac{1}{2}"),
    ("\\tfrac12", "\\frac{1}{2}"),
    ("\\frac1{2}", "\\frac{1}{2}"),
    ("\\frac{3}4", "\\frac{3}{4}"),
    ("\\sqrt2", "\\sqrt{2}"),
    ("\\left( 1, 2 \\right)", "(1,2)"),
    ("10\\text{ cm}", "10"),
    ("5 \\mbox{inches}^2", "5"),
    ("10 cm", "10"),
    ("\\text{Evelyn}", "Evelyn"),
    ("\\textbf{\\text{(C)}}", "(C)"),
    ("90^\\circ", "90"),
    ("90^{\\circ}", "90"),
    ("50\\%", "50"),
    ("\\$18.90", "18.90"),
    ("x = 5", "5"),
    ("y_1=\\frac{1}{3}", "\\frac{1}{3}"),
    ("x=1, y=2", "x=1,y=2"),  # two equations stay
    ("12.", "12"),
    (".5", "0.5"),
    ("-.5", "-0.5"),
    ("1,000", "1000"),
    ("1{,}000,000", "1000000"),
    ("(1,2)", "(1,2)"),  # a pair, not a thousands separator
    ("3\\!\\,\\;\\:~4", "34"),
    ("  $ 7 $ ", "7"),
]


@pytest.mark.parametrize("raw,expected", NORMALISED)
def test_normalize(raw, expected):
    assert normalize(raw) == expected


@pytest.mark.parametrize(
    "text,value",
    [
        ("3", 3),
        ("-2", -2),
        ("0.50", 0.5),
        ("1/4", 0.25),
        ("\\frac{3}{4}", 0.75),
        ("-\\frac{1}{2}", -0.5),
        ("\\frac{1.5}{3}", 0.5),
        ("1/0", None),
        ("\\frac{1}{0}", None),
        ("x", None),
        ("\\sqrt{2}", None),
        ("1" * 5000, None),  # past Python's int() digit limit: no value, no crash
    ],
)
def test_number_value(text, value):
    got = number_value(text)
    assert (got is None) if value is None else float(got) == value


EQUIVALENT = [
    ("0.5", "\\frac{1}{2}"),
    ("1/2", "\\dfrac12"),
    ("0.50", ".5"),
    ("\\frac{2}{4}", "0.5"),
    ("x = 3", "3"),
    ("3.", "3"),
    ("10\\text{ cm}", "10"),
    ("\\left(1,2\\right)", "(1, 2)"),
    ("\\text{Evelyn}", "Evelyn"),
    ("1,000", "1000"),
    ("90^\\circ", "90"),
    ("25\\%", "25"),
]
NOT_EQUIVALENT = [
    ("0.33", "\\frac{1}{3}"),
    ("\\sqrt{8}", "2\\sqrt{2}"),
    ("3", "4"),
    ("(1,2)", "(2,1)"),
    ("x", "y"),
    ("", "0"),
]


@pytest.mark.parametrize("a,b", EQUIVALENT)
def test_equivalent(a, b):
    assert is_equiv(a, b) and is_equiv(b, a)


@pytest.mark.parametrize("a,b", NOT_EQUIVALENT)
def test_not_equivalent(a, b):
    assert not is_equiv(a, b)


@pytest.mark.parametrize(
    "response,truth,score",
    [
        ("The sum is $\\boxed{\\dfrac{1}{2}}$.", "0.5", 1.0),
        ("The sum is $\\boxed{\\dfrac{1}{2}}$.", "\\frac{1}{3}", 0.0),
        ("The sum is 1/2.", "\\frac{1}{2}", 0.0),  # no box, no Answer: line: nothing extracted
        (
            "\\boxed{5}",
            "Since ... we get \\boxed{5}.",
            1.0,
        ),  # a reference solution as the ground truth
        ("\\boxed{5}", ["4", "5"], 1.0),  # a list of acceptable answers
        ("\\boxed{5}", 5, 1.0),  # a number as the ground truth
        ("Answer: 204", "204", 1.0),
    ],
)
def test_math_boxed_scores(response, truth, score):
    assert compute_score("lighteval/MATH", response, truth) == score
    assert get_reward_fn({"reward": {"name": "math_boxed"}})("any", response, truth) == score


def test_math_boxed_format_score():
    fn = get_reward_fn({"reward": {"name": "math_boxed", "format_score": 0.1}})
    assert fn("x", "\\boxed{3}", "4") == 0.1  # answered, wrong
    assert fn("x", "no answer", "4") == 0.0  # nothing extracted


FINAL = [
    ("<answer> Paris </answer>", " Paris "),
    ("<answer>a</answer> then <answer>b</answer>", "b"),
    ("reasoning \\boxed{Paris}", "Paris"),
    ("steps\n#### Paris", " Paris"),
    ("I think the answer is: Paris.\nDone", ": Paris."),  # normalize_text strips the ":"
    ("Final Answer: London", " London"),
    ("Paris", "Paris"),
]


@pytest.mark.parametrize("text,expected", FINAL)
def test_final_answer(text, expected):
    assert final_answer(text) == expected


@pytest.mark.parametrize(
    "raw,expected",
    [
        ("  **Paris**. ", "paris"),
        ('"New   York"', "new york"),
        ("\u201cRome\u201d", "rome"),
        ("The Beatles", "the beatles"),
        ("U.S.A.", "u.s.a"),
        ("", ""),
    ],
)
def test_normalize_text(raw, expected):
    assert normalize_text(raw) == expected


@pytest.mark.parametrize(
    "response,truth,score",
    [
        ("The answer is Paris.", "paris", 1.0),
        ("<answer>paris</answer>", ["Lyon", "Paris"], 1.0),
        ("**Answer:** New York", "new york", 1.0),
        ("Paris", "London", 0.0),
        ("the city of Paris", "Paris", 0.0),  # exact, not contains
        ("", "Paris", 0.0),
    ],
)
def test_exact_match_scores(response, truth, score):
    assert get_reward_fn({"reward": {"name": "exact_match"}})("any", response, truth) == score
    assert compute_score("exact_match", response, truth) == score


CHOICES = [
    ("Answer: C", "C"),
    ("The answer is (B).", "B"),
    ("**Answer:** D", "D"),
    ("the correct answer is option E because", "E"),
    ("so $\\boxed{C}$", "C"),
    ("\\boxed{\\text{(a)}}", "A"),
    ("I considered (A) and (B); (D) fits.", "D"),
    ("Between A and B... it must be C.", "C"),
    ("Options:\nA) one\nB) two\nFinal: J", "J"),
    ("I think a cat is nice", None),  # "I" and "a" stand alone but mark no option
    ("The answer is a prime number", None),
    ("", None),
]


@pytest.mark.parametrize("text,expected", CHOICES)
def test_extract_choice(text, expected):
    assert extract_choice(text) == expected


@pytest.mark.parametrize(
    "response,truth,score",
    [
        ("Answer: C", "C", 1.0),
        ("Answer: C", "(c)", 1.0),
        ("Answer: C", "C.", 1.0),
        ("Answer: C", "B", 0.0),
        ("nothing chosen", "B", 0.0),
        ("Answer: C", "Paris", 0.0),
        ("Answer: K", "K", 0.0),  # only A-J are options
    ],
)
def test_multiple_choice_scores(response, truth, score):
    assert get_reward_fn({"reward": {"name": "multiple_choice"}})("any", response, truth) == score
    assert compute_score("cais/mmlu", response, truth) == score


@pytest.mark.parametrize(
    "source,name",
    [
        ("openai/gsm8k", "gsm8k"),
        ("arith", "arith"),
        ("lighteval/MATH", "math_boxed"),
        ("DigitalLearningGmbH/MATH-lighteval", "math_boxed"),
        ("HuggingFaceH4/MATH-500", "math_boxed"),
        ("math_dapo", "math_boxed"),
        ("aime2024", "math_boxed"),
        ("numina_olympiads", "math_boxed"),
        ("exact_match", "exact_match"),
        ("multiple_choice", "multiple_choice"),
        ("cais/mmlu", "multiple_choice"),
        ("unknown/source", None),
        ("", None),
    ],
)
def test_default_routes_by_data_source(source, name):
    assert default_reward_name(source) == name


def test_unknown_source_error_names_the_source_and_the_rewards():
    with pytest.raises(NotImplementedError) as err:
        compute_score("my/dataset", "\\boxed{1}", "1")
    message = str(err.value)
    assert "'my/dataset'" in message and "reward.name" in message
    assert all(
        name in message for name in ("math_boxed", "exact_match", "multiple_choice", "gsm8k")
    )


def test_the_new_rewards_are_registered():
    assert {"math_boxed", "exact_match", "multiple_choice"} <= set(registered_rewards())


HOSTILE = [
    "\\boxed{" * 200_000,  # unbalanced, nested boxes that never close
    "\\boxed{" * 100_000 + "}" * 100_000,  # deeply nested and balanced
    "{" * 300_000 + "\\boxed{1}",
    "}" * 300_000,
    "\\" * 500_001,
    "Answer:" * 100_000,
    "answer is " * 100_000 + "(",
    "A " * 200_000 + "x",
    "(A" * 200_000,
    "<answer>" * 100_000,
    "####" + " " * 500_000 + "x",
    "1" * 400_000,
    "\\boxed{" + "1" * 400_000 + "}",  # a huge answer
    "\\boxed{" + "\\text{" * 50_000 + "}" * 50_000 + "}",
    "\\boxed{" + "\\frac{" * 100 + "}" * 100 + "}",
]


@pytest.mark.parametrize("name", ["math_boxed", "exact_match", "multiple_choice"])
def test_hostile_responses_score_in_bounded_time(name):
    fn = get_reward_fn({"reward": {"name": name}})
    for text in HOSTILE:
        started = time.perf_counter()
        score = fn("x", text, text[:2000])
        elapsed = time.perf_counter() - started
        assert score in (0.0, 1.0)
        assert elapsed < 2.0, f"{name} took {elapsed:.2f}s on {text[:20]!r}... ({len(text)} chars)"


def test_nested_boxes_deep_give_the_innermost():
    assert last_boxed("\\boxed{" * 1000 + "7" + "}" * 1000) == "7"
