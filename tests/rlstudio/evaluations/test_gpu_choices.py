"""The evaluation form's GPU choices follow the user's quotas (a run's card and a model's): 0 (the CPU)
always, 1 only where their quota allows a GPU at once; an evaluation asking more anyway is a 400 on `gpus`."""
import re

import pytest
from django.test import Client
from django.utils.html import escape

from rlstudio.evaluations.models import Evaluation
from rlstudio.quotas.models import GpuQuota
from rlstudio.runs.services.cluster import gpus_refusal
from tests.rlstudio.conftest import api_client

pytestmark = pytest.mark.django_db


def _gpu_options(html: str) -> list[str]:
    select = html[html.index('<select name="gpus">'):].split("</select>")[0]
    return re.findall(r'<option value="(\d+)"', select)


def _page(user, url: str) -> str:
    c = Client()
    c.force_login(user)
    return c.get(url).content.decode()


@pytest.mark.parametrize("max_gpus,offered", [(0, ["0"]), (1, ["0", "1"]), (4, ["0", "1"])])
def test_the_forms_offer_the_gpus_the_quota_allows(alice, make_model, run_with_ckpts, data, max_gpus, offered):
    GpuQuota.objects.create(user=alice, max_gpus=max_gpus, gpu_hours_per_month=100, max_concurrent_runs=3)
    model = make_model(alice, "alice-base", tokenizer_ok=True)
    for url in (f"/runs/{run_with_ckpts.pk}/", f"/models/{model.pk}/"):
        html = _page(alice, url)
        assert _gpu_options(html) == offered, url
        assert ('id="eval-gpu-note"' in html) == (max_gpus == 0)
    if max_gpus == 0:  # the form says why, in the words a submitted one is refused with
        why = gpus_refusal(user=alice, gpus=1, what="evaluation")
        assert "quota" in why and f'id="eval-gpu-note">{escape(why)}</span>' in html


def test_a_gpu_the_quota_does_not_allow_is_a_400_on_gpus(alice, make_model, run_with_ckpts, data, published):
    GpuQuota.objects.create(user=alice, max_gpus=0, gpu_hours_per_month=100, max_concurrent_runs=3)
    model = make_model(alice, "alice-base", tokenizer_ok=True)
    for url, body in ((f"/api/v1/runs/{run_with_ckpts.pk}/evaluations/", {"checkpoints": [1]}),
                      (f"/api/v1/models/{model.pk}/evaluations/", {})):
        r = api_client(alice).post(url, {"dataset": data.pk, "k": 2, "gpus": 1, **body}, format="json")
        assert r.status_code == 400, r.content
        assert r.json()["error"]["field"] == "gpus" and "quota" in r.json()["error"]["message"]
    assert not Evaluation.objects.exists() and not published
