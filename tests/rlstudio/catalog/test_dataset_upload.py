"""Dataset upload through the real API view: the bad-file corpus, format equivalence, rows, reward
check, delete and isolation. Validation runs in-process through the same service the Celery task
calls (the worker test is test_dataset_worker.py)."""
import gzip
import io
import json
import time
import zipfile
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from rlstudio.catalog.models import Dataset
from rlstudio.catalog.services.validation import dataset_validate

GSM8K_TEST = Path(__file__).resolve().parents[2] / "fixtures" / "gsm8k" / "test.jsonl"  # MIT; see its README
GOOD = {"question": "What is 2 + 3?", "answer": "2 + 3 = 5\n#### 5"}


def jsonl(*rows) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


@pytest.fixture
def uploads(settings, tmp_path):
    settings.UPLOADS_DIR = tmp_path / "uploads"
    settings.RLSTUDIO_MAX_LINE_BYTES = 64 * 1024
    settings.RLSTUDIO_MAX_NESTING_DEPTH = 16
    settings.RLSTUDIO_MAX_DECOMPRESSED_BYTES = 5 * 1024 * 1024
    return tmp_path / "uploads"


@pytest.fixture
def api(alice):
    client = APIClient()
    client.force_authenticate(alice)
    return client


def upload(api, name: str, content: bytes, **fields):
    return api.post("/api/v1/datasets/", {"file": SimpleUploadedFile(name, content), **fields}, format="multipart")


def upload_and_validate(api, name, content, **fields) -> tuple[int, dict]:
    """(status, body) of the request; when it created a dataset, validate it and return the dataset."""
    resp = upload(api, name, content, **fields)
    if resp.status_code != 201:
        return resp.status_code, resp.json()
    ds = dataset_validate(dataset=Dataset.objects.get(pk=resp.json()["id"]))
    # When a session's Celery worker is up it may have taken the upload's task first: wait for it.
    deadline = time.monotonic() + 60
    while ds.status == Dataset.Status.VALIDATING and time.monotonic() < deadline:
        time.sleep(0.2)
        ds.refresh_from_db()
    return resp.status_code, api.get(f"/api/v1/datasets/{ds.pk}/").json()


def files_left(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []


def gzip_bomb() -> bytes:
    # 40 MB of valid rows that compress to ~100 KB: refused for the expanded size, not for content.
    line = json.dumps(GOOD).encode() + b"\n"
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=9) as gz:
        chunk = line * 20000
        for _ in range(40 * 1024 * 1024 // len(chunk) + 1):
            gz.write(chunk)
    return buf.getvalue()


BAD = [
    # (id, file name, content, preset, words the message must contain, line it must name)
    ("empty", "e.jsonl", b"", "auto", "empty", None),
    ("blank-lines", "b.jsonl", b"\n\n  \n", "auto", "no rows", None),
    ("invalid-utf8", "u.jsonl", jsonl(GOOD) + b'{"question": "caf\xe9", "answer": "#### 1"}\n', "gsm8k", "UTF-8", 2),
    ("truncated-last-line", "t.jsonl", jsonl(GOOD, GOOD) + b'{"question": "x", "ans', "gsm8k", "not valid JSON", 3),
    ("array-not-object", "a.jsonl", jsonl(GOOD) + b'[1, 2, 3]\n', "gsm8k", "expected a JSON object, got an array", 2),
    ("missing-field", "m.jsonl", jsonl(GOOD, GOOD, {"question": "only"}), "gsm8k", "'answer'", 3),
    ("wrong-type", "w.jsonl", jsonl(GOOD, {"question": 12, "answer": "#### 3"}), "gsm8k", "'question': must be text", 2),
    ("no-final-answer", "f.jsonl", jsonl({"question": "q", "answer": "no marker"}), "gsm8k", "####", 1),
    ("nul-bytes", "n.jsonl", jsonl(GOOD) + b'{"question": "a\x00b"}\n', "gsm8k", "NUL", 2),
    ("text-posing-as-parquet", "p.parquet", b"question,answer\nhello,#### 1\n", "auto", "not a Parquet file", None),
    ("unknown-role", "r.jsonl", jsonl({"messages": [{"role": "user", "content": "hi"}], "ground_truth": "1"},
                                      {"messages": [{"role": "wizard", "content": "hi"}], "ground_truth": "1"}),
     "messages", "unknown chat role 'wizard'", 2),
    ("no-user-message", "nu.jsonl", jsonl({"messages": [{"role": "system", "content": "s"}], "ground_truth": "1"}),
     "messages", "no user message", 1),
    ("over-long-line", "l.jsonl", jsonl(GOOD) + jsonl({"question": "x" * 70000, "answer": "#### 1"}), "gsm8k",
     "longer than the limit", 2),
    ("deep-nesting", "d.jsonl", jsonl(GOOD) + b'{"question": ' + b"[" * 40 + b"]" * 40 + b', "answer": "#### 1"}\n',
     "gsm8k", "nested deeper", 2),
    ("gzip-bomb", "bomb.jsonl.gz", None, "gsm8k", "expands past the limit", None),
    ("fake-gzip", "g.jsonl.gz", jsonl(GOOD), "auto", "not gzip", None),
    ("unrecognised-layout", "x.jsonl", jsonl({"foo": 1}), "auto", "cannot recognise the layout", 1),
    ("unknown-extension", "x.exe", b"MZ\x90\x00", "auto", "unsupported file type", None),
]


@pytest.mark.django_db
@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_bad_file_is_refused_with_its_place_and_nothing_left(api, uploads, case):
    _id, name, content, preset, words, line = case
    if content is None:
        content = gzip_bomb()
    code, body = upload_and_validate(api, name, content, preset=preset)
    if code == 201:
        assert body["status"] == "invalid", body
        message, got_line = body["error"], body["error_line"]
    else:
        assert 400 <= code < 500 and "error" in body, body
        message, got_line = body["error"]["message"], body["error"]["line"]
    assert words in message, message
    if line is not None:
        assert got_line == line and f"line {line}" in message, message
    assert files_left(uploads) == []
    assert Dataset.objects.filter(status=Dataset.Status.READY).count() == 0


@pytest.mark.django_db
def test_over_size_limit_is_refused_413(api, uploads, settings):
    settings.RLSTUDIO_MAX_UPLOAD_BYTES = 1000
    resp = upload(api, "big.jsonl", jsonl(*[GOOD] * 50))
    assert resp.status_code == 413 and resp.json()["error"]["code"] == "too_large"
    assert files_left(uploads) == [] and not Dataset.objects.exists()


def test_a_stats_model_the_user_may_not_see_is_a_400_on_its_field(api, uploads, bob, make_model):
    """An id named in the request (docs/api.md): another user's private model, or none, is a 400 on stats_model."""
    for model_id in (make_model(bob, "bobs-private").pk, 999_999):
        resp = upload(api, "d.jsonl", jsonl(GOOD), stats_model=model_id)
        assert resp.status_code == 400, resp.content
        assert resp.json()["error"]["field"] == "stats_model" and str(model_id) in resp.json()["error"]["message"]
    assert files_left(uploads) == [] and not Dataset.objects.exists()


def _gsm8k_rows(n: int) -> list[dict]:
    with open(GSM8K_TEST, encoding="utf-8") as f:
        return [json.loads(next(f)) for _ in range(n)]


@pytest.mark.django_db
def test_jsonl_parquet_csv_json_gzip_zip_give_the_same_rows(api, uploads, tmp_path):
    import datasets

    rows = _gsm8k_rows(60)
    table = pa.Table.from_pylist(rows)
    pbuf, cbuf = io.BytesIO(), io.BytesIO()
    pq.write_table(table, pbuf)
    pacsv.write_csv(table, cbuf)
    folder = tmp_path / "hf"
    datasets.Dataset.from_list(rows).save_to_disk(str(folder))
    zbuf = io.BytesIO()
    with zipfile.ZipFile(zbuf, "w") as zf:
        for p in folder.rglob("*"):
            zf.write(p, Path("hf") / p.relative_to(folder))
    variants = {
        "g.jsonl": jsonl(*rows), "g.parquet": pbuf.getvalue(), "g.csv": cbuf.getvalue(),
        "g.json": json.dumps(rows).encode(), "g.jsonl.gz": gzip.compress(jsonl(*rows)), "g.zip": zbuf.getvalue(),
    }
    seen = {}
    for name, content in variants.items():
        code, body = upload_and_validate(api, name, content)
        assert code == 201 and body["status"] == "ready", (name, body)
        assert body["num_rows"] == 60 and body["preset"] == "gsm8k"
        got = api.get(f"/api/v1/datasets/{body['id']}/rows/?limit=500").json()
        assert got["count"] == 60
        seen[name] = [(r["prompt"], r["ground_truth"]) for r in got["results"]]
    first = seen.pop("g.jsonl")
    for name, got in seen.items():
        assert got == first, name
    assert [gt for _, gt in first] == [r["answer"].split("#### ")[-1].replace(",", "") for r in rows]


# --- zipped save_to_disk folders whose metadata names paths (state.json, dataset_dict.json) ---

SECRET = {"question": "SECRET question from another folder", "answer": "#### 42"}


def _zip_folder(folder: Path, top: str = "ds", *, extra: dict[str, tuple[bytes, int]] | None = None) -> bytes:
    """A zip of `folder` under `top/`; `extra` adds members {name: (bytes, unix mode)}."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for p in sorted(folder.rglob("*")):
            if p.is_file():
                zf.write(p, str(Path(top) / p.relative_to(folder)))
        for name, (data, mode) in (extra or {}).items():
            info = zipfile.ZipInfo(name)
            info.create_system = 3
            info.external_attr = mode << 16
            zf.writestr(info, data)
    return buf.getvalue()


@pytest.fixture
def victim(tmp_path) -> Path:
    """A real `save_to_disk` folder outside the uploads folder, holding a row nobody uploaded."""
    import datasets

    folder = tmp_path / "victim"
    datasets.Dataset.from_list([SECRET]).save_to_disk(str(folder))
    return folder


def _one_file_dataset(tmp_path: Path, rows: list[dict]) -> Path:
    import datasets

    folder = tmp_path / "mine"
    datasets.Dataset.from_list(rows).save_to_disk(str(folder))
    return folder


def _point_state_at(folder: Path, filename: str) -> None:
    state = json.loads((folder / "state.json").read_text())
    state["_data_files"] = [{"filename": filename}]
    (folder / "state.json").write_text(json.dumps(state))


def _evil_zip(kind: str, tmp_path: Path, victim: Path) -> bytes:
    arrow = next(victim.glob("*.arrow"))
    # The upload is unpacked to UPLOADS/incoming/<uuid>.d/ds: four levels up is tmp_path.
    up = "../../../../"
    mine = _one_file_dataset(tmp_path, [GOOD])
    for p in mine.glob("*.arrow"):
        p.unlink()  # the zip holds metadata only: its rows could only come from elsewhere
    if kind == "absolute":
        _point_state_at(mine, str(arrow))
        return _zip_folder(mine)
    if kind == "dotdot":
        _point_state_at(mine, f"{up}victim/{arrow.name}")
        return _zip_folder(mine)
    if kind == "subfolder-name":
        _point_state_at(mine, f"sub/{arrow.name}")
        return _zip_folder(mine, extra={f"ds/sub/{arrow.name}": (arrow.read_bytes(), 0o100644)})
    if kind == "missing-file":
        _point_state_at(mine, "data-00000-of-00001.arrow")
        return _zip_folder(mine)
    if kind == "symlink-member":
        _point_state_at(mine, "data-00000-of-00001.arrow")
        return _zip_folder(mine, extra={"ds/data-00000-of-00001.arrow": (str(arrow).encode(), 0o120777)})
    if kind in ("split-escape", "split-absolute"):
        split = f"{up}victim" if kind == "split-escape" else str(victim)
        dd = tmp_path / "dd"
        dd.mkdir()
        (dd / "dataset_dict.json").write_text(json.dumps({"splits": [split]}))
        return _zip_folder(dd)
    raise AssertionError(kind)


EVIL_ZIPS = [
    ("absolute", "state.json names a data file outside the dataset folder: '/"),
    ("dotdot", "state.json names a data file outside the dataset folder: '../../../../victim/"),
    ("subfolder-name", "state.json names a data file that is not a plain file name: 'sub/"),
    ("missing-file", "state.json names a data file the zip does not hold: 'data-00000-of-00001.arrow'"),
    ("symlink-member", "the archive holds a symbolic link or special file 'ds/data-00000-of-00001.arrow'"),
    ("split-escape", "dataset_dict.json names a split outside the dataset folder: '../../../../victim'"),
    ("split-absolute", "dataset_dict.json names a split outside the dataset folder: '/"),
]


@pytest.mark.django_db
@pytest.mark.parametrize("kind,words", EVIL_ZIPS, ids=[c[0] for c in EVIL_ZIPS])
def test_hf_zip_naming_files_outside_itself_is_refused(api, uploads, tmp_path, victim, kind, words):
    # Before the check, `datasets.load_from_disk` joined these names onto the unpacked folder and
    # the other folder's rows became the uploader's dataset.
    code, body = upload_and_validate(api, "evil.zip", _evil_zip(kind, tmp_path, victim), preset="gsm8k")
    assert code == 201 and body["status"] == "invalid", body
    assert words in body["error"], body["error"]
    assert str(uploads) not in body["error"]
    rows = api.get(f"/api/v1/datasets/{body['id']}/rows/")
    assert "SECRET" not in rows.content.decode()
    assert files_left(uploads) == []
    assert not Dataset.objects.filter(status=Dataset.Status.READY).exists()
    assert (victim / "state.json").is_file()  # the other folder is untouched


@pytest.mark.django_db
def test_genuine_dataset_dict_and_sharded_dataset_zips_import(api, uploads, tmp_path):
    import datasets

    train = [{"question": f"q{i}", "answer": f"#### {i}"} for i in range(30)]
    test = [{"question": "t", "answer": "#### 99"}]
    datasets.DatasetDict({"train": datasets.Dataset.from_list(train), "test": datasets.Dataset.from_list(test)}
                         ).save_to_disk(str(tmp_path / "dd"))
    datasets.Dataset.from_list(train).save_to_disk(str(tmp_path / "sharded"), num_shards=3)
    assert len(list((tmp_path / "sharded").glob("*.arrow"))) == 3
    for name, folder in (("dd.zip", tmp_path / "dd"), ("sharded.zip", tmp_path / "sharded")):
        code, body = upload_and_validate(api, name, _zip_folder(folder))
        assert code == 201 and body["status"] == "ready", (name, body)
        assert body["num_rows"] == 30 and body["preset"] == "gsm8k", (name, body)
        got = api.get(f"/api/v1/datasets/{body['id']}/rows/?limit=500").json()
        assert [r["ground_truth"] for r in got["results"]] == [str(i) for i in range(30)], name


@pytest.mark.django_db
def test_rows_api_pages_with_the_sparse_index(api, uploads):
    rows = [{"question": f"q{i}", "answer": f"#### {i}"} for i in range(250)]
    _, body = upload_and_validate(api, "p.jsonl", jsonl(*rows))
    page = api.get(f"/api/v1/datasets/{body['id']}/rows/?offset=195&limit=10").json()
    assert page["count"] == 250
    assert [r["ground_truth"] for r in page["results"]] == [str(i) for i in range(195, 205)]
    assert api.get(f"/api/v1/datasets/{body['id']}/rows/?offset=9999").json()["results"] == []
    bad = api.get(f"/api/v1/datasets/{body['id']}/rows/?offset=abc&limit=x")  # a 400, not the first page
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "offset", bad.content
    too_many = api.get(f"/api/v1/datasets/{body['id']}/rows/?limit=501")  # a 400, not clamped to 500
    assert too_many.status_code == 400 and too_many.json()["error"]["field"] == "limit", too_many.content


@pytest.mark.django_db
def test_same_file_twice_is_recognised(api, uploads):
    code1, first = upload_and_validate(api, "a.jsonl", jsonl(GOOD))
    resp = upload(api, "renamed.jsonl", jsonl(GOOD))
    assert resp.status_code == 200 and resp.json()["id"] == first["id"] and resp.json()["duplicate"] is True
    assert len([p for p in files_left(uploads) if "rows" not in p.parts]) == 1


@pytest.mark.django_db
def test_converted_file_is_readable_by_the_trainer(api, uploads):
    from trainer.data import read_rows
    from trainer.data.dataset import normalize_row

    rows = _gsm8k_rows(20)
    _, body = upload_and_validate(api, "t.jsonl", jsonl(*rows))
    ds = Dataset.objects.get(pk=body["id"])
    read = read_rows([ds.converted_path])
    assert len(read) == 20
    norm = normalize_row(read[3], position=3)
    assert norm["ground_truth"] == rows[3]["answer"].split("#### ")[-1].replace(",", "")
    assert norm["messages"][0]["role"] == "system" and rows[3]["question"] in norm["messages"][1]["content"]
    assert norm["tool_specs"] == ["calc_gsm8k_reward"]
    assert norm["tools_kwargs"]["calc_gsm8k_reward"]["create_kwargs"]["ground_truth"] == norm["ground_truth"]


@pytest.mark.django_db
def test_reward_check_scores_correct_1_and_wrong_0(api, uploads):
    _, body = upload_and_validate(api, "r.jsonl", jsonl(*_gsm8k_rows(3)))
    resp = api.post(f"/api/v1/datasets/{body['id']}/reward-check/",
                    {"reward": "default", "tools": ["calc_gsm8k_reward"], "rows": 2}, format="json")
    assert resp.status_code == 200, resp.json()
    results = resp.json()["results"]
    by = {(r["row"], r["kind"]): r for r in results}
    for row in (0, 1):
        assert by[(row, "correct")]["score"] == 1.0
        assert by[(row, "wrong")]["score"] == 0.0
        assert by[(row, "no_marker")]["score"] == 0.0
        assert by[(row, "tool_call:calc_gsm8k_reward")]["tool_score"] == 1.0


@pytest.mark.django_db
def test_reward_check_writes_tool_calls_in_the_models_format(api, uploads, alice):
    """With a model, the made-up tool call is the one its parser reads (Llama 3: a bare JSON object);
    the call still parses and the tool still scores it."""
    from rlstudio.catalog.models import ModelAsset
    from trainer.rollout.parser import get_parser

    llama = ModelAsset.objects.create(owner=alice, name="l", path="/x", tool_parser="llama3")
    _, body = upload_and_validate(api, "r.jsonl", jsonl(*_gsm8k_rows(1)))
    resp = api.post(f"/api/v1/datasets/{body['id']}/reward-check/",
                    {"tools": ["calc_gsm8k_reward"], "rows": 1, "model": llama.pk}, format="json")
    assert resp.status_code == 200, resp.json()
    call = next(r for r in resp.json()["results"] if r["kind"] == "tool_call:calc_gsm8k_reward")
    assert call["answer"].startswith('{"name": "calc_gsm8k_reward", "parameters"') and call["tool_score"] == 1.0
    parsed = get_parser("llama3").parse(call["answer"])
    assert [c.name for c in parsed.calls] == ["calc_gsm8k_reward"]
    resp = api.post(f"/api/v1/datasets/{body['id']}/reward-check/", {"model": 999999}, format="json")
    assert resp.status_code == 400 and resp.json()["error"]["field"] == "model"


@pytest.mark.django_db
def test_reward_check_form_starts_at_default_and_keeps_what_was_checked(api, uploads, alice, client):
    """The page's check starts at the API's default reward (not the first name in the list), and its
    answer shows the form as it was checked: the reward and tools picked stay picked."""
    import re

    _, body = upload_and_validate(api, "r.jsonl", jsonl(*_gsm8k_rows(3)))
    client.force_login(alice)

    def picked(page: str) -> tuple[list[str], list[str]]:
        rewards = re.findall(r'<option value="([^"]+)" selected>', page.split('name="reward"')[1].split("</select>")[0])
        return rewards, re.findall(r'name="tools" value="([^"]+)" checked', page)

    page = client.get(f"/datasets/{body['id']}/").content.decode()
    assert picked(page) == (["default"], [])
    page = client.post(f"/datasets/{body['id']}/", {"action": "reward_check", "reward": "gsm8k",
                                                      "tools": ["calc_gsm8k_reward"]}).content.decode()
    assert "tool_call:calc_gsm8k_reward" in page
    assert picked(page) == (["gsm8k"], ["calc_gsm8k_reward"])


@pytest.mark.django_db
def test_reward_check_refuses_a_dataset_without_ground_truth(api, uploads):
    rows = [{"messages": [{"role": "user", "content": "hi"}], "ground_truth": None}]
    _, body = upload_and_validate(api, "m.jsonl", jsonl(*rows), preset="messages")
    assert body["status"] == "ready", body
    resp = api.post(f"/api/v1/datasets/{body['id']}/reward-check/", {"reward": "gsm8k"}, format="json")
    assert resp.status_code == 400 and "no ground truth" in resp.json()["error"]["message"]
    resp = api.post(f"/api/v1/datasets/{body['id']}/reward-check/", {"reward": "nope"}, format="json")
    assert resp.status_code == 400 and "unknown reward" in resp.json()["error"]["message"]


@pytest.mark.django_db
def test_html_is_accepted_and_shown_escaped(api, uploads, alice, client):
    evil = {"question": '<script>alert("x")</script><img src=x onerror=alert(1)>', "answer": "#### 7"}
    _, body = upload_and_validate(api, "<b>evil</b>.jsonl", jsonl(evil))
    assert body["status"] == "ready"
    client.force_login(alice)
    page = client.get(f"/datasets/{body['id']}/").content.decode()
    assert "<script>alert" not in page and "onerror=alert(1)>" not in page
    assert "&lt;script&gt;alert" in page


@pytest.mark.django_db
def test_other_user_cannot_see_preview_or_delete(api, uploads, bob, client):
    _, body = upload_and_validate(api, "a.jsonl", jsonl(GOOD))
    other = APIClient()
    other.force_authenticate(bob)
    for resp in (other.get(f"/api/v1/datasets/{body['id']}/"), other.get(f"/api/v1/datasets/{body['id']}/rows/"),
                 other.delete(f"/api/v1/datasets/{body['id']}/"),
                 other.post(f"/api/v1/datasets/{body['id']}/reward-check/", {}, format="json")):
        assert resp.status_code == 404 and resp.json()["error"]["code"] == "not_found"
    client.force_login(bob)
    assert client.get(f"/datasets/{body['id']}/").status_code == 404
    assert Dataset.objects.filter(pk=body["id"]).exists()


@pytest.mark.django_db(transaction=True)
def test_delete_removes_file_and_rows_and_refuses_in_use(api, uploads, alice, make_model):
    from rlstudio.runs.services import run_create

    _, body = upload_and_validate(api, "a.jsonl", jsonl(GOOD))
    _, used = upload_and_validate(api, "b.jsonl", jsonl(GOOD, GOOD))
    run, _ = run_create(owner=alice, name="uses-b", dataset=Dataset.objects.get(pk=used["id"]),
                        model=make_model(alice), config={"trainer": {"total_steps": 1}}, gpus=0)
    resp = api.delete(f"/api/v1/datasets/{used['id']}/")
    assert resp.status_code == 409 and "uses-b" in resp.json()["error"]["message"]
    ds = Dataset.objects.get(pk=body["id"])
    paths = [Path(ds.file_path), Path(ds.converted_path)]
    assert all(p.exists() for p in paths)
    assert api.delete(f"/api/v1/datasets/{body['id']}/").status_code == 204
    assert not any(p.exists() for p in paths) and not Dataset.objects.filter(pk=body["id"]).exists()


def test_a_dataset_is_not_deleted_under_its_validator(api, uploads, lock_elsewhere, django_capture_on_commit_callbacks):
    """While a validator is at work (it holds the dataset's work lock) a delete is a 409 `validating`
    and keeps everything; once none is, the delete removes the upload, and a validation that starts
    after it finds the dataset gone."""
    from rlstudio.catalog.services.validation import VALIDATE_LOCK_SPACE

    resp = upload(api, "v.jsonl", jsonl(GOOD))
    assert resp.status_code == 201
    ds = Dataset.objects.get(pk=resp.json()["id"])
    part = Path(ds.file_path)
    assert ds.status == Dataset.Status.VALIDATING and part.exists()
    with lock_elsewhere(VALIDATE_LOCK_SPACE, ds.pk):
        r = api.delete(f"/api/v1/datasets/{ds.pk}/")
        assert r.status_code == 409 and r.json()["error"]["code"] == "validating", r.content
        assert "being validated" in r.json()["error"]["message"]
        assert part.exists() and Dataset.objects.filter(pk=ds.pk).exists()
    with django_capture_on_commit_callbacks(execute=True):  # the files go once the deletion commits
        assert api.delete(f"/api/v1/datasets/{ds.pk}/").status_code == 204
    assert not part.exists() and not Dataset.objects.filter(pk=ds.pk).exists()
    assert dataset_validate(dataset=ds) is ds  # its task, arriving late: nothing to do


@pytest.mark.django_db
def test_reward_check_names_tools_for_an_unknown_tool(api, uploads):
    _, body = upload_and_validate(api, "r.jsonl", jsonl(*_gsm8k_rows(1)))
    resp = api.post(f"/api/v1/datasets/{body['id']}/reward-check/", {"tools": ["os.system"]}, format="json")
    assert resp.status_code == 400, resp.content
    err = resp.json()["error"]
    assert err["field"] == "tools" and "unknown tool(s) os.system" in err["message"], err
    resp = api.post(f"/api/v1/datasets/{body['id']}/reward-check/", {"reward": "no-such-reward"}, format="json")
    assert resp.status_code == 400 and resp.json()["error"]["field"] == "reward"
