"""`rlstudio exports list / start / download` against the real server (tests/cli/conftest.py): start
sends the API's `step` (a step the run does not keep is named), download streams the archive the API
serves into the file a chunk at a time and refuses to overwrite a file without --force, and another
user's run is a 404 (exit 2). No export job runs: the succeeded export's folder is written here, as
tests/rlstudio/exports does."""
from __future__ import annotations

import io
import os
import tarfile
import urllib.request

import pytest

from rlstudio.exports.models import Export, ExportStatus
from rlstudio.exports.services import export_folder
from rlstudio_cli import client as cli_client

WEIGHTS = os.urandom(3 * 2**20 + 123)


@pytest.fixture
def exported(finished_run, alice):
    """A succeeded export of step 2 of alice's run, its folder written as the export task leaves it."""
    folder = export_folder(finished_run, 2) / "huggingface"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "tiny"}')
    (folder / "model.safetensors").write_bytes(WEIGHTS)
    return Export.objects.create(run=finished_run, owner=alice, step=2, status=ExportStatus.SUCCEEDED,
                                 files=["huggingface/config.json", "huggingface/model.safetensors"],
                                 size_bytes=len(WEIGHTS) + 22)


def test_start_sends_the_step_and_list_shows_it(as_alice, finished_run, _no_broker):
    run = finished_run.pk
    bad = as_alice("exports", "start", run, "--step", 7)
    assert bad.code == 2 and bad.out == "" and bad.err.startswith("error: step: "), bad
    assert not Export.objects.exists() and not _no_broker

    r = as_alice("exports", "start", run, "--step", 2)
    assert r.code == 0, r
    export = Export.objects.get()
    assert r.out.strip() == f"export {export.pk} of run {run} step 2: queued" and export.step == 2
    assert ("exports.run_export", export.pk) in _no_broker
    busy = as_alice("exports", "start", run, "--step", 1)  # one export of a user at a time: the API's 409
    assert busy.code == 2 and busy.err.startswith("error: "), busy

    listed = as_alice("exports", "list", run)
    lines = listed.out.splitlines()
    assert lines[0].split() == ["ID", "STEP", "STATUS", "LORA", "SIZE", "MODEL", "OWNER", "CREATED"]
    assert lines[1].split()[:7] == [str(export.pk), "2", "queued", "false", "-", "-", "alice"]


def test_download_streams_the_archive_into_the_file(as_alice, alice, finished_run, exported, server, token_of,
                                                    tmp_path, monkeypatch):
    chunks: list[int] = []
    real = cli_client.Client.download

    def spy(self, path, write, **kw):
        return real(self, path, lambda chunk: (chunks.append(len(chunk)), write(chunk)), **kw)

    monkeypatch.setattr(cli_client.Client, "download", spy)
    monkeypatch.setattr(cli_client, "DOWNLOAD_CHUNK", 256 * 1024)
    dest = tmp_path / "out" / "model.tar.gz"
    dest.parent.mkdir()
    r = as_alice("exports", "download", finished_run.pk, exported.pk, "-o", dest)
    assert r.code == 0, r
    data = dest.read_bytes()
    assert r.out.strip() == f"export {exported.pk} of run {finished_run.pk}: {len(data)} bytes written to {dest}"
    assert len(chunks) > 4 and max(chunks) <= 256 * 1024 and sum(chunks) == len(data)  # a chunk at a time
    assert os.listdir(dest.parent) == ["model.tar.gz"]  # no .part left behind

    # The bytes the API serves, and they untar to the export's files.
    req = urllib.request.Request(f"{server}/api/v1/runs/{finished_run.pk}/exports/{exported.pk}/archive/",
                                 headers={"Authorization": f"Token {token_of(alice)}"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.read() == data
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        top = f"run{finished_run.pk}-step2/huggingface"
        assert tar.extractfile(f"{top}/model.safetensors").read() == WEIGHTS
        assert tar.extractfile(f"{top}/config.json").read() == b'{"model_type": "tiny"}'

    # An existing file is left alone unless --force.
    dest.write_bytes(b"mine")
    kept = as_alice("exports", "download", finished_run.pk, exported.pk, "-o", dest)
    assert kept.code == 2 and kept.err.startswith(f"error: --output: {dest} exists: pass --force"), kept
    assert dest.read_bytes() == b"mine" and os.listdir(dest.parent) == ["model.tar.gz"]
    forced = as_alice("exports", "download", finished_run.pk, exported.pk, "-o", dest, "--force")
    assert forced.code == 0 and dest.read_bytes() == data, forced
    folder = as_alice("exports", "download", finished_run.pk, exported.pk, "-o", dest.parent)
    assert folder.code == 2 and "is a folder" in folder.err, folder


def test_an_unfinished_export_and_another_users_run_write_nothing(as_alice, bob, make_run, finished_run, exported,
                                                                 server, token_of, cli, tmp_path):
    Export.objects.filter(pk=exported.pk).update(status=ExportStatus.RUNNING)
    dest = tmp_path / "x.tar.gz"
    r = as_alice("exports", "download", finished_run.pk, exported.pk, "-o", dest)
    assert r.code == 2 and r.err.startswith(f"error: export {exported.pk} is running"), r
    assert not dest.exists()

    theirs, _ = make_run(bob, "bobs")
    for argv in (("exports", "list", theirs.pk), ("exports", "start", theirs.pk, "--step", 1),
                 ("exports", "download", theirs.pk, exported.pk, "-o", dest)):
        r = as_alice(*argv)
        assert r.code == 2 and r.out == "" and r.err.startswith("error: Not found. ("), (argv, r)
        assert f" /api/v1/runs/{theirs.pk}/" in r.err, (argv, r)
    as_bob = cli("--url", server, "--token", token_of(bob), "exports", "download", finished_run.pk, exported.pk,
                 "-o", dest)
    assert as_bob.code == 2, as_bob
    assert as_bob.err.strip() == (f"error: Not found. "
                                  f"(GET /api/v1/runs/{finished_run.pk}/exports/{exported.pk}/archive/)")
    assert not dest.exists() and not any(p.endswith(".part") for p in os.listdir(tmp_path))
    assert Export.objects.count() == 1
