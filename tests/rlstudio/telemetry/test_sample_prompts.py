"""The samples table's prompt text (selectors.sample_rows): the first user message of each sample's
transcript, read by PostgreSQL for one page of rows, shortened for the cell and whole for its title;
the samples API and the run page carry it, and the page starts at the newest step."""
import pytest
from django.test import Client

from rlstudio.runs.services import run_create
from rlstudio.telemetry import selectors as sel
from rlstudio.telemetry.models import Sample

pytestmark = pytest.mark.django_db


@pytest.fixture
def run(alice, make_dataset, make_model):
    return run_create(owner=alice, name="prompts", dataset=make_dataset(alice), model=make_model(alice),
                      config={}, gpus=0)[0]


def _add(run, seq: int, transcript, *, step: int = 1, uid: str = "u") -> Sample:
    return Sample.objects.create(run=run, seq=seq, step=step, uid=uid, index=0, reward=1.0,
                                 transcript=transcript)


def test_first_user_message_shortened_and_whole(run):
    long = "word " * 1000 + "end"
    _add(run, 1, {"messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "What\nis  6*7?"},
                               {"role": "user", "content": "second"}, {"role": "assistant", "content": "42"}]})
    _add(run, 2, {"messages": [{"role": "user", "content": long}]})
    _add(run, 3, [{"role": "user", "content": "<b>old list form</b>"}])  # rows stored before the dict form
    _add(run, 4, {"messages": [{"role": "assistant", "content": "no prompt"}]})
    _add(run, 5, {"messages": [{"role": "user", "content": ["parts", 1]}]})  # not a string: its JSON text
    rows = sel.sample_rows(samples=list(Sample.objects.filter(run=run).order_by("seq")))
    assert [r["seq"] for r in rows] == [1, 2, 3, 4, 5]
    assert (rows[0]["prompt"], rows[0]["prompt_short"]) == ("What\nis  6*7?", "What is 6*7?")
    assert len(rows[1]["prompt"]) == sel.PROMPT_MAX and rows[1]["prompt"].endswith("…")
    assert rows[1]["prompt"].startswith("word word") and len(rows[1]["prompt_short"]) == sel.PROMPT_SHORT
    assert rows[2]["prompt"] == "<b>old list form</b>"
    assert rows[3]["prompt"] == rows[3]["prompt_short"] == ""
    assert rows[4]["prompt"] == '["parts", 1]'
    assert rows[0]["uid"] == "u" and rows[0]["reward"] == 1.0  # the summary is all there too
    assert sel.sample_rows(samples=[]) == []


def test_api_and_page_show_the_prompt_newest_step_first(run, alice):
    for seq, step in ((1, 1), (2, 3), (3, 2)):
        _add(run, seq, {"messages": [{"role": "user", "content": f"prompt of step {step} <i>"}]}, step=step)
    client = Client()
    client.force_login(alice)
    api = client.get(f"/api/v1/runs/{run.pk}/samples/").json()["results"]
    assert [(r["step"], r["prompt"]) for r in api] == [(1, "prompt of step 1 <i>"), (3, "prompt of step 3 <i>"),
                                                      (2, "prompt of step 2 <i>")]  # the API's default: seq
    page = client.get(f"/runs/{run.pk}/").content.decode()
    at = [page.index(f"prompt of step {s} &lt;i&gt;</a>") for s in (3, 2, 1)]
    assert at == sorted(at) and "<i>" not in page.split('id="samples-body"')[1].split("</tbody>")[0]
    assert 'title="prompt of step 3 &lt;i&gt;"' in page
    assert 'name="order" value="-step"' in page
    page = client.get(f"/runs/{run.pk}/?order=step").content.decode()
    at = [page.index(f"prompt of step {s} &lt;i&gt;</a>") for s in (1, 2, 3)]
    assert at == sorted(at)
