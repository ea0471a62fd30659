"""The runs pages: list (home), detail, empty state, escaping, state badges."""
import pytest
from django.test import Client
from django.utils import timezone

from rlstudio.runs.models import RunStatus
from rlstudio.runs.services import run_transition
from rlstudio.telemetry.models import MetricRow

pytestmark = pytest.mark.django_db


@pytest.fixture
def client_alice(alice):
    client = Client()
    client.force_login(alice)
    return client


def test_empty_state_guides_to_upload_then_launch(client_alice):
    for url in ["/", "/runs/"]:
        page = client_alice.get(url).content.decode()
        assert "upload a dataset</a>, then launch a run" in page
        assert 'href="/datasets/"' in page


def test_list_shows_runs_newest_first_with_state_step_and_reward(client_alice, alice, make_run):
    old = make_run(alice, "older-run")
    new = make_run(alice, "newer-run")
    run_transition(run=new, to=RunStatus.SUBMITTING)
    run_transition(run=new, to=RunStatus.RUNNING)
    new.step, new.total_steps = 3, 10
    new.save(update_fields=["step", "total_steps"])
    MetricRow.objects.create(run=new, step=2, time=timezone.now(), metrics={"critic/score/mean": 0.25})
    MetricRow.objects.create(run=new, step=3, time=timezone.now(), metrics={"critic/score/mean": 0.625})
    page = client_alice.get("/runs/").content.decode()
    assert page.index("newer-run") < page.index("older-run")
    assert 'class="badge state-running"' in page and 'class="badge state-queued"' in page
    assert "3 / 10" in page and "0.625" in page and "0.250" not in page
    assert '<progress max="100" value="30">' in page
    assert f'href="/runs/{old.pk}/"' in page
    running_only = client_alice.get("/runs/?status=running").content.decode()
    # (the filters' model and dataset options still name every run's: "older-run-model")
    assert ">newer-run<" in running_only and ">older-run<" not in running_only


def test_run_name_is_escaped_everywhere(client_alice, alice, make_run):
    run = make_run(alice, "<script>alert(1)</script>", config={"note": "<img src=x onerror=alert(2)>"})
    for url in ["/runs/", f"/runs/{run.pk}/"]:
        page = client_alice.get(url).content.decode()
        assert "<script>alert(1)</script>" not in page
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
        assert "<img src=x" not in page


def test_detail_renders_state_config_timestamps_and_error(client_alice, alice, make_run):
    run = make_run(alice, "detail-run", config={"actor_rollout_ref": {"rollout": {"n": 8}}})
    run_transition(run=run, to=RunStatus.SUBMITTING)
    run_transition(run=run, to=RunStatus.FAILED, error="Ray refused the job: no GPU")
    page = client_alice.get(f"/runs/{run.pk}/").content.decode()
    assert 'class="badge state-failed"' in page
    assert "Ray refused the job: no GPU" in page
    assert "&quot;n&quot;: 8" in page  # the frozen config, pretty-printed and escaped
    assert run.dataset.name in page and run.model.name in page


def test_catalog_pages(client_alice, alice, make_dataset, make_model):
    ds = make_dataset(alice, "gsm8k-<b>train</b>", status="invalid", error="line 3: no 'question' field")
    make_model(alice, "tiny-model")
    assert "gsm8k-&lt;b&gt;train&lt;/b&gt;" in client_alice.get("/datasets/").content.decode()
    detail = client_alice.get(f"/datasets/{ds.pk}/").content.decode()
    assert "line 3: no &#x27;question&#x27; field" in detail and "ds-invalid" in detail
    assert "tiny-model" in client_alice.get("/models/").content.decode()


def test_controls_fragment_follows_the_run_for_its_owner_only(client_alice, alice, bob, make_run):
    """GET /runs/<id>/controls/: the card the run page swaps in while it is open (static/js/run_controls.js)."""
    run = make_run(alice, "<b>ctl</b>-run")
    url = f"/runs/{run.pk}/controls/"
    run_transition(run=run, to=RunStatus.SUBMITTING)
    card = client_alice.get(url).content.decode()
    assert 'id="run-controls"' in card
    assert 'data-live="1"' in card and f'data-url="{url}"' in card
    assert "Force stop" not in card  # nothing to kill yet
    run_transition(run=run, to=RunStatus.RUNNING)
    card = client_alice.get(url).content.decode()
    assert "Force stop" in card and 'class="badge state-running"' in card
    assert "&lt;b&gt;ctl&lt;/b&gt;-run" in card and "<b>ctl</b>" not in card  # in the confirm text, escaped
    run_transition(run=run, to=RunStatus.STOPPING)
    run_transition(run=run, to=RunStatus.STOPPED)
    card = client_alice.get(url).content.decode()
    assert 'data-live=""' in card and "Force stop" not in card and 'class="badge state-stopped"' in card
    # the run page carries the same card, so the swap has something to compare with
    assert 'id="run-controls"' in client_alice.get(f"/runs/{run.pk}/").content.decode()

    other = Client()
    other.force_login(bob)
    assert other.get(url).status_code == 404
    assert Client().get(url).status_code == 302  # to the login page
    assert client_alice.post(url).status_code == 405


def test_checkpoint_follows_the_open_page_for_the_owner_only(client_alice, alice, bob, make_run):
    """The details' Checkpoint is there before any checkpoint, and the controls card (fetched again
    while the page is open) carries the current one under the same data-run-field, so a stop that
    saves one shows it without a reload; a reader sees neither (a server path)."""
    from rlstudio.runs.services.sharing import run_share

    run = make_run(alice, "ckpt-run")
    page = client_alice.get(f"/runs/{run.pk}/").content.decode()
    assert '<code data-run-field="checkpoint">—</code>' in page
    run.checkpoint_path = "/srv/runs/7/global_step_10"
    run.save(update_fields=["checkpoint_path"])
    card = client_alice.get(f"/runs/{run.pk}/controls/").content.decode()
    assert '<span hidden data-run-field="checkpoint">/srv/runs/7/global_step_10</span>' in card
    page = client_alice.get(f"/runs/{run.pk}/").content.decode()
    assert '<code data-run-field="checkpoint">/srv/runs/7/global_step_10</code>' in page

    run_share(run=run, by=alice, add=["bob"])
    reader = Client()
    reader.force_login(bob)
    for url in (f"/runs/{run.pk}/", f"/runs/{run.pk}/controls/"):
        body = reader.get(url).content.decode()
        assert 'data-run-field="checkpoint"' not in body and "global_step_10" not in body
