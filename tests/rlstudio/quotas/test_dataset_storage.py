"""The dataset storage quota (`dataset_storage_gb`): what is counted, the check at upload (413 naming
`file`, the part file removed, identical bytes free), two uploads at once, the hook the quotas app
registers, and where the usage is shown (quota page, API, datasets page, staff page and form, admin)."""

import re
import threading

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connections
from django.test import Client
from rest_framework.test import APIClient

from rlstudio.accounts.models import AuditEvent
from rlstudio.catalog import storage
from rlstudio.catalog.errors import CatalogTooLarge
from rlstudio.catalog.models import Dataset
from rlstudio.catalog.services.datasets import dataset_upload
from rlstudio.quotas.models import GpuQuota
from rlstudio.quotas.selectors import default_quota
from rlstudio.quotas.services import dataset_storage_allowance, dataset_storage_refusal

pytestmark = pytest.mark.django_db
ROW = b'{"question": "What is 2 + 3?", "answer": "#### 5"}\n'


@pytest.fixture
def uploads(settings, tmp_path):
    settings.UPLOADS_DIR = tmp_path / "uploads"
    return tmp_path / "uploads"


def _api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _upload(api, content: bytes, name: str = "d.jsonl", **fields):
    return api.post(
        "/api/v1/datasets/",
        {"file": SimpleUploadedFile(name, content), **fields},
        format="multipart",
    )


def _quota_bytes(user, n_bytes: int) -> GpuQuota:
    return GpuQuota.objects.create(user=user, dataset_storage_gb=n_bytes / 10**9)


def test_the_quotas_app_registers_the_check_and_the_allowance():
    assert dataset_storage_refusal in storage._STORAGE_CHECKS
    assert dataset_storage_allowance in storage._STORAGE_ALLOWANCES


def test_new_quota_rows_and_the_default_start_at_the_setting(alice, settings):
    # the migration's value: the setting's when the test database was made
    assert default_quota().dataset_storage_gb == settings.RLSTUDIO_DEFAULT_DATASET_STORAGE_GB
    settings.RLSTUDIO_DEFAULT_DATASET_STORAGE_GB = 3.5
    assert GpuQuota.objects.create(user=alice).dataset_storage_gb == 3.5


def test_used_bytes_count_each_stored_file_once_each_datasets_rows_and_skip_invalid(
    alice, bob, make_dataset
):
    make_dataset(alice, "a", sha256="a" * 64, size_bytes=1000, converted_bytes=400, status="ready")
    # the same stored file as "a" (counted once), but rows of its own
    make_dataset(
        alice,
        "a-val",
        sha256="a" * 64,
        size_bytes=1000,
        converted_bytes=300,
        status="ready",
        split="val",
    )
    make_dataset(alice, "b", sha256="b" * 64, size_bytes=300, status="validating")
    # validation removed its file and rows (a stale figure would not count either)
    make_dataset(
        alice, "bad", sha256="c" * 64, size_bytes=5000, converted_bytes=999, status="invalid"
    )
    make_dataset(bob, "bobs", sha256="a" * 64, size_bytes=1000, converted_bytes=50, status="ready")
    assert storage.dataset_bytes_used(owner=alice) == 1000 + 300 + 400 + 300
    assert storage.dataset_bytes_used_by_owner() == {alice.pk: 2000, bob.pk: 1050}
    assert storage.added_bytes(owner=alice, sha256="a" * 64, size_bytes=1000) == 0
    assert storage.added_bytes(owner=alice, sha256="c" * 64, size_bytes=5000) == 5000


def test_validation_records_the_converted_rows_size_and_it_counts(alice, uploads):
    from rlstudio.catalog.services.validation import dataset_validate

    resp = _upload(_api(alice), ROW * 3)
    assert resp.status_code == 201
    ds = dataset_validate(dataset=Dataset.objects.get(pk=resp.json()["id"]))
    assert ds.status == "ready", ds.error
    rows_on_disk = (uploads / "rows" / f"{ds.pk}.jsonl").stat().st_size
    assert rows_on_disk > 0 and ds.converted_bytes == rows_on_disk
    assert storage.dataset_bytes_used(owner=alice) == 3 * len(ROW) + rows_on_disk


def test_an_upload_past_the_quota_is_a_413_naming_file_and_leaves_nothing(alice, uploads):
    _quota_bytes(alice, len(ROW) * 2)
    api = _api(alice)
    assert _upload(api, ROW).status_code == 201
    resp = _upload(api, ROW * 2, name="bigger.jsonl")
    assert resp.status_code == 413
    error = resp.json()["error"]
    assert error["field"] == "file" and error["code"] == "storage_quota"
    assert "dataset_storage_gb" in error["message"] and "delete datasets" in error["message"]
    assert f"({2 * len(ROW)} bytes)" in error["message"]
    assert Dataset.objects.filter(owner=alice).count() == 1
    assert len(list((uploads / "incoming").iterdir())) == 1  # only the first upload's part file


def test_identical_bytes_cost_nothing_and_a_zero_quota_refuses_every_new_upload(alice, uploads):
    quota = _quota_bytes(alice, len(ROW))
    api = _api(alice)
    first = _upload(api, ROW)
    assert first.status_code == 201
    again = _upload(api, ROW)  # the dedupe answers before the check
    assert again.status_code in (200, 201) and again.json()["id"] == first.json()["id"]
    assert _upload(api, ROW, split="val").status_code == 201  # the same stored file: adds no bytes
    quota.dataset_storage_gb = 0
    quota.save()
    resp = _upload(api, ROW, name="other.jsonl", preset="gsm8k")
    assert resp.status_code == 413 and "dataset_storage_gb is 0" in resp.json()["error"]["message"]


def test_staff_are_held_to_their_quota(staff, uploads):
    _quota_bytes(staff, 1)
    with pytest.raises(CatalogTooLarge) as err:
        dataset_upload(owner=staff, upload=SimpleUploadedFile("d.jsonl", ROW))
    assert err.value.field == "file" and err.value.code == "storage_quota"


@pytest.mark.django_db(transaction=True)
def test_two_uploads_at_once_cannot_both_pass(django_user_model, settings, tmp_path):
    settings.UPLOADS_DIR = tmp_path / "uploads"
    alice = django_user_model.objects.create_user("alice", password="x")
    GpuQuota.objects.create(
        user=alice, dataset_storage_gb=len(ROW) * 1.5 / 10**9
    )  # room for one file
    barrier, results = threading.Barrier(2), []

    def one(i: int):
        try:
            barrier.wait(10)
            dataset_upload(
                owner=alice,
                upload=SimpleUploadedFile(f"d{i}.jsonl", ROW.replace(b"5", str(i).encode())),
            )
            results.append("ok")
        except CatalogTooLarge as exc:
            results.append(exc.code)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=one, args=(i,)) for i in (6, 7)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(results) == ["ok", "storage_quota"]
    assert Dataset.objects.filter(owner=alice).count() == 1


def test_the_quota_page_the_api_and_the_datasets_page_show_the_storage(alice, make_dataset):
    _quota_bytes(alice, 2 * 10**9)
    make_dataset(alice, "a", sha256="a" * 64, size_bytes=500_000_000, status="ready")
    body = _api(alice).get("/api/v1/quota/").json()
    assert body["dataset_storage_gb"] == 2 and body["dataset_storage_used_bytes"] == 500_000_000
    page = _client(alice).get("/runs/quota/").content.decode()
    assert re.search(r'id="dataset-storage">0\.50 of 2 GB', page)
    datasets = _client(alice).get("/datasets/").content.decode()
    assert re.search(r'id="dataset-storage">Your datasets use 0\.50 of 2 GB', datasets)


def test_the_api_schema_documents_the_fields(alice):
    schema = _api(alice).get("/api/v1/schema/", {"format": "json"})
    assert schema.status_code == 200
    text = schema.content.decode()
    assert "dataset_storage_used_bytes" in text and "dataset_storage_gb" in text


def test_staff_set_it_on_the_staff_page_audited_and_see_it_in_the_table(
    alice, staff, make_dataset, settings
):
    settings.RAY_ADDRESS = None
    admin = _client(staff)
    resp = admin.post(
        "/quotas/admin/quota/",
        {
            "user": "alice",
            "max_gpus": 1,
            "gpu_hours_per_month": 100,
            "max_concurrent_runs": 2,
            "max_queued_runs": 5,
            "dataset_storage_gb": 7.5,
        },
    )
    assert resp.status_code == 302
    assert GpuQuota.objects.get(user=alice).dataset_storage_gb == 7.5
    changed = AuditEvent.objects.get(action="quota.create").data["changed"]
    assert changed["dataset_storage_gb"] == [default_quota().dataset_storage_gb, 7.5]
    bad = admin.post(
        "/quotas/admin/quota/",
        {
            "user": "alice",
            "max_gpus": 1,
            "gpu_hours_per_month": 100,
            "max_concurrent_runs": 2,
            "max_queued_runs": 5,
            "dataset_storage_gb": -1,
        },
    )
    assert bad.status_code == 400 and GpuQuota.objects.get(user=alice).dataset_storage_gb == 7.5
    make_dataset(alice, "a", sha256="a" * 64, size_bytes=1_250_000_000, status="ready")
    html = admin.get("/quotas/admin/?user=alice").content.decode()
    row = html.split('data-username="alice"')[1].split("</tr>")[0]
    assert "1.25 of 7.5" in row
    assert 'name="dataset_storage_gb" value="7.5"' in html


def test_the_django_admin_lists_it(alice, staff, make_dataset):
    GpuQuota.objects.create(user=alice, dataset_storage_gb=4)
    make_dataset(alice, "a", sha256="a" * 64, size_bytes=2_000_000_000, status="ready")
    html = _client(staff).get("/admin/quotas/gpuquota/").content.decode()
    assert "Datasets stored (GB)" in html and "2.00" in html and "Dataset storage gb" in html
    assert '<td class="field-dataset_storage_gb">4.0</td>' in html  # the limit's own column


def test_the_migration_fills_the_rows_size_of_datasets_converted_before_it(
    alice, make_dataset, tmp_path
):
    import importlib

    from django.apps import apps

    migration = importlib.import_module("rlstudio.catalog.migrations.0008_dataset_converted_bytes")
    rows = tmp_path / "rows.jsonl"
    rows.write_bytes(b"x" * 1234)
    there = make_dataset(alice, "there", sha256="a" * 64, status="ready", converted_path=str(rows))
    gone = make_dataset(
        alice, "gone", sha256="b" * 64, status="ready", converted_path=str(tmp_path / "no")
    )
    migration.fill_converted_bytes(apps, None)
    there.refresh_from_db()
    gone.refresh_from_db()
    assert (there.converted_bytes, gone.converted_bytes) == (1234, 0)
