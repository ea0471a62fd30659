"""GSM8K test split (1,319 rows) through the real view and the real Celery worker."""
import json
import time
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from rlstudio.catalog.models import Dataset

# The GSM8K test split the repository carries (MIT; tests/fixtures/gsm8k/README.md).
GSM8K_TEST = Path(__file__).resolve().parents[2] / "fixtures" / "gsm8k" / "test.jsonl"


@pytest.mark.django_db(transaction=True)
def test_gsm8k_upload_ends_ready_through_the_worker(celery_worker, alice, settings, tmp_path):
    settings.UPLOADS_DIR = tmp_path / "uploads"  # absolute paths in the DB: the worker uses them
    client = APIClient()
    client.force_authenticate(alice)
    resp = client.post("/api/v1/datasets/", {"file": SimpleUploadedFile("test.jsonl", GSM8K_TEST.read_bytes()),
                                             "name": "gsm8k-test"}, format="multipart")
    assert resp.status_code == 201 and resp.json()["status"] == "validating"
    ds_id = resp.json()["id"]
    deadline = time.monotonic() + 60
    while Dataset.objects.get(pk=ds_id).status == "validating" and time.monotonic() < deadline:
        time.sleep(0.3)
    body = client.get(f"/api/v1/datasets/{ds_id}/").json()
    assert body["status"] == "ready", body
    assert body["num_rows"] == 1319 and body["preset"] == "gsm8k"
    source = [json.loads(line) for line in GSM8K_TEST.read_text(encoding="utf-8").splitlines() if line.strip()]
    truths = []
    offset = 0
    while offset < 1319:
        page = client.get(f"/api/v1/datasets/{ds_id}/rows/?offset={offset}&limit=500").json()
        truths += [r["ground_truth"] for r in page["results"]]
        offset += 500
    assert truths == [r["answer"].split("#### ")[-1].strip().replace(",", "") for r in source]
    ds = Dataset.objects.get(pk=ds_id)
    assert Path(ds.file_path).is_file() and ds.file_path.endswith(ds.sha256 + ".jsonl")
    assert not list((tmp_path / "uploads" / "incoming").glob("*"))
