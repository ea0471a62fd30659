"""`rlstudio exports list / start / show / download / delete` against the real server
(tests/cli/conftest.py): start sends the API's `step` (a step the run does not keep is named),
download streams the archive the API serves into the file a chunk at a time and refuses to overwrite
a file without --force, `-o -` writes exactly the archive's bytes to stdout (the client run as its own
process, so stdout is a real file descriptor; a terminal is refused), delete takes the export, its
catalog model and folder (needing --yes; a running export is the API's 409), and another user's run
is a 404 (exit 2). No export job runs: the succeeded export's folder is written here, as
tests/rlstudio/exports does."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import urllib.request
from pathlib import Path

import pytest

from rlstudio.catalog.models import ModelAsset
from rlstudio.exports.models import Export, ExportStatus
from rlstudio.exports.services import export_folder
from rlstudio_cli import client as cli_client

WEIGHTS = os.urandom(3 * 2**20 + 123)
PLATFORM = Path(__file__).resolve().parents[2] / "platform"


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


def test_show_prints_one_export_and_its_files(as_alice, finished_run, exported):
    r = as_alice("exports", "show", finished_run.pk, exported.pk)
    assert r.code == 0, r
    lines = r.out.splitlines()
    assert lines[:4] == [f"id:       {exported.pk}", f"run:      {finished_run.pk}", "step:     2", "status:   succeeded"]
    assert f"size:     {len(WEIGHTS) + 22} (3.0 MiB)" in lines
    assert f"download: rlstudio exports download {finished_run.pk} {exported.pk} -o FILE" in lines
    assert lines[-3:] == ["files (2):", "  huggingface/config.json", "  huggingface/model.safetensors"]
    body = json.loads(as_alice("exports", "show", finished_run.pk, exported.pk, "--json").out)
    assert body["id"] == exported.pk and body["files"] == exported.files
    missing = as_alice("exports", "show", finished_run.pk, exported.pk + 1)
    assert missing.code == 2 and missing.err.strip() == (
        f"error: Not found. (GET /api/v1/runs/{finished_run.pk}/exports/{exported.pk + 1}/)"), missing


def test_delete_takes_the_export_its_model_and_folder(as_alice, alice, bob, finished_run, exported, server, token_of,
                                                      cli, monkeypatch):
    model = ModelAsset.objects.create(owner=alice, name="done-step2", path=str(export_folder(finished_run, 2)))
    Export.objects.filter(pk=exported.pk).update(model=model)
    run, eid = finished_run.pk, exported.pk
    as_bob = cli("--url", server, "--token", token_of(bob), "exports", "delete", run, eid, "--yes")
    assert as_bob.code == 2 and as_bob.err.strip() == f"error: Not found. (DELETE /api/v1/runs/{run}/exports/{eid}/)"

    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))  # not a terminal: refused, never read
    refused = as_alice("exports", "delete", run, eid)
    assert refused.code == 2 and refused.err.startswith("error: --yes: deleting an export cannot be undone")
    Export.objects.filter(pk=eid).update(status=ExportStatus.RUNNING)
    busy = as_alice("exports", "delete", run, eid, "-y")
    assert busy.code == 2 and busy.err.strip() == f"error: export {eid} is running: delete it once it has finished"
    Export.objects.filter(pk=eid).update(status=ExportStatus.SUCCEEDED)
    assert Export.objects.filter(pk=eid).exists() and export_folder(finished_run, 2).is_dir()

    done = as_alice("exports", "delete", run, eid, "-y")
    assert done.code == 0 and done.out.strip() == f"export {eid} of run {run} deleted", done
    assert not Export.objects.exists() and not ModelAsset.objects.filter(pk=model.pk).exists()
    assert not export_folder(finished_run, 2).exists()


def _cli_process(server: str, key: str, tmp_path, *argv, stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
    """The client as its own process (`python -m rlstudio_cli`), its stdout a real file descriptor."""
    env = {**os.environ, "PYTHONPATH": str(PLATFORM), "XDG_CONFIG_HOME": str(tmp_path / "xdg-proc")}
    env.pop("RLSTUDIO_URL", None)
    env.pop("RLSTUDIO_TOKEN", None)
    return subprocess.run([sys.executable, "-m", "rlstudio_cli", "--url", server, "--token", key, *map(str, argv)],
                          stdout=stdout, stderr=subprocess.PIPE, env=env, timeout=120)


def test_download_to_stdout_writes_the_archive_and_nothing_else(alice, finished_run, exported, server, token_of,
                                                                tmp_path):
    key = token_of(alice)
    req = urllib.request.Request(f"{server}/api/v1/runs/{finished_run.pk}/exports/{exported.pk}/archive/",
                                 headers={"Authorization": f"Token {key}"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        served = resp.read()

    proc = _cli_process(server, key, tmp_path, "exports", "download", finished_run.pk, exported.pk, "-o", "-")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == served  # byte for byte: the archive and nothing else
    assert proc.stderr.decode().strip() == (f"export {exported.pk} of run {finished_run.pk}: {len(served)} bytes "
                                            "written to stdout")
    with tarfile.open(fileobj=io.BytesIO(proc.stdout), mode="r:gz") as tar:
        assert tar.extractfile(f"run{finished_run.pk}-step2/huggingface/model.safetensors").read() == WEIGHTS
    assert not os.path.exists("-")  # no file named '-' in the working folder

    primary, secondary = os.openpty()  # stdout a terminal: refused, nothing written to it
    try:
        tty = _cli_process(server, key, tmp_path, "exports", "download", finished_run.pk, exported.pk, "-o", "-",
                           stdout=secondary)
    finally:
        os.close(secondary)
    os.set_blocking(primary, False)
    try:
        written = os.read(primary, 1 << 16)
    except (BlockingIOError, OSError):
        written = b""
    os.close(primary)
    assert tty.returncode == 2 and written == b"", tty
    assert tty.stderr.decode().startswith("error: --output: stdout is a terminal: redirect it"), tty.stderr

    Export.objects.filter(pk=exported.pk).update(status=ExportStatus.RUNNING)
    refused = _cli_process(server, key, tmp_path, "exports", "download", finished_run.pk, exported.pk, "-o", "-")
    assert refused.returncode == 2 and refused.stdout == b"", refused
    assert refused.stderr.decode().startswith(f"error: export {exported.pk} is running"), refused.stderr


def test_download_to_stdout_ends_quietly_when_the_reader_goes_away(alice, finished_run, exported, server, token_of,
                                                                   tmp_path):
    """`rlstudio exports download R E -o - | head -c 100`: the pipe closes midway; exit 0, no traceback."""
    env = {**os.environ, "PYTHONPATH": str(PLATFORM), "XDG_CONFIG_HOME": str(tmp_path / "xdg-proc")}
    proc = subprocess.Popen([sys.executable, "-m", "rlstudio_cli", "--url", server, "--token", token_of(alice),
                             "exports", "download", str(finished_run.pk), str(exported.pk), "-o", "-"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    head = proc.stdout.read(100)
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0, stderr
    assert head[:2] == b"\x1f\x8b" and len(head) == 100  # gzip's magic: the archive's first bytes
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
