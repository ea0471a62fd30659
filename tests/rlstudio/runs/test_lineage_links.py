"""Where a run says what it was made from ("clone of #N": the runs list, the run page's card), the
parent is a link only for whoever reads it; a user a clone is shared with, who cannot read its parent,
sees its id alone (it was a link to a page that answers them 404)."""
import pytest
from django.test import Client

from rlstudio.runs.models import Run
from rlstudio.runs.services.sharing import run_share

pytestmark = pytest.mark.django_db


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_parent_is_linked_only_for_its_readers(alice, bob, make_run):
    parent = make_run(alice, "parent-run")
    child = make_run(alice, "child-run")
    Run.objects.filter(pk=child.pk).update(parent=parent, parent_kind=Run.ParentKind.CLONE)
    run_share(run=child, by=alice, add=["bob"])
    link = f'href="/runs/{parent.pk}/"'
    urls = ("/runs/", f"/runs/{child.pk}/", f"/runs/{child.pk}/controls/")

    for url in urls:
        body = _client(alice).get(url).content.decode()
        assert link in body, url
    for url in urls:
        body = _client(bob).get(url).content.decode()
        assert link not in body and f"#{parent.pk}" in body, url
    assert _client(bob).get(f"/runs/{parent.pk}/").status_code == 404

    run_share(run=parent, by=alice, add=["bob"])  # now bob reads the parent too: linked
    assert link in _client(bob).get("/runs/").content.decode()
