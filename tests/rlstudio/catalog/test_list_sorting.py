"""The datasets and models list pages sort by every column (?sort=key, ?sort=-key), as the runs list does:
the rows in that order, each header's link and aria-sort, the pager keeping the sort, counts with
thousands separators; an unknown sort value falls back to newest first, never a 500."""
import re

import pytest
from django.test import Client

from rlstudio.catalog.selectors import DATASET_SORTS, MODEL_SORTS

pytestmark = pytest.mark.django_db


def _client(user):
    c = Client()
    c.force_login(user)
    return c


def _names(html: str, kind: str) -> list[str]:
    return re.findall(rf'<a href="/{kind}/\d+/">([^<]+)</a>', html)


@pytest.fixture
def datasets(alice, make_dataset):
    make_dataset(alice, "b-mid", num_rows=1_500, size_bytes=20_000)
    make_dataset(alice, "a-small", num_rows=12, size_bytes=300)
    make_dataset(alice, "c-big", num_rows=1_234_567, size_bytes=5 * 2**20)
    make_dataset(alice, "d-unknown", num_rows=None, size_bytes=10)


def test_datasets_sort_by_rows_and_name(alice, datasets):
    c = _client(alice)
    assert _names(c.get("/datasets/").content.decode(), "datasets") == ["d-unknown", "c-big", "a-small", "b-mid"]
    assert _names(c.get("/datasets/?sort=-rows").content.decode(), "datasets") == [
        "c-big", "b-mid", "a-small", "d-unknown"]  # no row count last, either way
    assert _names(c.get("/datasets/?sort=rows").content.decode(), "datasets") == [
        "a-small", "b-mid", "c-big", "d-unknown"]
    assert _names(c.get("/datasets/?sort=name").content.decode(), "datasets") == [
        "a-small", "b-mid", "c-big", "d-unknown"]
    assert _names(c.get("/datasets/?sort=-size").content.decode(), "datasets")[0] == "c-big"


def test_every_column_sorts_and_says_so(alice, datasets, make_model):
    make_model(alice, "m1", num_parameters=494_032_768)
    c = _client(alice)
    for url, columns in (("/datasets/", DATASET_SORTS), ("/models/", MODEL_SORTS)):
        for key in columns:
            for sort in (key, f"-{key}"):
                resp = c.get(f"{url}?sort={sort}")
                assert resp.status_code == 200, (url, sort)
                html = resp.content.decode()
                want = "descending" if sort.startswith("-") else "ascending"
                assert f'<th aria-sort="{want}" data-sort-key="{key}"' in html, (url, sort)
                # Its link sorts the other way.
                other = key if sort.startswith("-") else f"-{key}"
                assert f'data-sort-key="{key}"' in html and f'href="?sort={other}"' in html


def test_numbers_right_aligned_with_separators(alice, datasets, make_model):
    make_model(alice, "m1", num_parameters=494_032_768)
    html = _client(alice).get("/datasets/").content.decode()
    assert '<td class="num">1,234,567</td>' in html and '<td class="num">5.0\xa0MB</td>' in html
    assert 'data-sort-key="rows" class="num"' in html and 'data-sort-key="size" class="num"' in html
    assert 'data-sort-key="name" class="num"' not in html
    html = _client(alice).get("/models/").content.decode()
    assert '<td class="num">494,032,768</td>' in html and 'data-sort-key="parameters" class="num"' in html
    # The API keeps raw numbers.
    api = _client(alice).get("/api/v1/datasets/").json()
    rows = {d["name"]: d for d in (api["results"] if isinstance(api, dict) else api)}
    assert rows["c-big"]["num_rows"] == 1_234_567


@pytest.mark.parametrize("sort", ["bogus", "-", "--name", "name;drop", "-owner__password", "\u00e9", "id"])
def test_unknown_sort_falls_back_to_newest_first(alice, datasets, make_model, sort):
    make_model(alice, "m1")
    c = _client(alice)
    resp = c.get("/datasets/", {"sort": sort})
    assert resp.status_code == 200
    assert _names(resp.content.decode(), "datasets") == ["d-unknown", "c-big", "a-small", "b-mid"]
    assert c.get("/models/", {"sort": sort}).status_code == 200


def test_the_pager_keeps_the_sort(alice, make_dataset, settings, monkeypatch):
    from rlstudio import paging

    monkeypatch.setattr(paging, "PER_PAGE", 2)
    for i, rows in enumerate([5, 50, 500, 5000, 50000]):
        make_dataset(alice, f"ds{i}", num_rows=rows)
    c = _client(alice)
    first = c.get("/datasets/?sort=-rows").content.decode()
    assert _names(first, "datasets") == ["ds4", "ds3"]
    assert 'href="?sort=-rows&amp;page=2"' in first
    assert _names(c.get("/datasets/?sort=-rows&page=2").content.decode(), "datasets") == ["ds2", "ds1"]


def test_dataset_page_token_lengths_and_rows_with_separators(alice, make_dataset):
    ds = make_dataset(alice, "long-prompts", num_rows=25_000, status="ready", stats={"model": {"name": "tiny"}, "prompt_tokens": {
        "count": 25_000, "min": 12, "mean": 1530.25, "p50": 1200, "p95": 4096, "max": 16_384,
        "max_prompt_length": 2048, "over_max_prompt_length": 3_210}})
    html = _client(alice).get(f"/datasets/{ds.pk}/").content.decode()
    assert "<dt>Rows</dt><dd>25,000</dd>" in html
    assert "min 12 · mean 1,530.25 · p50 1,200 ·" in html and "p95 4,096 · max 16,384" in html
    assert "<strong>3,210</strong>" in html
