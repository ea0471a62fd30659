"""Fixtures of the runs tests: alice's API client and a ready dataset and model of hers."""
import pytest
from rest_framework.test import APIClient


@pytest.fixture
def api(alice):
    c = APIClient()
    c.force_authenticate(alice)
    return c


@pytest.fixture
def ready(alice, make_dataset, make_model):
    return {"dataset": make_dataset(alice, status="ready"), "model": make_model(alice)}
