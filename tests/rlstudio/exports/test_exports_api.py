"""Exports of a run's checkpoints through the API (issue 19, item 4): a real LoRA run's non-final
checkpoint exported by the task (merged folder + adapter, model card, catalog entry), loaded back with
transformers and generating what the checkpoint loaded by the trainer generates; its archive untars to
the same files; `step` checked (400 naming it); another user 404, a shared reader 403 on POST; the
run page's card."""
import io
import json
import shutil
import tarfile

import pytest
import torch
import yaml
from rest_framework.test import APIClient

from rlstudio.catalog.models import ModelAsset
from rlstudio.exports.models import Export, ExportStatus
from rlstudio.exports.services import export_folder
from rlstudio.exports.tasks import run_export
from rlstudio.runs.models import Run, RunStatus
from rlstudio.runs.services import run_share

pytestmark = pytest.mark.django_db
PROMPT = [[11, 12, 13, 14, 15, 16]]


def _api(user) -> APIClient:
    c = APIClient()
    c.force_authenticate(user)
    return c


@pytest.fixture
def published(monkeypatch):
    """The export tasks that would have been sent to the broker."""
    sent = []
    from rlstudio.config import celery

    monkeypatch.setattr(celery, "publish", lambda name, *args: sent.append((name, *args)))
    return sent


@pytest.fixture(scope="module")
def lora_checkpoints(tmp_path_factory):
    """A tiny model and two committed checkpoints (steps 1 and 2) of a LoRA run, made by the trainer's
    own worker: (config, folder holding global_step_1/ and global_step_2/)."""
    from tests.trainer.parallel.test_lora_fsdp import cfg_dict, step
    from trainer import checkpoint as ckpt
    from trainer.models.tiny import make_tiny_model
    from trainer.parallel.group import LocalWorkerGroup
    from trainer.tasks import arith

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("lora_run")
    model = make_tiny_model(root / "base-model", preset="smoke", seed=0)
    train = root / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in arith.make_rl_rows("train", 16, seed=0)))
    d = cfg_dict(model, train)
    group = LocalWorkerGroup(d)
    try:
        for n in (1, 2):
            step(group, n)
            ckpt.save_checkpoint(root / "run", n, write_actor=lambda p: group.call("save", path=str(p)),
                                 loader_state={}, trainer_state={}, config=d)
    finally:
        group.shutdown()
    return d, root / "run"


@pytest.fixture
def runs_dir(settings, tmp_path):
    settings.RUNS_DIR = str(tmp_path / "runs")
    settings.RLSTUDIO_MODEL_ROOTS = [str(tmp_path / "models")]  # the run's folder is not under them
    return tmp_path / "runs"


@pytest.fixture
def lora_run(alice, make_run, runs_dir, lora_checkpoints):
    d, ckpts = lora_checkpoints
    run = make_run(alice, "lora <b>run</b>")
    Run.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED, step=2, config=d)
    run.refresh_from_db()
    for n in (1, 2):
        shutil.copytree(ckpts / f"global_step_{n}", runs_dir / str(run.pk) / f"global_step_{n}")
    return run


@pytest.fixture
def fake_run(alice, make_run, runs_dir):
    """A run with two checkpoint folders (empty actors: enough to be offered, not to be exported)."""
    run = make_run(alice, "alice-run")
    Run.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED, step=2)
    run.refresh_from_db()
    for step in (1, 2):
        (runs_dir / str(run.pk) / f"global_step_{step}" / "actor").mkdir(parents=True)
    (runs_dir / str(run.pk) / "global_step_3.tmp" / "actor").mkdir(parents=True)  # uncommitted
    return run


def greedy(model) -> list[int]:
    with torch.no_grad():
        out = model.eval().generate(input_ids=torch.tensor(PROMPT), max_new_tokens=10, do_sample=False,
                                    pad_token_id=0)
    return out[0].tolist()[len(PROMPT[0]):]


def test_a_lora_checkpoint_is_exported_registered_carded_and_downloadable(
        alice, bob, make_user, lora_run, lora_checkpoints, published, runs_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    from trainer.parallel.group import LocalWorkerGroup

    url = f"/api/v1/runs/{lora_run.pk}/exports/"
    r = _api(alice).post(url, {"step": 1}, format="json")
    assert r.status_code == 202, r.content
    eid = r.json()["id"]
    assert published == [("exports.run_export", eid)] and r.json()["status"] == "queued"
    assert run_export(eid) == "succeeded"
    assert run_export(eid) == "already succeeded"
    body = _api(alice).get(f"{url}{eid}/").json()
    assert body["status"] == "succeeded" and body["error"] == "" and body["lora"] is True and body["step"] == 1
    assert {"huggingface/README.md", "huggingface/model.safetensors", "lora_adapter/adapter_model.safetensors",
            "lora_adapter/README.md"} <= set(body["files"])
    assert body["archive"] == f"{url}{eid}/archive/" and body["size_bytes"] > 0
    # Asking again gives the same export (200), nothing queued.
    again = _api(alice).post(url, {"step": 1}, format="json")
    assert again.status_code == 200 and again.json()["id"] == eid and len(published) == 1

    # Registered in the catalog for the run's owner, inside the run's own folder.
    folder = export_folder(lora_run, 1)
    assert folder == runs_dir / str(lora_run.pk) / "exports" / "step_1"
    model = ModelAsset.objects.get(pk=body["model"])
    assert model.owner == alice and model.source == ModelAsset.Source.RUN_EXPORT and model.source_run_id == lora_run.pk
    assert model.path == str((folder / "huggingface").resolve()) and model.num_parameters > 0

    # Loads with transformers and generates what the checkpoint does when the trainer loads it.
    d, _ = lora_checkpoints
    group = LocalWorkerGroup(d)
    try:
        group.call("load", path=str(runs_dir / str(lora_run.pk) / "global_step_1" / "actor"))
        want = greedy(group.worker.actor.model)
    finally:
        group.shutdown()
    assert greedy(AutoModelForCausalLM.from_pretrained(folder / "huggingface")) == want

    # The model card: a Hugging Face header, the run's facts, no path of this machine.
    card = (folder / "huggingface" / "README.md").read_text()
    header = yaml.safe_load(card.split("---\n")[1])
    assert header["base_model"] == lora_run.model.name and header["library_name"] == "transformers"
    assert {"rlstudio", "lora", "grpo"} <= set(header["tags"])
    assert "<b>" not in card and r"lora \<b\>run\</b\>" in card
    assert "LoRA: rank 4" in card and "step 1" in card and r"Training dataset: lora \<b\>run\</b\>-data" in card
    assert "actor\\_rollout\\_ref.model.lora\\_rank" in card  # a user-set key (escaped for Markdown)
    for f in folder.rglob("*"):
        if f.is_file() and f.suffix != ".safetensors":
            text = f.read_text(errors="replace")
            assert str(tmp_path) not in text and str(d["actor_rollout_ref"]["model"]["path"]) not in text, f
            assert "train.jsonl" not in text and "default\\_local\\_dir" not in text, f

    # The archive: streamed, and it untars to the same files.
    resp = _api(alice).get(f"{url}{eid}/archive/")
    assert resp.status_code == 200 and resp.streaming
    assert resp["Content-Disposition"] == f'attachment; filename="run{lora_run.pk}-step1.tar.gz"'
    data = b"".join(resp.streaming_content)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    on_disk = {f"run{lora_run.pk}-step1/{p.relative_to(folder).as_posix()}": p.read_bytes()
               for p in folder.rglob("*") if p.is_file()}
    assert members == on_disk and len(members) == len(body["files"])

    # A reader of the shared run sees and downloads it but may not export; anyone else: 404.
    carol = make_user("carol")
    for path in (url, f"{url}{eid}/", f"{url}{eid}/archive/"):
        assert _api(bob).get(path).status_code == 404
    run_share(run=lora_run, by=alice, add=["bob"])
    assert [e["id"] for e in _api(bob).get(url).json()] == [eid]
    assert _api(bob).get(f"{url}{eid}/archive/").status_code == 200
    assert _api(bob).post(url, {"step": 2}, format="json").status_code == 403
    assert _api(bob).post(url, {"step": "nope"}, format="json").status_code == 403  # before validation
    for path in (url, f"{url}{eid}/", f"{url}{eid}/archive/"):
        assert _api(carol).get(path).status_code == 404
    assert _api(carol).post(url, {"step": 2}, format="json").status_code == 404
    assert Export.objects.count() == 1 and len(published) == 1


@pytest.mark.parametrize("step", [3, 7, "1", None, True, -1, 1.5, "../../etc", [1]])
def test_a_step_that_is_not_a_recorded_checkpoint_is_400_naming_step(alice, fake_run, published, step):
    r = _api(alice).post(f"/api/v1/runs/{fake_run.pk}/exports/", {"step": step}, format="json")
    assert r.status_code == 400, r.content
    assert r.json()["error"]["field"] == "step"
    assert not Export.objects.exists() and not published


def test_one_export_at_a_time_a_failure_is_recorded_and_can_be_asked_again(alice, staff, fake_run, published):
    url = f"/api/v1/runs/{fake_run.pk}/exports/"
    first = _api(alice).post(url, {"step": 1}, format="json")
    assert first.status_code == 202
    r = _api(alice).post(url, {"step": 2}, format="json")
    assert r.status_code == 409 and Export.objects.count() == 1
    # The checkpoint's actor folder is empty: the task fails and says why.
    assert run_export(first.json()["id"]) == "failed"
    failed = Export.objects.get(pk=first.json()["id"])
    assert failed.status == ExportStatus.FAILED and failed.error and failed.model is None
    assert _api(alice).get(f"{url}{failed.pk}/archive/").status_code == 409
    # Staff may export anyone's run; a failed export is queued again (same row).
    r = _api(staff).post(url, {"step": 1}, format="json")
    assert r.status_code == 202 and r.json()["id"] == failed.pk and r.json()["status"] == "queued"
    assert [p[1] for p in published] == [failed.pk, failed.pk]


def test_the_run_page_card(alice, bob, fake_run, published, make_model):
    from django.test import Client

    exported = make_model(alice, name="alice-run-step2")
    done = Export.objects.create(run=fake_run, owner=alice, step=2, status=ExportStatus.SUCCEEDED, size_bytes=1234,
                                 files=["huggingface/config.json"], model=exported)
    run_share(run=fake_run, by=alice, add=["bob"])
    pages = {}
    for user in (alice, bob):
        c = Client()
        c.force_login(user)
        pages[user.username] = (c, c.get(f"/runs/{fake_run.pk}/").content.decode())
    _, html = pages["alice"]
    assert 'id="exports-card"' in html and f"/api/v1/runs/{fake_run.pk}/exports/" in html
    assert "Export step 1</button>" in html and "disabled>Export step 2</button>" in html
    assert f"/runs/{fake_run.pk}/exports/{done.pk}/delete/" in html and "data-confirm=" in html
    assert f'<a href="/models/{exported.pk}/">alice-run-step2</a>' in html  # the exported model's own page
    _, html = pages["bob"]
    assert 'id="exports-card"' in html and "archive/" in html and "Export step 1" not in html
    assert "/delete/" not in html
    assert "alice-run-step2" in html and f"/models/{exported.pk}/" not in html  # not his to open
    c, _ = pages["bob"]
    assert c.post(f"/runs/{fake_run.pk}/exports/", {"step": "1"}).status_code == 403
    c, _ = pages["alice"]
    r = c.post(f"/runs/{fake_run.pk}/exports/", {"step": "1"})
    assert r.status_code == 302 and r["Location"].endswith(f"/runs/{fake_run.pk}/#exports-card")
    assert Export.objects.filter(run=fake_run, step=1, status=ExportStatus.QUEUED).exists() and len(published) == 1
    r = c.post(f"/runs/{fake_run.pk}/exports/", {"step": "9"}, follow=True)
    assert "no checkpoint at step 9" in r.content.decode()


def test_the_run_page_refuses_a_step_of_non_ascii_digits(alice, fake_run, published):
    """'²' is a digit to str.isdigit but not to int(): the page's form refuses it like any bad step (the
    card's message names step), nothing is queued."""
    from django.test import Client

    c = Client()
    c.force_login(alice)
    for raw in ("\u00b2", "\u0661", "1" * 12, " 1"):
        r = c.post(f"/runs/{fake_run.pk}/exports/", {"step": raw}, follow=True)
        assert r.status_code == 200 and r.redirect_chain[-1][1] == 302, raw
        assert "step must be the global step of a checkpoint" in r.content.decode(), raw
    assert not Export.objects.exists() and not published


def test_the_archive_streams_through_the_asgi_handler(alice, fake_run, runs_dir):
    """Under ASGI (Daphne) the view hands Django an async iterator (a sync one would be read whole
    before the first byte is sent): the pieces arrive one by one and untar to the folder's files."""
    import os
    import warnings

    from asgiref.sync import async_to_sync
    from django.test import AsyncClient

    folder = export_folder(fake_run, 2) / "huggingface"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(os.urandom(3 * 2**20))
    export = Export.objects.create(run=fake_run, owner=alice, step=2, status=ExportStatus.SUCCEEDED)

    async def download():
        client = AsyncClient()
        await client.aforce_login(alice)
        resp = await client.get(f"/api/v1/runs/{fake_run.pk}/exports/{export.pk}/archive/")
        pieces = [piece async for piece in resp.streaming_content]
        return resp, pieces

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Django warns when it must read a sync iterator whole
        resp, pieces = async_to_sync(download)()
    assert resp.status_code == 200 and resp.is_async and len(pieces) > 2
    with tarfile.open(fileobj=io.BytesIO(b"".join(pieces)), mode="r:gz") as tar:
        names = sorted(m.name for m in tar.getmembers())
    assert names == [f"run{fake_run.pk}-step2/huggingface/config.json",
                     f"run{fake_run.pk}-step2/huggingface/model.safetensors"]


def test_delete_removes_the_folder_and_the_catalog_model(alice, bob, make_user, fake_run, make_dataset):
    from rlstudio.runs.services import run_create

    folder = export_folder(fake_run, 2)
    (folder / "huggingface").mkdir(parents=True)
    (folder / "huggingface" / "config.json").write_text("{}")
    model = ModelAsset.objects.create(owner=alice, name="exported", path=str(folder / "huggingface"),
                                      source=ModelAsset.Source.RUN_EXPORT, source_run=fake_run)
    export = Export.objects.create(run=fake_run, owner=alice, step=2, status=ExportStatus.SUCCEEDED, model=model)
    url = f"/api/v1/runs/{fake_run.pk}/exports/{export.pk}/"
    carol = make_user("carol")
    assert _api(carol).delete(url).status_code == 404
    run_share(run=fake_run, by=alice, add=["bob"])
    assert _api(bob).delete(url).status_code == 403
    # A run started from the exported model keeps it (and the folder) until that run is gone.
    user_run, _ = run_create(owner=alice, name="from-export", dataset=make_dataset(alice, "d2"), model=model,
                             config={}, gpus=0)
    r = _api(alice).delete(url)
    assert r.status_code == 409 and "from-export" in r.json()["error"]["message"]
    assert Export.objects.filter(pk=export.pk).exists() and folder.is_dir()
    user_run.delete()
    assert _api(alice).delete(url).status_code == 204
    assert not Export.objects.filter(pk=export.pk).exists() and not ModelAsset.objects.filter(pk=model.pk).exists()
    assert not folder.exists() and (folder.parent.parent / "global_step_2").is_dir()  # the checkpoint stays
    queued = Export.objects.create(run=fake_run, owner=alice, step=1)
    r = _api(alice).delete(f"/api/v1/runs/{fake_run.pk}/exports/{queued.pk}/")
    assert r.status_code == 409 and Export.objects.filter(pk=queued.pk).exists()


def test_a_failed_exports_paths_and_traceback_are_the_owners_and_staffs_not_a_readers(
        alice, bob, make_user, staff, fake_run, runs_dir, published, monkeypatch):
    """The export task fails on an error naming the checkpoint's folder: its `error` (the exception,
    the path replaced) is every reader's on the API (list, detail) and the run page's card; its
    `error_log` (the error as it was, the traceback) the owner's and staff's, "" for a reader by name
    or as everyone, and the page shows it only to the owner and staff."""
    from django.test import Client

    from rlstudio.runs.failure import PATH_MARK
    from trainer import export as trainer_export

    folder = runs_dir / str(fake_run.pk) / "global_step_1" / "actor"

    def no_weights(config, step_dir, out, **kw):
        raise FileNotFoundError(f"no model weights in '{folder}'")

    monkeypatch.setattr(trainer_export, "export_checkpoint", no_weights)
    url = f"/api/v1/runs/{fake_run.pk}/exports/"
    eid = _api(alice).post(url, {"step": 1}, format="json").json()["id"]
    assert run_export(eid) == "failed"
    reason = f"FileNotFoundError: no model weights in '{PATH_MARK}'"

    def seen(user):
        listed, detail = _api(user).get(url), _api(user).get(f"{url}{eid}/")
        c = Client()
        c.force_login(user)
        return listed, detail, c.get(f"/runs/{fake_run.pk}/").content.decode()

    for manager in (alice, staff):
        listed, detail, html = seen(manager)
        for body in (listed.json()[0], detail.json()):
            assert body["error"] == reason, manager.username
            assert body["error_log"].startswith("Traceback (most recent call last):")  # the task's traceback
            assert body["error_log"].endswith(f"FileNotFoundError: no model weights in '{folder}'")
            assert "in no_weights" in body["error_log"]
        assert 'class="export-error-log"' in html and str(folder) in html, manager.username
    carol = make_user("carol")
    run_share(run=fake_run, by=alice, add=["bob"])  # bob by name, carol once it is everyone's
    for reader, visibility in ((bob, "private"), (carol, "everyone")):
        run_share(run=fake_run, by=alice, visibility=visibility)
        listed, detail, html = seen(reader)
        for body in (listed.json()[0], detail.json()):
            assert body["error"] == reason and body["error_log"] == "", reader.username
        assert "no model weights in" in html and "export-error-log" not in html, reader.username
        for text in (listed.content.decode(), detail.content.decode(), html):
            assert str(runs_dir) not in text and "Traceback" not in text, reader.username
    # asked again, the export starts afresh: neither text is left from the failure
    assert _api(alice).post(url, {"step": 1}, format="json").status_code == 202
    again = Export.objects.get(pk=eid)
    assert again.status == ExportStatus.QUEUED and again.error == "" and again.error_log == ""


def test_running_an_export_locks_only_its_own_row_not_the_runs_owner_or_model(alice, fake_run):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from rlstudio.exports.services import export_execute

    export = Export.objects.create(run=fake_run, owner=alice, step=1)
    with CaptureQueriesContext(connection) as ctx:
        export_execute(export_id=export.pk)
    locks = [q["sql"] for q in ctx.captured_queries if " FOR " in q["sql"] and "exports_export" in q["sql"]]
    # FOR NO KEY UPDATE of the export's row only: OF its table where the query joins others, none needed alone
    assert locks and all(q.endswith(f'FOR NO KEY UPDATE OF "{Export._meta.db_table}"')
                         or (q.endswith("FOR NO KEY UPDATE") and " JOIN " not in q) for q in locks), locks
