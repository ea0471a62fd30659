"""Rough edges a new user met in the web UI, fixed: the run page puts its live views (metrics, memory,
samples) before its settings forms and links to each card; its samples table tells validation samples
from training ones and filters by split; a group page without a step answers 400 naming `step`; a
transcript says why it has no token view and when its answer was cut off."""
import re

import pytest
from django.test import Client

from rlstudio.telemetry.models import Sample

pytestmark = pytest.mark.django_db


def _client(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def _sample(run, seq: int, *, step: int, split: str, finish: str = "stop", token_view=None) -> Sample:
    return Sample.objects.create(
        run=run, seq=seq, step=step, uid=f"{split}-{seq}", index=0, prompt_split=split, reward=0.5,
        advantage=0.0, response_length=4, finish_reason=finish, token_view=token_view,
        transcript={"messages": [{"role": "user", "content": f"{split} question {seq}"},
                                 {"role": "assistant", "content": "#### 4"}],
                    "validation": split == "val"})


@pytest.fixture
def run_with_val(alice, make_run, make_dataset):
    run = make_run(alice, "with-val")
    run.val_dataset = make_dataset(alice, name="held-out", split="val")
    run.save(update_fields=["val_dataset"])
    return run


def _ids(page: str) -> set[str]:
    return set(re.findall(r'\bid="([^"]+)"', page))


def test_the_run_page_shows_its_live_views_before_its_forms(alice, run_with_val):
    page = _client(alice).get(f"/runs/{run_with_val.pk}/").content.decode()
    order = [page.index(f'id="{card}"') for card in (
        "charts-card", "summary-card", "memory-card", "samples-card", "evaluations-card", "exports-card", "run-log-card",
        "memory-estimate", "run-annotate", "run-sharing", "run-alerts", "run-config")]
    assert order == sorted(order), order
    # Every in-page link leads to a card of this page (none dead).
    nav = page[page.index('id="run-jump"'):page.index("</nav>", page.index('id="run-jump"'))]
    targets = re.findall(r'href="#([^"]+)"', nav)
    assert len(targets) == 12 and not set(targets) - _ids(page), targets
    assert [page.index(f'id="{t}"') for t in targets] == sorted(page.index(f'id="{t}"') for t in targets)  # page order


def test_a_reader_gets_no_links_to_the_owners_forms(alice, bob, run_with_val):
    from rlstudio.runs.services import run_share

    run_share(run=run_with_val, by=alice, add=["bob"])
    page = _client(bob).get(f"/runs/{run_with_val.pk}/").content.decode()
    nav = page[page.index('id="run-jump"'):page.index("</nav>", page.index('id="run-jump"'))]
    targets = re.findall(r'href="#([^"]+)"', nav)
    assert "run-sharing" not in targets and "run-annotate" not in targets
    assert not set(targets) - _ids(page), targets


def test_the_samples_table_filters_by_split_and_says_validation_samples_are_listed(alice, run_with_val):
    _sample(run_with_val, 1, step=1, split="train")
    _sample(run_with_val, 2, step=1, split="val")
    c = _client(alice)
    page = c.get(f"/runs/{run_with_val.pk}/").content.decode()
    assert "train question 1" in page and "val question 2" in page
    assert 'name="prompt_split"' in page and "Validation samples" in page
    only_val = c.get(f"/runs/{run_with_val.pk}/?prompt_split=val").content.decode()
    assert "val question 2" in only_val and "train question 1" not in only_val
    assert '<option value="val" selected>validation</option>' in only_val
    only_train = c.get(f"/runs/{run_with_val.pk}/", {"prompt_split": "train"})
    assert "train question 1" in only_train.content.decode()
    assert "val question 2" not in only_train.content.decode()


def test_a_run_without_a_validation_dataset_does_not_mention_validation_samples(alice, make_run):
    run = make_run(alice, "no-val")
    _sample(run, 1, step=1, split="train")
    assert "Validation samples" not in _client(alice).get(f"/runs/{run.pk}/").content.decode()


@pytest.mark.parametrize("query, message", [
    ("", "step is required"),
    ("?step=abc", "step must be an integer from 0 to 2147483647, got &#x27;abc&#x27;"),
    ("?step=-1", "step must be an integer from 0 to 2147483647, got &#x27;-1&#x27;"),
])
def test_a_group_page_without_a_good_step_is_a_400_naming_step(alice, run_with_val, query, message):
    r = _client(alice).get(f"/runs/{run_with_val.pk}/groups/{query}")
    assert r.status_code == 400
    body = r.content.decode()
    assert message in body and 'data-field="step"' in body


def test_a_group_page_of_someone_elses_run_is_still_a_404(bob, run_with_val):
    assert _client(bob).get(f"/runs/{run_with_val.pk}/groups/").status_code == 404


def test_a_validation_transcript_says_why_it_has_no_token_view_and_that_it_was_cut_off(alice, run_with_val):
    s = _sample(run_with_val, 1, step=1, split="val", finish="length")
    page = _client(alice).get(f"/runs/{run_with_val.pk}/samples/{s.pk}/").content.decode()
    assert 'id="no-token-view"' in page and "a validation sample is scored, not trained on" in page
    assert "(cut off: the response hit its length limit)" in page


def test_a_training_transcript_with_tokens_has_no_such_note(alice, run_with_val):
    view = {"ids": [1, 2], "pieces": ["#", "4"], "loss_mask": [1, 1], "logprobs": [-0.1, -0.2],
            "advantages": [0.5, 0.5]}
    s = _sample(run_with_val, 1, step=1, split="train", token_view=view)
    page = _client(alice).get(f"/runs/{run_with_val.pk}/samples/{s.pk}/").content.decode()
    assert 'id="no-token-view"' not in page and "cut off" not in page
    assert re.search(r'<button type="button" data-tab="tokens"[^>]*aria-selected="false">Tokens</button>', page)  # enabled


def test_a_steps_groups_name_each_prompt_by_its_text_and_mark_validation(alice, run_with_val):
    _sample(run_with_val, 1, step=3, split="train")
    _sample(run_with_val, 2, step=3, split="val")
    _sample(run_with_val, 3, step=4, split="train")  # another step: not listed
    page = _client(alice).get(f"/runs/{run_with_val.pk}/groups/?step=3").content.decode()
    assert "train question 1" in page and "val question 2" in page and "train question 3" not in page
    rows = page.split("<tr")[2:]
    assert len(rows) == 2
    val_row = next(r for r in rows if "val question 2" in r)
    train_row = next(r for r in rows if "train question 1" in r)
    assert '<span class="badge">validation</span>' in val_row and "validation" not in train_row
    assert 'class="uid" title="train-1"' in train_row  # the uid is still there, small
