"""Fixtures of the registry tests: a reward root of the test's own, API clients for staff and a user,
and a helper that writes reward files."""
import pytest
from rest_framework.test import APIClient

GOOD_REWARD = '''
import re

def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    m = re.search(r"#### (-?[0-9.,]+)", solution_str)
    return 1.0 if m and m.group(1).replace(",", "") == str(ground_truth) else 0.0
'''


@pytest.fixture
def reward_root(settings, tmp_path):
    root = tmp_path / "rewards"
    root.mkdir()
    settings.RLSTUDIO_REWARD_ROOTS = [str(root)]
    settings.RLSTUDIO_REGISTRY_CHECK_TIMEOUT_S = 60  # a loaded 2-core test machine; the timeout test lowers it
    return root


@pytest.fixture
def write_reward(reward_root):
    def write(body: str = GOOD_REWARD, name: str = "reward.py", folder=None):
        path = (folder or reward_root) / name
        path.write_text(body)
        return path

    return write


def _client(user):
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def staff_api(staff):
    return _client(staff)


@pytest.fixture
def user_api(alice):
    return _client(alice)
