"""The admin's index names our models in plain English: plurals Django would spell wrong by adding an
"s" (deliverys) and acronyms it would capitalise as words (Api) are given in each model's Meta."""
import re

import pytest
from django.apps import apps
from django.test import Client

pytestmark = pytest.mark.django_db
OUR_APPS = {"accounts", "alerts", "catalog", "evaluations", "exports", "playground", "projects", "quotas",
            "registry", "runs", "sweeps", "telemetry"}
ACRONYMS = ("api", "gpu", "url")


def test_model_names_are_english():
    models = [m for m in apps.get_models() if m._meta.app_label in OUR_APPS]
    assert len(models) > 20
    for model in models:
        plural = str(model._meta.verbose_name_plural)
        assert not re.search(r"[^aeiou]ys$", plural), (model, plural)  # "deliverys"
        for word in str(model._meta.verbose_name).split() + plural.split():
            assert word.lower().rstrip("s") not in ACRONYMS or word.isupper() or word.rstrip("s").isupper(), \
                (model, word)


def test_admin_index_lists_them_so(staff):
    client = Client()
    client.force_login(staff)
    page = client.get("/admin/").content.decode()
    assert ">API tokens<" in page and ">Webhook deliveries<" in page
    assert "Api tokens" not in page and "deliverys" not in page.lower()
