""""Talk to this checkpoint" (issue 19): the run page's checkpoints and the Models page's policy models
link to /playground/?target=..., and the playground preselects a target from its query only when the
user may use it (own, shared with them, staff); anything else leaves the picker as it was and the
page still renders."""
import re

import pytest
from django.test import Client

from rlstudio.catalog.models import ModelAsset
from rlstudio.playground import selectors
from rlstudio.runs.services import run_share

pytestmark = pytest.mark.django_db


def _client(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def _selected(html: str) -> list[str]:
    """The values of the options marked selected (the page has two pickers; only the first takes ?target)."""
    return re.findall(r'<option value="([^"]*)" selected>', html)


def _playground(user, target: str) -> str:
    r = _client(user).get("/playground/", {"target": target})
    assert r.status_code == 200
    return r.content.decode()


def test_the_run_page_links_each_checkpoint_for_its_owner_and_readers(alice, bob, make_user, run_with_ckpts):
    run = run_with_ckpts
    links = [f'href="/playground/?target=run:{run.pk}:{step}"' for step in (1, 2)]
    html = _client(alice).get(f"/runs/{run.pk}/").content.decode()
    assert all(link in html for link in links) and f"target=run:{run.pk}:3" not in html  # 3 is uncommitted
    assert html.count(">Talk to it</a>") == 2 and "Export step 1</button>" in html
    run_share(run=run, by=alice, add=["bob"])  # a reader may use the checkpoints in the playground too
    html = _client(bob).get(f"/runs/{run.pk}/").content.decode()
    assert all(link in html for link in links) and "Export step 1" not in html
    assert _client(make_user("carol")).get(f"/runs/{run.pk}/").status_code == 404


def test_a_checkpoint_target_is_preselected_for_the_owner_and_a_reader(alice, bob, run_with_ckpts):
    run = run_with_ckpts
    assert _selected(_playground(alice, f"run:{run.pk}:1")) == [f"run:{run.pk}:1"]
    assert _selected(_playground(alice, f"run:{run.pk}:2")) == [f"run:{run.pk}:2"]
    assert _selected(_playground(alice, f"run:{run.pk}:3")) == []  # uncommitted: not a checkpoint
    run_share(run=run, by=alice, add=["bob"])
    assert _selected(_playground(bob, f"run:{run.pk}:1")) == [f"run:{run.pk}:1"]


def test_another_users_private_run_is_not_preselected(alice, bob, run_with_ckpts, make_model):
    run = run_with_ckpts
    make_model(bob, "bob-own-model")
    html = _playground(bob, f"run:{run.pk}:1")
    assert _selected(html) == [] and f"run:{run.pk}:" not in html and "alice-run" not in html
    assert "bob-own-model" in html  # the page is the usual one


def test_an_older_run_beyond_the_pages_newest_is_still_preselected_but_only_if_visible(
        alice, bob, run_with_ckpts, monkeypatch):
    run = run_with_ckpts
    monkeypatch.setattr(selectors, "PAGE_RUNS", 0)  # the page lists no run by itself
    assert f"run:{run.pk}:" not in _client(alice).get("/playground/").content.decode()
    html = _playground(alice, f"run:{run.pk}:2")
    assert _selected(html) == [f"run:{run.pk}:2"] and f'value="run:{run.pk}:1"' not in html
    html = _playground(bob, f"run:{run.pk}:2")
    assert _selected(html) == [] and f"run:{run.pk}:" not in html


def test_the_models_page_links_policy_models_and_the_target_is_checked(alice, bob, make_model):
    policy = make_model(alice, "alice-policy")
    reward = make_model(alice, "alice-rm", kind=ModelAsset.Kind.REWARD)
    secret = make_model(bob, "bob-secret")
    html = _client(alice).get("/models/").content.decode()
    assert f'href="/playground/?target=model:{policy.pk}"' in html
    assert f"target=model:{reward.pk}" not in html and f"target=model:{secret.pk}" not in html
    assert f'href="/playground/?target=model:{policy.pk}"' in _client(alice).get(f"/models/{policy.pk}/").content.decode()
    assert "target=model:" not in _client(alice).get(f"/models/{reward.pk}/").content.decode()
    assert _selected(_playground(alice, f"model:{policy.pk}")) == [f"model:{policy.pk}"]
    assert _selected(_playground(alice, f"model:{reward.pk}")) == []  # a reward model does not chat
    html = _playground(alice, f"model:{secret.pk}")
    assert _selected(html) == [] and "bob-secret" not in html
    assert f"target=model:{policy.pk}" not in _client(bob).get("/models/").content.decode()
    ModelAsset.objects.filter(pk=policy.pk).update(visibility="everyone")  # shared: bob may talk to it
    assert f'href="/playground/?target=model:{policy.pk}"' in _client(bob).get("/models/").content.decode()
    assert _selected(_playground(bob, f"model:{policy.pk}")) == [f"model:{policy.pk}"]


def test_a_hostile_model_name_is_escaped_in_the_preselected_option(alice, make_model, monkeypatch):
    model = make_model(alice, '<script>alert(1)</script>"x')
    monkeypatch.setattr(selectors, "PAGE_RUNS", 0)
    html = _playground(alice, f"model:{model.pk}")
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;&quot;x" in html
    assert _selected(html) == [f"model:{model.pk}"]


@pytest.mark.parametrize("target", ["", "run:0:1", "run:1", "model:", "model:-1", "model:1 ", "run:1:1:1",
                                    '"><script>alert(1)</script>', "../../etc/passwd", "model:" + "9" * 40,
                                    "run:99999:1", "model:99999"])
def test_a_malformed_or_unknown_target_is_ignored(alice, run_with_ckpts, target):
    html = _playground(alice, target)
    assert _selected(html) == [] and "<script>alert(1)" not in html
    assert f'value="run:{run_with_ckpts.pk}:2"' in html  # the usual options


def test_with_nothing_to_talk_to_send_is_off_and_the_models_page_is_linked(make_user):
    html = _client(make_user("nobody-yet")).get("/playground/").content.decode()
    assert 'id="pg-nothing"' in html and 'href="/models/"' in html
    assert re.search(r'<button type="submit" id="pg-send-button" disabled>', html)


def test_the_picker_tells_an_exported_model_from_the_checkpoint_it_came_from(alice, make_model, run_with_ckpts):
    """An export's catalog model is named "<run> (run N, step S)", much like that checkpoint's own
    option; the picker groups them ("Catalog models" / "Checkpoints of runs you can read") and marks
    the export as one. A model registered by hand keeps its bare name."""
    from rlstudio.exports.models import Export, ExportStatus

    run = run_with_ckpts
    exported = make_model(alice, f"{run.name} (run {run.pk}, step 1)")
    Export.objects.create(run=run, owner=alice, step=1, status=ExportStatus.SUCCEEDED, model=exported)
    plain = make_model(alice, "hand-registered")
    html = _playground(alice, f"model:{exported.pk}")
    models_group = html.split('<optgroup label="Catalog models">')[1].split("</optgroup>")[0]
    ckpt_group = html.split('<optgroup label="Checkpoints of runs you can read">')[1].split("</optgroup>")[0]
    assert f'<option value="model:{exported.pk}" selected>{run.name} (run {run.pk}, step 1) (exported)</option>' in models_group
    assert f'<option value="model:{plain.pk}">hand-registered</option>' in models_group
    assert f'<option value="run:{run.pk}:1">{run.name} (#{run.pk}) step 1</option>' in ckpt_group
    assert "(exported)" not in ckpt_group
    final = make_model(alice, f"{run.name} (run {run.pk})", source="run_export", source_run=run)  # the run's own
    html = _playground(alice, f"model:{final.pk}")
    assert f'<option value="model:{final.pk}" selected>{run.name} (run {run.pk}) (exported)</option>' in html
