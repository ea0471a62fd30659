"""A dataset's and a model's page name the newest runs on them (RUNS_SHOWN) and link the runs list,
filtered to that dataset or model, for the rest; with fewer runs there is no such link. A dataset page
with no model to count tokens with says so instead of offering an empty choice."""

import pytest
from django.test import Client

from rlstudio.catalog.views import RUNS_SHOWN
from rlstudio.runs.services import run_create

pytestmark = pytest.mark.django_db


def _page(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_detail_pages_name_the_newest_runs_and_link_the_rest(bob, make_dataset, make_model):
    dataset, model = make_dataset(bob, "arith", status="ready"), make_model(bob, "tiny")
    for i in range(RUNS_SHOWN + 2):
        run_create(owner=bob, name=f"run-{i:02d}", dataset=dataset, model=model, config={}, gpus=0)
    client = _page(bob)
    for url, link in [
        (f"/datasets/{dataset.pk}/", f'href="/runs/?dataset={dataset.pk}"'),
        (f"/models/{model.pk}/", f'href="/runs/?model={model.pk}"'),
    ]:
        html = client.get(url).content.decode()
        assert link in html and f"{RUNS_SHOWN + 2}" in html, url
        # The newest only: the last made is named, the second one is not.
        assert f">run-{RUNS_SHOWN + 1:02d}<" in html and ">run-01<" not in html, url


def test_no_link_when_every_run_is_named(bob, make_dataset, make_model):
    dataset, model = make_dataset(bob, "arith", status="ready"), make_model(bob, "tiny")
    run_create(owner=bob, name="only-run", dataset=dataset, model=model, config={}, gpus=0)
    client = _page(bob)
    html = client.get(f"/datasets/{dataset.pk}/").content.decode()
    assert ">only-run<" in html and "/runs/?dataset=" not in html  # (the new-run link is /runs/new/?dataset=)
    html = client.get(f"/models/{model.pk}/").content.decode()
    assert ">only-run<" in html and "/runs/?model=" not in html


def test_token_lengths_without_a_tokenizer_model_say_so_instead_of_an_empty_choice(
    bob, make_dataset
):
    dataset = make_dataset(bob, "arith", status="ready")
    html = _page(bob).get(f"/datasets/{dataset.pk}/").content.decode()
    assert 'id="stats-no-model"' in html and 'value="stats"' not in html
