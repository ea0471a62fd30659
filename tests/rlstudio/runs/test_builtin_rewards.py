"""The built-in rewards math_boxed, exact_match and multiple_choice are chosen the way a user chooses
gsm8k: by reward.name through the API (201; an unknown name is a 400 naming the field), on the run
form, and in the dataset page's reward check, whose correct answer scores 1 and wrong answer 0.

Real PostgreSQL; no Ray or worker.
"""

import json

import pytest
from django.test import Client

from rlstudio.catalog.rewardcheck import reward_check
from rlstudio.runs import launch
from rlstudio.runs.models import Run

pytestmark = pytest.mark.django_db
NEW = ["math_boxed", "exact_match", "multiple_choice"]


def _body(ready, **overrides):
    return {
        "name": "r1",
        "dataset": ready["dataset"].pk,
        "model": ready["model"].pk,
        "preset": "cpu_smoke",
        "overrides": overrides,
    }


@pytest.mark.parametrize("name", NEW)
def test_the_api_creates_a_run_with_each_new_reward(api, ready, name):
    resp = api.post("/api/v1/runs/", _body(ready, **{"reward.name": name}), format="json")
    assert resp.status_code == 201, resp.content
    config = Run.objects.get(pk=resp.json()["id"]).config
    assert config["reward"]["name"] == name
    assert config["custom_reward_function"]["path"] is None  # a built-in: no file


def test_an_unknown_reward_name_is_a_400_naming_the_field(api, ready):
    resp = api.post("/api/v1/runs/", _body(ready, **{"reward.name": "math_boxd"}), format="json")
    assert resp.status_code == 400, resp.content
    error = resp.json()["error"]
    assert error["field"] == "reward.name", error
    assert "math_boxd" in json.dumps(error)
    assert Run.objects.count() == 0


def test_the_form_offers_and_launches_the_new_rewards(alice, ready):
    page = Client()
    page.force_login(alice)
    html = page.get("/runs/new/").content.decode()
    assert all(f'value="{name}"' in html for name in NEW)
    assert set(NEW) <= set(launch.reward_names())
    resp = page.post(
        "/runs/new/",
        {
            "name": "f1",
            "dataset": ready["dataset"].pk,
            "model": ready["model"].pk,
            "preset": "cpu_smoke",
            "gpus": 0,
            "reward_name": "math_boxed",
        },
    )
    assert resp.status_code == 302, resp.content.decode()[-3000:]
    assert Run.objects.get(name="f1").config["reward"]["name"] == "math_boxed"


ROWS = [
    {
        "data_source": "lighteval/MATH",
        "prompt": [{"role": "user", "content": "1/4 + 1/4?"}],
        "reward_model": {"style": "rule", "ground_truth": "\\frac{1}{2}"},
    },
    {
        "data_source": "cais/mmlu",
        "prompt": [{"role": "user", "content": "Pick one. A) x B) y C) z"}],
        "reward_model": {"style": "rule", "ground_truth": "C"},
    },
]


@pytest.mark.parametrize(
    "reward,rows",
    [
        ("math_boxed", ROWS[:1]),
        ("multiple_choice", ROWS[1:]),
        ("exact_match", ROWS),
        ("default", ROWS),
    ],
)
def test_the_reward_check_scores_the_correct_answer_1_and_the_wrong_0(reward, rows):
    by = {r.kind: r.score for r in reward_check(rows[:1], reward_name=reward, tool_names=[])}
    assert by["correct"] == 1.0 and by["wrong"] == 0.0
    if len(rows) > 1:
        by = {r.kind: r.score for r in reward_check(rows[1:], reward_name=reward, tool_names=[])}
        assert by["correct"] == 1.0 and by["wrong"] == 0.0


def test_the_reward_check_names_an_unrouted_data_source():
    from rlstudio.catalog.rewardcheck import CheckError

    row = {**ROWS[0], "data_source": "my/homework"}
    with pytest.raises(CheckError, match="my/homework") as err:
        reward_check([row], reward_name="default", tool_names=[])
    assert "math_boxed" in str(err.value)


def _converted(make_dataset, alice, tmp_path, source, name):
    path = tmp_path / f"{name}.jsonl"
    rows = [{**ROWS[0], "data_source": source}] * 3
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return make_dataset(
        alice, name=name, status="ready", converted_path=str(path), row_index=[0], num_rows=3
    )


@pytest.mark.parametrize(
    "source,reward,status",
    [
        ("lighteval/MATH", "default", 201),  # routed to math_boxed
        ("my/homework", "math_boxed", 201),  # a named reward scores any data_source
        ("my/homework", "default", 400),
    ],
)
def test_launch_refuses_default_on_a_data_source_it_does_not_route(
    api, ready, alice, make_dataset, tmp_path, source, reward, status
):
    data = _converted(make_dataset, alice, tmp_path, source, "mathy")
    body = {**_body(ready, **{"reward.name": reward}), "dataset": data.pk}
    resp = api.post("/api/v1/runs/", body, format="json")
    assert resp.status_code == status, resp.content
    if status == 400:
        error = resp.json()["error"]
        assert error["field"] == "reward.name"
        assert "'my/homework'" in error["message"] and "math_boxed" in error["message"]
        assert "'mathy'" in error["message"]


def test_launch_checks_the_validation_dataset_too(api, ready, alice, make_dataset, tmp_path):
    train = _converted(make_dataset, alice, tmp_path, "lighteval/MATH", "train")
    val = _converted(make_dataset, alice, tmp_path, "other/source", "val")
    body = {**_body(ready), "dataset": train.pk, "val_dataset": val.pk}
    resp = api.post("/api/v1/runs/", body, format="json")
    assert resp.status_code == 400, resp.content
    error = resp.json()["error"]
    assert error["field"] == "reward.name" and "'other/source'" in error["message"]
    assert "validation dataset 'val'" in error["message"]
