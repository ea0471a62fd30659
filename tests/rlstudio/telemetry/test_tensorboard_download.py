"""GET /api/v1/runs/{id}/tensorboard.tar.gz: the run's tensorboard_log folder as a .tar.gz (links skipped,
never followed), for whoever may read the run; 404 naming why when the run wrote no event file; the
folder from the run's record only; the size limit; the run page's link only when there is something."""
import io
import tarfile

import pytest
from django.test import Client

from rlstudio.runs.launch import run_folder
from rlstudio.runs.services import run_share
from rlstudio.telemetry import tensorboard

pytestmark = pytest.mark.django_db
EVENTS = "events.out.tfevents.1764440000.host.1.0"


@pytest.fixture(autouse=True)
def _runs_dir(settings, tmp_path):
    settings.RUNS_DIR = tmp_path / "runs"
    settings.RLSTUDIO_ROLLOUT_DIR = str(tmp_path / "runs")


def _client(user):
    c = Client()
    c.force_login(user)
    return c


def _logs(run, payload=b"\x18\x00scalar-record") -> dict[str, bytes]:
    """Files where the trainer's tensorboard sink writes (<out_dir>/tensorboard_log/<project>/<exp>/)."""
    exp = run_folder(run) / "tensorboard_log" / "rlstudio" / "run"
    exp.mkdir(parents=True)
    (exp / EVENTS).write_bytes(payload)
    (exp / "notes.txt").write_text("second file")
    return {f"run{run.pk}-tensorboard/rlstudio/run/{EVENTS}": payload,
            f"run{run.pk}-tensorboard/rlstudio/run/notes.txt": b"second file"}


def _untar(resp) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(b"".join(resp.streaming_content)), mode="r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def test_the_folder_as_a_tar_gz(alice, run_with_metrics, tmp_path):
    run = run_with_metrics(alice, [])
    want = _logs(run)
    secret = tmp_path / "secret.txt"
    secret.write_text("outside the run")
    (run_folder(run) / "tensorboard_log" / "link.txt").symlink_to(secret)  # skipped, not followed
    (run_folder(run) / "spec.json").write_text("{}")  # the run folder's other files are not in it
    resp = _client(alice).get(f"/api/v1/runs/{run.pk}/tensorboard.tar.gz")
    assert resp.status_code == 200 and resp["Content-Type"] == "application/gzip"
    assert resp["Content-Disposition"] == f'attachment; filename="run{run.pk}-tensorboard.tar.gz"'
    assert _untar(resp) == want


def test_404_says_the_run_has_no_tensorboard_files(alice, run_with_metrics):
    run = run_with_metrics(alice, [])
    url = f"/api/v1/runs/{run.pk}/tensorboard.tar.gz"
    resp = _client(alice).get(url)
    assert resp.status_code == 404 and "has no TensorBoard files" in resp.json()["error"]["message"]
    (run_folder(run) / "tensorboard_log").mkdir(parents=True)
    (run_folder(run) / "tensorboard_log" / "notes.txt").write_text("no event file")
    assert _client(alice).get(url).status_code == 404


def test_a_linked_folder_is_not_served(alice, run_with_metrics, tmp_path):
    run = run_with_metrics(alice, [])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / EVENTS).write_bytes(b"not the run's")
    run_folder(run).mkdir(parents=True)
    (run_folder(run) / "tensorboard_log").symlink_to(elsewhere, target_is_directory=True)
    assert tensorboard.tensorboard_folder(run) is None
    assert _client(alice).get(f"/api/v1/runs/{run.pk}/tensorboard.tar.gz").status_code == 404


def test_only_who_may_read_the_run(alice, bob, make_user, run_with_metrics):
    run = run_with_metrics(alice, [])
    _logs(run)
    url = f"/api/v1/runs/{run.pk}/tensorboard.tar.gz"
    assert _client(bob).get(url).status_code == 404
    assert Client().get(url).status_code in (401, 403)
    run_share(run=run, by=alice, add=["bob"])
    assert _client(bob).get(url).status_code == 200
    assert _client(make_user("root", staff=True)).get(url).status_code == 200


def test_over_the_limit_is_refused(alice, run_with_metrics, monkeypatch):
    run = run_with_metrics(alice, [])
    _logs(run, payload=b"x" * 100)
    monkeypatch.setattr(tensorboard, "MAX_BYTES", 50)
    resp = _client(alice).get(f"/api/v1/runs/{run.pk}/tensorboard.tar.gz")
    assert resp.status_code == 409 and resp.json()["error"]["code"] == "too_large"


def test_the_run_page_links_it_only_when_there_are_files(alice, run_with_metrics):
    run = run_with_metrics(alice, [])
    page = _client(alice).get(f"/runs/{run.pk}/").content.decode()
    assert "tensorboard.tar.gz" not in page
    _logs(run)
    page = _client(alice).get(f"/runs/{run.pk}/").content.decode()
    assert f'href="/api/v1/runs/{run.pk}/tensorboard.tar.gz"' in page and "Download TensorBoard logs" in page
