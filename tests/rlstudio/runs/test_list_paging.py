"""The runs list a page at a time, sorted by any column (reward and duration included), and the
datasets and models pages paged the same way (rlstudio.paging)."""
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from rlstudio import paging
from rlstudio.runs.models import Run
from rlstudio.telemetry.models import MetricRow

pytestmark = pytest.mark.django_db


def _client(user):
    c = Client()
    c.force_login(user)
    return c


def _names(page: str) -> list[str]:
    body = page[page.index("<tbody>"):page.index("</tbody>")]
    return [chunk.split("<", 1)[0] for chunk in body.split('/">')[1:] if not chunk.startswith("<")]


def test_pages_cover_every_run_once_and_keep_filters_and_sort(alice, make_run, monkeypatch):
    monkeypatch.setattr(paging, "PER_PAGE", 2)
    for i in range(5):
        make_run(alice, f"r{i}")
    Run.objects.filter(name="r4").update(tags=["other"])
    client, seen = _client(alice), []
    for n in (1, 2):
        page = client.get(f"/runs/?sort=name&q=r&page={n}").content.decode()
        seen += _names(page)
    last = client.get("/runs/?sort=name&q=r&page=3").content.decode()
    seen += _names(last)
    assert seen == ["r0", "r1", "r2", "r3", "r4"]
    assert "5–5 of 5" in last and '<span aria-current="page"><strong>3</strong></span>' in last
    first = client.get("/runs/?sort=name&q=r").content.decode()
    assert "1–2 of 5" in first and 'href="?sort=name&amp;q=r&amp;page=2">next ›</a>' in first
    # Past the end is the last page; a page that does not parse is the first.
    assert _names(client.get("/runs/?sort=name&q=r&page=99").content.decode()) == ["r4"]
    for bad in ("abc", "-1", "0", "1e3", "99999999999999999999", "²", "%C2%B2", "%EF%BC%92", "1%C2%B2"):
        assert _names(client.get(f"/runs/?sort=name&q=r&page={bad}").content.decode()) == ["r0", "r1"], bad


def test_sort_by_latest_reward_with_runs_without_one_last(alice, make_run):
    now = timezone.now()
    for name, reward in (("low", 0.1), ("high", 0.9), ("none", None), ("mid", 0.5), ("text", "oops")):
        run = make_run(alice, name)
        MetricRow.objects.create(run=run, step=1, time=now, metrics={"critic/score/mean": 0.7})
        latest = {} if reward is None else {"critic/score/mean": reward}
        MetricRow.objects.create(run=run, step=2, time=now, metrics=latest)
    client = _client(alice)
    down = client.get("/runs/?sort=-reward").content.decode()
    assert _names(down)[:3] == ["high", "mid", "low"] and set(_names(down)[3:]) == {"none", "text"}
    assert _names(client.get("/runs/?sort=reward").content.decode())[:3] == ["low", "mid", "high"]
    assert '<th aria-sort="descending" class="num"><a href="?sort=reward">Latest reward</a> ▼</th>' in down


def test_sort_by_duration_owner_dataset_and_model(alice, bob, make_user, make_run):
    now = timezone.now()
    spans = {"short": timedelta(minutes=1), "long": timedelta(hours=2), "mid": timedelta(minutes=30)}
    for name, span in spans.items():
        run = make_run(alice, name)
        Run.objects.filter(pk=run.pk).update(started=now - span, finished=now)
    make_run(alice, "never")  # not started: no duration, last either way
    make_run(bob, "bobs")
    staff = make_user("root", staff=True)
    client = _client(staff)
    assert _names(client.get("/runs/?sort=-duration").content.decode())[:3] == ["long", "mid", "short"]
    assert _names(client.get("/runs/?sort=duration").content.decode())[:3] == ["short", "mid", "long"]
    assert _names(client.get("/runs/?sort=-duration").content.decode())[3:] == ["bobs", "never"]  # ties: newest
    by_owner = _names(client.get("/runs/?sort=-owner").content.decode())
    assert by_owner[0] == "bobs"
    assert _names(client.get("/runs/?sort=dataset").content.decode()) == sorted(by_owner)  # "<name>-data"
    assert _names(client.get("/runs/?sort=-model").content.decode()) == sorted(by_owner, reverse=True)
    # An unknown key is the default (newest first), never an error.
    assert client.get("/runs/?sort=-__class__").status_code == 200


def test_datasets_and_models_pages_are_paged(alice, make_dataset, make_model, monkeypatch):
    monkeypatch.setattr(paging, "PER_PAGE", 2)
    for i in range(3):
        make_dataset(alice, name=f"data-{i}")
        make_model(alice, name=f"model-{i}")
    client = _client(alice)
    for url, newest, oldest in (("/datasets/", "data-2", "data-0"), ("/models/", "model-2", "model-0")):
        first, second = client.get(url).content.decode(), client.get(f"{url}?page=2").content.decode()
        assert newest in first and oldest not in first and "1–2 of 3" in first
        assert oldest in second and newest not in second and "3–3 of 3" in second


def test_the_default_order_is_said_and_a_chosen_sort_shows_its_arrow(alice, make_run):
    make_run(alice, "r0")
    client = _client(alice)
    page = client.get("/runs/").content.decode()
    assert 'id="sort-note"' in page and "newest first" in page
    page = client.get("/runs/?sort=name").content.decode()
    assert 'id="sort-note"' not in page and 'aria-sort="ascending"' in page and "Name</a> ▲" in page


@pytest.mark.parametrize("raw, number", [("3", 3), (" 12 ", 12), ("", 1), ("0", 1), ("²", 1), ("２", 1), ("٣", 1),
                                         ("1²", 1), ("-2", 1), ("1234567890", 1), ("999999999", 999999999)])
def test_page_number_reads_only_ascii_digits(raw, number):
    """Every paged list's ?page= (runs, datasets, models, projects, sweeps): a digit int() cannot read,
    such as "²", is page 1 like any other bad value, never a 500."""
    from django.http import QueryDict

    assert paging.page_number(QueryDict(mutable=True) | {"page": raw}) == number
