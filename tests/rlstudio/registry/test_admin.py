"""The Django admin registers through the same services: a good reward function or tool set is saved
checked, a broken one shows its error on the form and nothing is saved; deleting there is audited."""
import pytest

from rlstudio.accounts.models import AuditEvent
from rlstudio.registry.models import RewardFunction, ToolSet

ADD = "/admin/registry/rewardfunction/add/"


def _post_reward(client, path, name="admin-reward"):
    return client.post(ADD, {"name": name, "description": "", "kind": "file", "path": str(path), "module": "",
                             "function": "compute_score", "sample_rows": ""})


@pytest.mark.django_db
def test_admin_adds_a_checked_reward_function(client, staff, write_reward):
    client.force_login(staff)
    assert client.get(ADD).status_code == 200
    resp = _post_reward(client, write_reward())
    assert resp.status_code == 302, resp.content.decode()[-2000:]
    reward = RewardFunction.objects.get(name="admin-reward")
    assert reward.status == "ready" and [r["score"] for r in reward.check_results] == [1.0, 0.0, 1.0]
    assert AuditEvent.objects.filter(action="reward_function.register", actor=staff).count() == 1
    change = client.get(f"/admin/registry/rewardfunction/{reward.pk}/change/")
    assert change.status_code == 200 and 'name="path"' not in change.content.decode()  # read-only there
    resp = client.post(f"/admin/registry/rewardfunction/{reward.pk}/delete/", {"post": "yes"})
    assert resp.status_code == 302 and not RewardFunction.objects.exists()
    assert AuditEvent.objects.filter(action="reward_function.delete").count() == 1


@pytest.mark.django_db
def test_admin_shows_a_broken_reward_functions_error_and_saves_nothing(client, staff, write_reward, tmp_path):
    client.force_login(staff)
    resp = _post_reward(client, write_reward("def compute_score(*a):\n    return None\n"))
    assert resp.status_code == 200
    page = resp.content.decode()
    assert "failed its check" in page and "returned NoneType" in page
    outside = tmp_path / "x.py"
    outside.write_text("def compute_score(*a):\n    return 1.0\n")
    assert "outside the reward roots" in _post_reward(client, outside).content.decode()
    assert not RewardFunction.objects.exists()


@pytest.mark.django_db
def test_admin_tool_sets_are_checked_too(client, staff):
    client.force_login(staff)
    add = "/admin/registry/toolset/add/"
    resp = client.post(add, {"name": "bad", "description": "", "config_yaml": "tools:\n  - class_name: os.system\n"})
    assert resp.status_code == 200 and "is not a registered tool" in resp.content.decode()
    assert not ToolSet.objects.exists()
    resp = client.post(add, {"name": "calc", "description": "", "config_yaml": "tools:\n  - class_name: calculator\n"})
    assert resp.status_code == 302 and ToolSet.objects.get().tools[0]["name"] == "calculator"
