"""A dataset page: its token statistics name the model whose tokenizer counted them, and the form to
count again has that model picked (it showed the newest model instead, a tokenizer the figures above
were not counted with), whatever models came since; with no statistics, the newest is picked. The
preview names a rows request to copy."""
import re

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


def _picked(html: str) -> list[str]:
    form = html[html.index('<select name="model">'):]
    form = form[:form.index("</select>")]
    return re.findall(r'<option value="(\d+)" selected>', form)


def test_the_stats_form_picks_the_model_the_stats_were_counted_with(alice, make_dataset, make_model):
    counted = make_model(alice, "counted-with", tokenizer_ok=True)
    make_model(alice, "newer", tokenizer_ok=True)
    stats = {"prompt_tokens": {"count": 2, "min": 3, "mean": 4, "p50": 4, "p95": 5, "max": 5,
                               "max_prompt_length": 1024, "over_max_prompt_length": 0},
             "model": {"id": counted.pk, "name": counted.name}}
    dataset = make_dataset(alice, "d", status="ready", stats=stats, stats_model=counted)
    client = Client()
    client.force_login(alice)
    html = client.get(f"/datasets/{dataset.pk}/").content.decode()
    assert "Tokenizer: counted-with" in html
    assert _picked(html) == [str(counted.pk)]

    fresh = make_dataset(alice, "no-stats", status="ready")
    assert _picked(client.get(f"/datasets/{fresh.pk}/").content.decode()) == []  # the first: the newest


def test_the_preview_names_a_rows_request_that_works(alice, make_dataset):
    """"All rows: GET .../rows/?offset=&limit=" named empty parameters; the page gives ones to copy."""
    dataset = make_dataset(alice, "d", status="ready")
    client = Client()
    client.force_login(alice)
    html = client.get(f"/datasets/{dataset.pk}/").content.decode()
    assert f"GET /api/v1/datasets/{dataset.pk}/rows/?offset=0&amp;limit=50</code>" in html
    assert "?offset=&amp;limit=<" not in html
