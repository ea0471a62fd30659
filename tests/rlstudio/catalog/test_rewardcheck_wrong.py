"""The reward check's 'wrong' candidate differs from the ground truth whatever the truth looks like
(a huge integer once made the dataset page answer 500: int(float('9' * 400)) overflows)."""
import pytest

from rlstudio.catalog.rewardcheck import _wrong, candidates


@pytest.mark.parametrize("truth, wrong", [("18", "19"), ("2.5", "3"), ("-4", "-3"), ("9" * 400, "1" + "0" * 400),
                                          ("1e400", "1e4000"), ("inf", "inf0"), ("nan", "nan0"), ("abc", "abc0"),
                                          ("", "1")])
def test_wrong_answer_differs_from_the_truth(truth, wrong):
    assert _wrong(truth) == wrong != truth
    assert dict(candidates(truth, []))["wrong"].endswith(f"#### {wrong}")
