"""A folder's .tar.gz as a stream (rlstudio.archive, behind the export and TensorBoard downloads): pieces no bigger than about one read
chunk (never the whole archive at once), links skipped, the same files back after untarring, the
same bytes through the ASGI path (an async iterator, one piece per thread hop) and through Django's
ASGI handler end to end."""
import asyncio
import io
import os
import tarfile

import pytest

from rlstudio import archive


@pytest.fixture
def folder(tmp_path):
    root = tmp_path / "export"
    (root / "huggingface").mkdir(parents=True)
    (root / "huggingface" / "config.json").write_text('{"a": 1}')
    (root / "huggingface" / "model.safetensors").write_bytes(os.urandom(3 * 2**20 + 17))
    (root / "lora_adapter").mkdir()
    (root / "lora_adapter" / "empty.txt").write_bytes(b"")
    (tmp_path / "secret.txt").write_text("outside")
    (root / "huggingface" / "link.txt").symlink_to(tmp_path / "secret.txt")
    (root / "lora_adapter" / "dirlink").symlink_to(tmp_path, target_is_directory=True)
    return root


def untar(data: bytes) -> dict[str, bytes]:
    """The archive's files, read whole (r:gz) and as a stream (r|gz, one gzip member only): the same."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r|gz") as tar:
        streamed = {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}
    assert streamed == files
    return files


def test_pieces_are_small_and_untar_to_the_same_files(folder, monkeypatch):
    monkeypatch.setattr(archive, "CHUNK", 64 * 1024)
    pieces = list(archive.tar_gz_chunks(folder, "run1-step2"))
    assert len(pieces) > 20 and max(len(p) for p in pieces) < 2 * 64 * 1024
    files = untar(b"".join(pieces))
    want = {f"run1-step2/{p.relative_to(folder).as_posix()}": p.read_bytes()
            for p in folder.rglob("*") if p.is_file() and not p.is_symlink()}
    assert files == want and set(files) == {"run1-step2/huggingface/config.json",
                                            "run1-step2/huggingface/model.safetensors",
                                            "run1-step2/lora_adapter/empty.txt"}
    assert archive.archive_size(folder) == sum(len(v) for v in want.values())


def test_a_file_that_shrinks_while_read_cuts_the_archive(folder, monkeypatch):
    monkeypatch.setattr(archive, "CHUNK", 64 * 1024)
    gen = archive.tar_gz_chunks(folder, "x")
    sent = 0
    while sent < 256 * 1024:  # well inside model.safetensors
        sent += len(next(gen))
    (folder / "huggingface" / "model.safetensors").write_bytes(b"short")
    with pytest.raises(OSError, match="got shorter"):
        list(gen)


def test_the_async_path_gives_the_same_bytes_and_closes_the_generator(folder):
    sync = b"".join(archive.tar_gz_chunks(folder, "p"))

    async def collect(n=None):
        gen = archive.tar_gz_chunks(folder, "p")
        out = []
        stream = archive.async_chunks(gen)
        async for piece in stream:
            out.append(piece)
            if n is not None and len(out) == n:
                await stream.aclose()  # the client went away
                break
        return b"".join(out), gen

    data, _ = asyncio.run(collect())
    assert untar(data) == untar(sync)
    _, gen = asyncio.run(collect(1))
    assert gen.gi_frame is None  # closed: its open file released
