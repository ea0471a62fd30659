"""From a dataset or a model to a new run in one click: the dataset page's "New run on this dataset" and
the models pages' "Train it" open the launch form with it chosen (?dataset= / ?val_dataset= / ?model=);
an id the user may not use, or not a ready dataset or a policy model, preselects nothing."""
import re

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


def _client(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def _selected(body: str, field: str) -> str | None:
    """The value of the selected option of the form's <select name=field>, None when none is (or the
    empty choice is)."""
    select = re.search(rf'<select name="{field}"[^>]*>(.*?)</select>', body, re.S)
    assert select, field
    chosen = re.search(r'<option value="([^"]*)" selected>', select.group(1))
    return chosen.group(1) if chosen and chosen.group(1) else None


def test_the_form_preselects_a_dataset_a_validation_dataset_and_a_model(alice, make_dataset, make_model):
    train = make_dataset(alice, "train-rows", status="ready")
    held = make_dataset(alice, "held-rows", status="ready", split="val")
    model = make_model(alice, "policy-1", tokenizer_ok=True)
    body = _client(alice).get(f"/runs/new/?dataset={train.pk}&val_dataset={held.pk}&model={model.pk}").content.decode()
    assert (_selected(body, "dataset"), _selected(body, "val_dataset"), _selected(body, "model")) == (
        str(train.pk), str(held.pk), str(model.pk))


@pytest.mark.parametrize("query", ["dataset=x", "dataset=-1", "dataset=99999999", "dataset=١", "model=1e3"])
def test_an_id_that_is_not_one_preselects_nothing(alice, make_dataset, query):
    make_dataset(alice, "rows", status="ready")
    r = _client(alice).get(f"/runs/new/?{query}")
    assert r.status_code == 200
    assert _selected(r.content.decode(), query.split("=")[0]) is None


def test_what_the_user_may_not_train_on_is_not_preselected(alice, bob, make_dataset, make_model):
    bobs = make_dataset(bob, "bobs-rows", status="ready")
    validating = make_dataset(alice, "still-validating")
    reward = make_model(alice, "scorer", kind="reward", tokenizer_ok=True)
    c = _client(alice)
    for query, field in ((f"dataset={bobs.pk}", "dataset"), (f"dataset={validating.pk}", "dataset"),
                         (f"model={reward.pk}", "model")):
        body = c.get(f"/runs/new/?{query}").content.decode()
        assert _selected(body, field) is None, query
        assert "bobs-rows" not in body


def test_the_dataset_and_model_pages_link_to_the_form(alice, make_dataset, make_model):
    c = _client(alice)
    train = make_dataset(alice, "train-rows", status="ready")
    held = make_dataset(alice, "held-rows", status="ready", split="val")
    validating = make_dataset(alice, "not-yet")
    assert f'href="/runs/new/?dataset={train.pk}">New run on this dataset' in c.get(
        f"/datasets/{train.pk}/").content.decode()
    assert f'href="/runs/new/?val_dataset={held.pk}">New run on this dataset' in c.get(
        f"/datasets/{held.pk}/").content.decode()
    assert 'id="dataset-train"' not in c.get(f"/datasets/{validating.pk}/").content.decode()
    policy = make_model(alice, "policy-1", tokenizer_ok=True)
    broken = make_model(alice, "no-tokenizer")
    listing = c.get("/models/").content.decode()
    assert f'href="/runs/new/?model={policy.pk}">Train it' in listing
    assert f"/runs/new/?model={broken.pk}" not in listing
    assert f'href="/runs/new/?model={policy.pk}">Train it' in c.get(f"/models/{policy.pk}/").content.decode()


def test_an_invalid_dataset_says_what_to_do_next_and_offers_no_run(alice, make_dataset):
    bad = make_dataset(alice, "bad-cols", status="invalid", error="line 1: cannot recognise the layout")
    body = _client(alice).get(f"/datasets/{bad.pk}/").content.decode()
    assert 'id="dataset-invalid-next"' in body and 'href="/datasets/upload/">upload the file again</a>' in body
    assert "and delete this one (below)" in body
    assert 'id="dataset-train"' not in body
    ready = make_dataset(alice, "fine", status="ready")
    assert 'id="dataset-invalid-next"' not in _client(alice).get(f"/datasets/{ready.pk}/").content.decode()
