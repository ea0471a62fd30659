"""The same request sent many times at once by one user (the outside tester's races): export requests
make one export and hold one active export per user (never a 500 from the (run, step) unique
constraint), identical dataset uploads make one dataset. Real threads released together by a barrier,
each with its own database connection, on the real PostgreSQL."""
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connections
from rest_framework.test import APIClient

from rlstudio.catalog.models import Dataset
from rlstudio.exports.models import ACTIVE_EXPORT_STATUSES, Export

pytestmark = pytest.mark.django_db(transaction=True)


def _at_once(n: int, request) -> list:
    """request(i) in n threads released together; the responses, in order."""
    barrier = threading.Barrier(n)

    def one(i):
        try:
            barrier.wait(30)
            return request(i)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(one, range(n)))


def _client(user) -> APIClient:
    c = APIClient()
    c.force_authenticate(user)
    return c


def test_ten_requests_for_one_step_at_once_make_one_export(alice, run_with_ckpts, published):
    url = f"/api/v1/runs/{run_with_ckpts.pk}/exports/"
    responses = _at_once(10, lambda i: _client(alice).post(url, {"step": 1}, format="json"))
    codes = sorted(r.status_code for r in responses)
    assert codes == [200] * 9 + [202], [r.content for r in responses]
    export = Export.objects.get()
    assert {r.json()["id"] for r in responses} == {export.pk}
    assert published == [("exports.run_export", export.pk)]


def test_requests_for_different_steps_at_once_queue_one_export(alice, run_with_ckpts, published):
    url = f"/api/v1/runs/{run_with_ckpts.pk}/exports/"
    responses = _at_once(4, lambda i: _client(alice).post(url, {"step": 1 + i % 2}, format="json"))
    codes = sorted(r.status_code for r in responses)
    assert 500 not in codes and codes.count(202) == 1, [r.content for r in responses]
    assert set(codes) <= {200, 202, 409}
    assert Export.objects.filter(owner=alice, status__in=ACTIVE_EXPORT_STATUSES).count() == 1
    for r in responses:
        if r.status_code == 409:
            assert r.json()["error"]["code"] == "conflict"


def test_the_owner_and_staff_asking_for_one_step_at_once_get_the_one_export(alice, staff, run_with_ckpts,
                                                                           published):
    url = f"/api/v1/runs/{run_with_ckpts.pk}/exports/"
    users = [alice, staff] * 3
    responses = _at_once(len(users), lambda i: _client(users[i]).post(url, {"step": 2}, format="json"))
    assert sorted(r.status_code for r in responses) == [200] * 5 + [202], [r.content for r in responses]
    assert Export.objects.count() == 1


def test_identical_uploads_at_once_make_one_dataset(alice, settings, tmp_path, published):
    settings.UPLOADS_DIR = tmp_path / "uploads"
    content = b'{"question": "What is 2 + 3?", "answer": "#### 5"}\n'

    def upload(i):
        return _client(alice).post("/api/v1/datasets/", {
            "file": SimpleUploadedFile("same.jsonl", content), "name": f"copy {i}", "preset": "gsm8k"},
            format="multipart")

    responses = _at_once(8, upload)
    assert sorted(r.status_code for r in responses) == [200] * 7 + [201], [r.content for r in responses]
    dataset = Dataset.objects.get()
    assert {r.json()["id"] for r in responses} == {dataset.pk}
    assert list((tmp_path / "uploads" / "incoming").glob("*.part")) == [Path(dataset.file_path)]



@pytest.mark.django_db
def test_only_a_unique_or_foreign_key_violation_at_the_api_edge_is_a_409(alice):
    """A unique violation (a concurrent create) reaching the API edge is a 409 saying to reload (a
    foreign-key one: test_create_delete_races); a NOT NULL or CHECK violation is a bug, which no
    reload mends: a 500."""
    from django.db import IntegrityError, connection, transaction

    from rlstudio.api.errors import api_exception_handler

    def violation(sql: str, params: list) -> IntegrityError:
        try:
            with transaction.atomic(), connection.cursor() as cur:
                cur.execute(sql, params)
        except IntegrityError as exc:
            return exc
        raise AssertionError(f"no IntegrityError from {sql}")

    table = alice._meta.db_table
    with connection.cursor() as cur:
        cur.execute(f'SELECT username, password, is_superuser, is_staff, is_active, date_joined, first_name, '
                    f'last_name, email FROM "{table}" WHERE id = %s', [alice.pk])
        row = list(cur.fetchone())
    duplicate = violation(f'INSERT INTO "{table}" (username, password, is_superuser, is_staff, is_active, '
                          f'date_joined, first_name, last_name, email) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)',
                          row)
    missing = violation(f'INSERT INTO "{table}" (username, password, is_superuser, is_staff, is_active, '
                        f'date_joined, first_name, last_name, email) VALUES (%s, NULL, %s, %s, %s, %s, %s, %s, %s)',
                        ["nobody"] + row[2:])
    from rlstudio.quotas.models import GpuQuota

    GpuQuota.objects.create(user=alice)
    negative = violation(f'UPDATE "{GpuQuota._meta.db_table}" SET max_gpus = -1 WHERE user_id = %s', [alice.pk])
    resp = api_exception_handler(duplicate, {})
    assert resp.status_code == 409 and "reload and try again" in resp.data["error"]["message"]
    assert api_exception_handler(missing, {}) is None  # DRF's None: Django's 500
    assert api_exception_handler(negative, {}) is None  # a CHECK constraint: a bug, a 500
