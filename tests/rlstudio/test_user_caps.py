"""Per-user caps by setting: saved run configs (RLSTUDIO_MAX_SAVED_CONFIGS_PER_USER) and personal API
tokens (RLSTUDIO_MAX_API_TOKENS_PER_USER), staff included; past a cap a 400 naming `name` (the API,
the profile page), and two creations at once cannot both pass."""

import threading

import pytest
from django.core.management import CommandError, call_command
from django.db import connections
from django.test import Client
from rest_framework.test import APIClient

from rlstudio.accounts.models import ApiToken
from rlstudio.accounts.services import ApiTokenRefused, api_token_create
from rlstudio.runs.errors import RunInputInvalid
from rlstudio.runs.models import RunConfig
from rlstudio.runs.services import run_config_save

pytestmark = pytest.mark.django_db
CONFIG = {"actor_rollout_ref": {"rollout": {"n": 8}}}


def _api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_saved_configs_past_the_cap_are_a_400_on_name(alice, bob, settings):
    settings.RLSTUDIO_MAX_SAVED_CONFIGS_PER_USER = 2
    api = _api(alice)
    for name in ("a", "b"):
        assert (
            api.post(
                "/api/v1/configs/", {"name": name, "config": CONFIG}, format="json"
            ).status_code
            == 201
        )
    resp = api.post("/api/v1/configs/", {"name": "c", "config": CONFIG}, format="json")
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert (
        error["field"] == "name" and "RLSTUDIO_MAX_SAVED_CONFIGS_PER_USER is 2" in error["message"]
    )
    assert RunConfig.objects.filter(owner=alice).count() == 2
    assert (
        _api(bob)
        .post("/api/v1/configs/", {"name": "c", "config": CONFIG}, format="json")
        .status_code
        == 201
    )
    RunConfig.objects.filter(owner=alice, name="a").delete()
    assert (
        api.post("/api/v1/configs/", {"name": "c", "config": CONFIG}, format="json").status_code
        == 201
    )


def test_staff_are_held_to_the_config_cap(staff, settings):
    settings.RLSTUDIO_MAX_SAVED_CONFIGS_PER_USER = 0
    with pytest.raises(RunInputInvalid) as err:
        run_config_save(owner=staff, name="x", config=CONFIG)
    assert err.value.field == "name"


def test_tokens_past_the_cap_are_refused_on_the_profile_page_and_the_command(
    alice, staff, settings
):
    settings.RLSTUDIO_MAX_API_TOKENS_PER_USER = 1
    page = Client()
    page.force_login(alice)
    assert page.post("/accounts/profile/tokens/", {"name": "one"}).status_code == 302
    resp = page.post("/accounts/profile/tokens/", {"name": "two"})
    assert resp.status_code == 400
    html = resp.content.decode()
    assert 'data-field="name"' in html and "RLSTUDIO_MAX_API_TOKENS_PER_USER is 1" in html
    assert list(ApiToken.objects.filter(user=alice).values_list("name", flat=True)) == ["one"]
    with pytest.raises(CommandError, match="revoke one first"):
        call_command("api_token", "alice", "--name", "three")
    api_token_create(user=staff, name="s")
    with pytest.raises(ApiTokenRefused) as err:  # staff included
        api_token_create(user=staff, name="s2")
    assert err.value.field == "name"


@pytest.mark.django_db(transaction=True)
def test_two_token_creations_at_once_cannot_both_pass(django_user_model, settings):
    settings.RLSTUDIO_MAX_API_TOKENS_PER_USER = 1
    alice = django_user_model.objects.create_user("alice", password="x")
    barrier, results = threading.Barrier(2), []

    def one(i: int):
        try:
            barrier.wait(10)
            api_token_create(user=alice, name=f"t{i}")
            results.append("ok")
        except ApiTokenRefused:
            results.append("refused")
        finally:
            connections.close_all()

    threads = [threading.Thread(target=one, args=(i,)) for i in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(results) == ["ok", "refused"]
    assert ApiToken.objects.filter(user=alice).count() == 1
