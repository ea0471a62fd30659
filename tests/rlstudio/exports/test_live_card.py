"""The run page's Exports card follows the open page: it is served as a fragment
(GET /runs/{id}/exports/card/) that run_exports.js fetches again while the run is live or an export is
under way, and on a status event. A checkpoint saved since the page loaded (a stop with a checkpoint)
is offered; readers get the card as the run page shows it to them, anyone else a 404."""
import re
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.test import Client

from rlstudio.exports.models import Export, ExportStatus
from rlstudio.runs.services import run_share

pytestmark = pytest.mark.django_db


def _client(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def test_the_run_page_marks_the_card_for_the_refresh(alice, run_with_ckpts):
    html = _client(alice).get(f"/runs/{run_with_ckpts.pk}/").content.decode()
    assert f'id="exports-card" data-url="/runs/{run_with_ckpts.pk}/exports/card/" data-active="0"' in html
    assert "js/run_exports.js" in html


def test_a_checkpoint_saved_after_the_page_loaded_is_in_the_fragment(alice, run_with_ckpts):
    run = run_with_ckpts
    assert "Export step 3" not in _client(alice).get(f"/runs/{run.pk}/").content.decode()  # 3 is uncommitted
    # What a stop with a checkpoint leaves: a committed global_step_<N> folder in the run's folder.
    (Path(django_settings.RUNS_DIR) / str(run.pk) / "global_step_3" / "actor").mkdir(parents=True)
    r = _client(alice).get(f"/runs/{run.pk}/exports/card/")
    assert r.status_code == 200
    html = r.content.decode()
    assert 'value="3">Export step 3</button>' in html and f'href="/playground/?target=run:{run.pk}:3"' in html
    assert re.search(r'name="csrfmiddlewaretoken" value="[^"]+"', html)  # the fresh card's forms still post


def test_an_export_under_way_marks_the_card_active_until_it_ends(alice, run_with_ckpts):
    run = run_with_ckpts
    export = Export.objects.create(run=run, owner=alice, step=1, status=ExportStatus.RUNNING)
    assert 'data-active="1"' in _client(alice).get(f"/runs/{run.pk}/exports/card/").content.decode()
    Export.objects.filter(pk=export.pk).update(status=ExportStatus.SUCCEEDED)
    html = _client(alice).get(f"/runs/{run.pk}/exports/card/").content.decode()
    assert 'data-active="0"' in html and "succeeded" in html


def test_a_reader_gets_the_card_as_they_see_it_and_others_a_404(alice, bob, make_user, run_with_ckpts):
    run = run_with_ckpts
    run_share(run=run, by=alice, add=["bob"])
    html = _client(bob).get(f"/runs/{run.pk}/exports/card/").content.decode()
    assert "Talk to it" in html and "Export step" not in html
    assert _client(make_user("carol")).get(f"/runs/{run.pk}/exports/card/").status_code == 404
    assert Client().get(f"/runs/{run.pk}/exports/card/").status_code in (302, 401)  # not logged in
    assert _client(alice).post(f"/runs/{run.pk}/exports/card/").status_code == 405
