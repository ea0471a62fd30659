"""Reward functions: staff register a file under the reward root or a module; the check scores the
sample rows in a separate process before anything is saved; a broken one (exception, syntax error,
import error, wrong return type, too slow), a path outside the root (plain, `..`, symlink) and a
non-staff caller are refused; the runs app resolves a ready one to its file."""
import os
import time
from pathlib import Path

import pytest

from rlstudio.accounts.models import AuditEvent
from rlstudio.registry.models import RewardFunction
from rlstudio.registry.services import (RegistryRefused, reward_function_check, reward_function_names,
                                        reward_function_resolve)

URL = "/api/v1/reward-functions/"
SIG = "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n"


def register(api, path, name="my-reward", **fields):
    return api.post(URL, {"name": name, "kind": "file", "path": str(path), **fields}, format="json")


def refused(resp, field: str, *words: str) -> str:
    assert resp.status_code == 400, (resp.status_code, resp.json())
    error = resp.json()["error"]
    assert error["field"] == field, error
    for word in words:
        assert word in error["message"], error
    return error["message"]


@pytest.mark.django_db
def test_a_good_file_is_ready_with_the_scores_of_its_sample_rows(staff_api, write_reward, staff):
    path = write_reward()
    resp = register(staff_api, path, description="strict #### match")
    assert resp.status_code == 201, resp.json()
    body = resp.json()
    # The default rows: a right and a wrong GSM8K-style answer, a right arithmetic-demo answer.
    assert body["status"] == "ready" and body["scores"] == [1.0, 0.0, 1.0]
    assert body["path"] == str(path.resolve()) and body["checked_path"] == str(path.resolve())
    reward = RewardFunction.objects.get(name="my-reward")
    assert reward.created_by == staff and len(reward.checked_sha256) == 64 and reward.error == ""
    event = AuditEvent.objects.get(action="reward_function.register")
    assert event.actor == staff and event.data["scores"] == [1.0, 0.0, 1.0]
    assert reward_function_names() == ["my-reward"]


@pytest.mark.django_db
def test_operator_sample_rows_are_scored_and_an_expected_score_compared(staff_api, write_reward):
    path = write_reward()
    rows = [{"data_source": "mine", "solution_str": "#### 3", "ground_truth": "3", "expected": 1.0},
            {"data_source": "mine", "solution_str": "#### 4", "ground_truth": "3", "expected": 0.0}]
    resp = register(staff_api, path, sample_rows=rows)
    assert resp.status_code == 201 and resp.json()["scores"] == [1.0, 0.0]
    rows[1]["expected"] = 0.5
    refused(register(staff_api, path, name="other", sample_rows=rows), "sample_rows", "sample row 1",
            "scored", "expected 0.5")
    refused(register(staff_api, path, name="other", sample_rows=[{"ground_truth": 1}]), "sample_rows",
            "solution_str")
    assert list(RewardFunction.objects.values_list("name", flat=True)) == ["my-reward"]


@pytest.mark.django_db
@pytest.mark.parametrize("body, field, words", [
    (SIG + "    return 1 / 0\n", "path", ["sample row 0", "ZeroDivisionError: division by zero"]),
    (SIG + "    return 'yes'\n", "path", ["returned str 'yes'"]),
    (SIG + "    return {'value': 1}\n", "path", ["without 'score'"]),
    ("def compute_score(:\n", "path", ["does not load", "SyntaxError"]),
    ("import no_such_package_xyz\n" + SIG + "    return 0.0\n", "path",
     ["does not load", "No module named 'no_such_package_xyz'"]),
    ("def other(*a):\n    return 0.0\n", "function", ["defines no 'compute_score'"]),
])
def test_a_broken_reward_function_is_refused_with_its_error_and_nothing_saved(staff_api, write_reward, body,
                                                                               field, words):
    message = refused(register(staff_api, write_reward(body)), field, "failed its check", *words)
    assert "Traceback" not in message
    assert not RewardFunction.objects.exists()
    assert not AuditEvent.objects.filter(action__startswith="reward_function").exists()


@pytest.mark.django_db
def test_a_reward_function_slower_than_the_limit_is_killed_and_refused(staff_api, write_reward, settings, tmp_path):
    settings.RLSTUDIO_REGISTRY_CHECK_TIMEOUT_S = 3
    marker = tmp_path / "still-running"
    grandchild = f"import time; time.sleep(30); open({str(marker)!r}, 'w')"
    body = ("import subprocess, sys, time\n" + SIG
            # a child of its own too: the whole process group must go
            + f"    subprocess.Popen([sys.executable, '-c', {grandchild!r}])\n"
            + "    time.sleep(60)\n    return 1.0\n")
    started = time.monotonic()
    refused(register(staff_api, write_reward(body)), "path", "too slow", "did not finish within 3 s")
    assert time.monotonic() - started < 20
    assert not RewardFunction.objects.exists()
    time.sleep(1)
    ps = os.popen("ps -eo args").read()
    assert str(marker) not in ps  # the grandchild was killed with its group


@pytest.mark.django_db
def test_paths_outside_the_reward_root_are_refused(staff_api, write_reward, reward_root, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    escapee = write_reward(folder=outside, name="evil.py")
    (reward_root / "link.py").symlink_to(escapee)
    (reward_root / "sub").mkdir()
    cases = [
        (escapee, ["outside the reward roots", "RLSTUDIO_REWARD_ROOTS"]),
        (reward_root / "link.py", ["outside the reward roots", "through a symlink"]),
        (f"{reward_root}/sub/../../outside/evil.py", ["contains '..'"]),
        ("/etc/passwd", ["not a Python file"]),
        ("relative/reward.py", ["not an absolute path"]),
        (reward_root / "missing.py", ["no such file"]),
    ]
    for path, words in cases:
        refused(register(staff_api, path), "path", *words)
    assert not RewardFunction.objects.exists()


@pytest.mark.django_db
def test_a_symlink_inside_the_root_is_stored_as_its_real_path(staff_api, write_reward, reward_root):
    real = write_reward(name="real.py")
    (reward_root / "alias.py").symlink_to(real)
    resp = register(staff_api, reward_root / "alias.py")
    assert resp.status_code == 201, resp.json()
    assert resp.json()["path"] == str(real.resolve())


@pytest.mark.django_db
def test_only_staff_register_and_delete_everyone_lists_the_ready_ones(staff_api, user_api, write_reward):
    path = write_reward()
    resp = register(user_api, path)
    assert resp.status_code == 403 and resp.json()["error"]["code"] == "permission_denied"
    assert not RewardFunction.objects.exists()
    assert register(staff_api, path).status_code == 201
    RewardFunction.objects.create(name="half-done", kind="file", path=str(path))  # never checked: not listed
    listed = user_api.get(URL).json()
    assert [r["name"] for r in listed] == ["my-reward"]
    assert "path" not in listed[0] and listed[0]["scores"] == [1.0, 0.0, 1.0]
    assert user_api.get(URL + "half-done/").status_code == 404
    assert [r["name"] for r in staff_api.get(URL).json()] == ["half-done", "my-reward"]
    assert user_api.delete(URL + "my-reward/").status_code == 403
    assert staff_api.delete(URL + "my-reward/").status_code == 204
    assert AuditEvent.objects.filter(action="reward_function.delete", data__name="my-reward").exists()
    assert reward_function_names() == []


@pytest.mark.django_db
def test_names_are_unique_and_never_a_built_in(staff_api, write_reward):
    path = write_reward()
    assert register(staff_api, path).status_code == 201
    refused(register(staff_api, path), "name", "already registered")
    refused(register(staff_api, path, name="gsm8k"), "name", "built-in")
    refused(register(staff_api, path, name="../x"), "name", "not a valid name")
    refused(staff_api.post(URL, {"name": "m", "kind": "file", "path": str(path), "module": "a.b"}, format="json"),
            "module", "takes a path")


@pytest.mark.django_db
def test_resolve_gives_the_checked_file_and_refuses_a_changed_one(staff_api, write_reward, staff):
    path = write_reward()
    register(staff_api, path, function="compute_score")
    resolved = reward_function_resolve(name="my-reward")
    assert (resolved.path, resolved.function) == (str(path.resolve()), "compute_score")
    assert Path(resolved.path).is_absolute()
    with pytest.raises(RegistryRefused, match="no reward function named 'nope'"):
        reward_function_resolve(name="nope")
    path.write_text(SIG + "    return 1 / 0\n")
    with pytest.raises(RegistryRefused, match="changed since it was checked"):
        reward_function_resolve(name="my-reward")
    reward = reward_function_check(reward_function=RewardFunction.objects.get(name="my-reward"), by=staff)
    assert reward.status == "broken" and "ZeroDivisionError" in reward.error
    with pytest.raises(RegistryRefused, match="is broken: .*ZeroDivisionError"):
        reward_function_resolve(name="my-reward")
    assert reward_function_names() == []
    path.write_text(SIG + "    return 0.5\n")
    resp = staff_api.post(URL + "my-reward/check/")
    assert resp.status_code == 200 and resp.json()["status"] == "ready" and resp.json()["scores"] == [0.5] * 3
    assert reward_function_resolve(name="my-reward").path == str(path.resolve())
    assert AuditEvent.objects.filter(action="reward_function.check").count() == 2


@pytest.mark.django_db
def test_a_module_reward_resolves_to_the_modules_file(staff_api):
    import trainer.rewards

    resp = staff_api.post(URL, {"name": "verl-default", "kind": "module", "module": "trainer.rewards",
                                "function": "compute_score"}, format="json")
    assert resp.status_code == 201, resp.json()
    assert resp.json()["scores"] == [1.0, 0.0, 1.0]
    resolved = reward_function_resolve(name="verl-default")
    assert resolved.path == str(Path(trainer.rewards.__file__).resolve()) and resolved.function == "compute_score"
    refused(staff_api.post(URL, {"name": "x", "kind": "module", "module": "os; rm"}, format="json"), "module",
            "not a dotted module path")
    refused(staff_api.post(URL, {"name": "x", "kind": "module", "module": "no_such_pkg_xyz.rewards"}, format="json"),
            "module", "does not load", "No module named")
