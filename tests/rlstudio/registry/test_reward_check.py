"""The dataset page's reward check offers the operator's ready reward functions next to the built-ins
and scores a dataset's answers with one (in the registry's separate, time-limited process)."""
import json

import pytest
from rest_framework.test import APIClient

from rlstudio.catalog.rewardcheck import CheckError, reward_check, reward_names

SIG = "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n"
ROWS = [{"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": "2 + 3?"}],
         "reward_model": {"style": "rule", "ground_truth": "5"},
         "extra_info": {"index": 0, "tools_kwargs": {"calc_gsm8k_reward": {"create_kwargs": {"ground_truth": "5"}}}}},
        {"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": "4 * 4?"}],
         "reward_model": {"style": "rule", "ground_truth": "16"}, "extra_info": {"index": 1}}]


@pytest.fixture
def ready_dataset(make_dataset, alice, tmp_path):
    converted = tmp_path / "converted.jsonl"
    converted.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return make_dataset(alice, status="ready", converted_path=str(converted), row_index=[0], num_rows=len(ROWS))


@pytest.fixture
def registered(staff_api, write_reward):
    path = write_reward(SIG + "    return {'score': 0.75 if '####' in solution_str else 0.25, 'index': extra_info['index']}\n")
    resp = staff_api.post("/api/v1/reward-functions/", {"name": "lenient", "kind": "file", "path": str(path)},
                          format="json")
    assert resp.status_code == 201, resp.json()
    return path


@pytest.mark.django_db
def test_the_reward_check_scores_with_a_registered_function(registered, ready_dataset, alice):
    assert reward_names()[-1] == "lenient" and "default" in reward_names()
    client = APIClient()
    client.force_authenticate(alice)
    resp = client.post(f"/api/v1/datasets/{ready_dataset.pk}/reward-check/",
                       {"reward": "lenient", "tools": ["calc_gsm8k_reward"], "rows": 2}, format="json")
    assert resp.status_code == 200, resp.json()
    by = {(r["row"], r["kind"]): r for r in resp.json()["results"]}
    for row in (0, 1):
        assert by[(row, "correct")]["score"] == 0.75 and by[(row, "no_marker")]["score"] == 0.25
    assert by[(0, "tool_call:calc_gsm8k_reward")]["tool_score"] == 1.0


@pytest.mark.django_db
def test_the_dataset_page_lists_registered_reward_functions(registered, ready_dataset, alice, client):
    client.force_login(alice)
    page = client.get(f"/datasets/{ready_dataset.pk}/").content.decode()
    assert '<option value="lenient">lenient</option>' in page and '<option value="gsm8k">' in page
    page = client.post(f"/datasets/{ready_dataset.pk}/", {"action": "reward_check", "reward": "lenient"}).content.decode()
    assert "0.75" in page and "0.25" in page


@pytest.mark.django_db
def test_a_registered_function_failing_on_an_answer_is_shown_on_that_row(staff_api, write_reward):
    path = write_reward(SIG + "    if '####' not in solution_str:\n        raise ValueError('no marker')\n    return 1.0\n")
    assert staff_api.post("/api/v1/reward-functions/", {"name": "picky", "kind": "file", "path": str(path),
                          "sample_rows": [{"solution_str": "#### 1", "ground_truth": "1"}]},
                          format="json").status_code == 201
    results = reward_check(ROWS[:1], reward_name="picky", tool_names=[])
    assert [(r.kind, r.score) for r in results if not r.error] == [("correct", 1.0), ("wrong", 1.0)]
    (no_marker,) = [r for r in results if r.error]
    assert no_marker.kind == "no_marker" and "ValueError: no marker" in no_marker.error
    with pytest.raises(CheckError, match="unknown reward 'nope'"):
        reward_check(ROWS, reward_name="nope", tool_names=[])
