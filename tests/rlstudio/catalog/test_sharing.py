"""Sharing: a dataset or model is private or shared with everyone. Staff share and unshare (API, pages,
admin; audited); another user reads a shared object and launches runs on it, but cannot delete,
rename, re-share it or recompute its statistics. Real PostgreSQL, the real API and page views."""
import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from rest_framework.test import APIClient

from rlstudio.accounts.models import AuditEvent
from rlstudio.catalog.models import Dataset, ModelAsset
from rlstudio.catalog.services.validation import dataset_validate
from rlstudio.catalog.sharing import catalog_set_visibility
from rlstudio.runs.models import Run

pytestmark = pytest.mark.django_db
KINDS = ["datasets", "models"]


def _api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def _page(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def shared(staff, make_dataset, make_model):
    return {"datasets": make_dataset(staff, "shared-data", status="ready", visibility="everyone"),
            "models": make_model(staff, "shared-model", visibility="everyone")}


@pytest.fixture
def ready_shared_dataset(settings, tmp_path, staff):
    """A real upload by staff, validated (converted rows on disk), then shared."""
    settings.UPLOADS_DIR = tmp_path / "uploads"
    rows = [{"question": f"What is {i} + 1?", "answer": f"{i} + 1 = {i + 1}\n#### {i + 1}"} for i in range(8)]
    content = "".join(json.dumps(r) + "\n" for r in rows).encode()
    resp = _api(staff).post("/api/v1/datasets/", {"file": SimpleUploadedFile("arith.jsonl", content),
                                                   "name": "staff-arith"}, format="multipart")
    assert resp.status_code == 201, resp.content
    dataset = dataset_validate(dataset=Dataset.objects.get(pk=resp.json()["id"]))
    assert dataset.status == "ready"
    catalog_set_visibility(item=dataset, by=staff, visibility="everyone")
    return dataset


def _names(client, kind) -> set[str]:
    return {item["name"] for item in client.get(f"/api/v1/{kind}/").json()["results"]}


@pytest.mark.parametrize("kind", KINDS)
def test_a_shared_object_is_listed_and_readable_by_another_user(kind, shared, bob):
    item, client = shared[kind], _api(bob)
    assert item.name in _names(client, kind)
    resp = client.get(f"/api/v1/{kind}/{item.pk}/")
    assert resp.status_code == 200
    assert (resp.json()["visibility"], resp.json()["owner"]) == ("everyone", "root")


@pytest.mark.parametrize("kind", KINDS)
def test_a_non_owner_cannot_delete_rename_or_unshare_a_shared_object(kind, shared, bob):
    item, client = shared[kind], _api(bob)
    for method, body in [("delete", None), ("patch", {"name": "mine now"}), ("patch", {"visibility": "private"})]:
        resp = getattr(client, method)(f"/api/v1/{kind}/{item.pk}/", body, format="json")
        assert resp.status_code == 403, (method, body, resp.content)
        error = resp.json()["error"]
        assert error["code"] == "permission_denied"
        assert "read-only" in error["message"] and "root" in error["message"], error
    assert client.put(f"/api/v1/{kind}/{item.pk}/", {"name": "x"}, format="json").status_code == 405
    item.refresh_from_db()
    assert (item.name, item.visibility) == (f"shared-{'data' if kind == 'datasets' else 'model'}", "everyone")
    assert not AuditEvent.objects.filter(actor=bob).exists()


@pytest.mark.parametrize("kind", KINDS)
def test_only_staff_share_and_unshare_and_it_is_audited(kind, alice, bob, staff, make_dataset, make_model):
    item = make_dataset(alice, "alice-data") if kind == "datasets" else make_model(alice, "alice-model")
    owner = _api(alice)
    url = f"/api/v1/{kind}/{item.pk}/"
    resp = owner.patch(url, {"visibility": "everyone"}, format="json")
    assert resp.status_code == 403 and resp.json()["error"]["message"] == \
        "only staff can share or unshare datasets and models", resp.content
    assert resp.json()["error"]["field"] == "visibility"
    # Renaming is the owner's right; the refused share left nothing half-done.
    resp = owner.patch(url, {"name": "renamed"}, format="json")
    assert resp.status_code == 200 and resp.json()["name"] == "renamed" and resp.json()["visibility"] == "private"
    assert _api(bob).get(url).status_code == 404

    admin = _api(staff)
    assert admin.patch(url, {"visibility": "public"}, format="json").json()["error"]["field"] == "visibility"
    resp = admin.patch(url, {"visibility": "everyone"}, format="json")
    assert resp.status_code == 200 and resp.json()["visibility"] == "everyone"
    assert _api(bob).get(url).status_code == 200
    resp = admin.patch(url, {"visibility": "private"}, format="json")
    assert resp.status_code == 200 and resp.json()["visibility"] == "private"
    assert _api(bob).get(url).status_code == 404
    noun = "dataset" if kind == "datasets" else "model"
    events = list(AuditEvent.objects.filter(object_id=str(item.pk), action__startswith=noun)
                  .order_by("id").values_list("action", "actor__username", "data"))
    assert [(a, who) for a, who, _ in events] == [(f"{noun}.rename", "alice"), (f"{noun}.share", "root"),
                                                  (f"{noun}.unshare", "root")]
    assert events[1][2] == {"name": "renamed", "owner": "alice", "from": "private", "to": "everyone"}


def test_runs_launch_on_a_shared_dataset_and_model(shared, bob):
    body = {"name": "on-shared", "dataset": shared["datasets"].pk, "val_dataset": shared["datasets"].pk,
            "model": shared["models"].pk, "preset": "cpu_smoke"}
    resp = _api(bob).post("/api/v1/runs/", body, format="json")
    assert resp.status_code == 201, resp.content
    run = Run.objects.get(pk=resp.json()["id"])
    assert (run.owner, run.dataset, run.model) == (bob, shared["datasets"], shared["models"])
    assert run.config["actor_rollout_ref"]["model"]["path"] == shared["models"].path
    # In use by bob's run: the owner (staff) cannot delete it; staff sees the run's name.
    resp = _api(shared["models"].owner).delete(f"/api/v1/models/{shared['models'].pk}/")
    assert resp.status_code == 409 and "on-shared" in resp.json()["error"]["message"], resp.content


def test_in_use_refusal_names_only_the_runs_the_owner_may_see(alice, bob, staff, make_model):
    model = make_model(alice, "alice-model")
    catalog_set_visibility(item=model, by=staff, visibility="everyone")
    from rlstudio.runs.services import run_create

    run_create(owner=bob, name="bobs-secret-run", dataset=Dataset.objects.create(
        owner=bob, name="d", file_path="/tmp/d.jsonl", sha256="ab" * 32), model=model, config={}, gpus=0)
    resp = _api(alice).delete(f"/api/v1/models/{model.pk}/")
    assert resp.status_code == 409
    message = resp.json()["error"]["message"]
    assert "1 run(s) of other users" in message and "bobs-secret-run" not in message


def test_the_owner_deletes_an_unused_model(alice, make_model):
    model = make_model(alice, "spare")
    assert _api(alice).delete(f"/api/v1/models/{model.pk}/").status_code == 204
    assert not ModelAsset.objects.filter(pk=model.pk).exists()
    assert AuditEvent.objects.filter(action="model.delete", object_id=str(model.pk), actor=alice).exists()


def test_a_non_owner_previews_rows_and_reward_checks_a_shared_dataset(ready_shared_dataset, bob):
    ds, client = ready_shared_dataset, _api(bob)
    rows = client.get(f"/api/v1/datasets/{ds.pk}/rows/?limit=3").json()
    assert rows["count"] == 8 and rows["results"][0]["ground_truth"] == "1"
    resp = client.post(f"/api/v1/datasets/{ds.pk}/reward-check/", {"reward": "default", "rows": 2}, format="json")
    assert resp.status_code == 200, resp.content
    scores = {(r["row"], r["kind"]): r["score"] for r in resp.json()["results"]}
    assert scores[(0, "correct")] == 1.0 and scores[(0, "wrong")] == 0.0


def test_pages_show_a_shared_dataset_read_only_and_refuse_its_writes(ready_shared_dataset, bob, staff, make_model):
    ds, page = ready_shared_dataset, _page(bob)
    html = page.get(f"/datasets/{ds.pk}/").content.decode()
    assert "What is 0 + 1?" in html and "shared with everyone (read-only for you)" in html
    assert "Delete dataset" not in html and 'value="stats"' not in html and "Share with everyone" not in html
    assert "Make private" not in html
    stats_before = dict(ds.stats)
    model = make_model(bob, "bobs-model", tokenizer_ok=True)
    resp = page.post(f"/datasets/{ds.pk}/", {"action": "stats", "model": model.pk}, follow=True)
    assert "only its owner (root) or staff can recompute the statistics of it" in resp.content.decode()
    resp = page.post(f"/datasets/{ds.pk}/delete/", follow=True)
    assert "only its owner (root) or staff can delete it" in resp.content.decode()
    resp = page.post(f"/datasets/{ds.pk}/visibility/", {"visibility": "private"}, follow=True)
    assert "only staff can share or unshare" in resp.content.decode()
    ds.refresh_from_db()
    assert (ds.visibility, ds.stats) == ("everyone", stats_before)
    # The shared dataset is in bob's list, marked shared, with its owner.
    listing = page.get("/datasets/").content.decode()
    assert "staff-arith" in listing and "shared</span>" in listing and ">root<" in listing


def test_staff_share_from_the_pages_and_users_see_the_controls_they_may_use(alice, bob, staff, make_dataset,
                                                                            make_model):
    ds, model = make_dataset(alice, "alice-data", status="ready"), make_model(alice, "alice-model")
    admin = _page(staff)
    assert "Share with everyone" in admin.get(f"/datasets/{ds.pk}/").content.decode()
    admin.post(f"/datasets/{ds.pk}/visibility/", {"visibility": "everyone"})
    resp = admin.post(f"/models/{model.pk}/visibility/", {"visibility": "everyone"}, follow=True)
    assert "alice-model is now shared with everyone." in resp.content.decode()
    ds.refresh_from_db(), model.refresh_from_db()
    assert (ds.visibility, model.visibility) == ("everyone", "everyone")
    assert "Make private" in admin.get("/models/").content.decode()

    mine = _page(alice).get("/models/").content.decode()  # the owner may delete, not share
    assert f'/models/{model.pk}/delete/' in mine and "Make private" not in mine
    theirs = _page(bob).get("/models/").content.decode()
    assert "alice-model" in theirs and f'/models/{model.pk}/delete/' not in theirs and "read-only" in theirs
    resp = _page(bob).post(f"/models/{model.pk}/delete/", follow=True)
    assert "only its owner (alice) or staff can delete it" in resp.content.decode()
    assert ModelAsset.objects.filter(pk=model.pk).exists()
    assert AuditEvent.objects.filter(action__in=["dataset.share", "model.share"], actor=staff).count() == 2


def test_the_admin_shares_through_the_audited_service(alice, staff, make_model):
    model = make_model(alice, "alice-model")
    admin = _page(staff)
    resp = admin.post("/admin/catalog/modelasset/", {"action": "share_with_everyone", "_selected_action": [model.pk]},
                      follow=True)
    assert resp.status_code == 200 and "1 changed to everyone." in resp.content.decode()
    model.refresh_from_db()
    assert model.visibility == "everyone"
    assert AuditEvent.objects.filter(action="model.share", object_id=str(model.pk), actor=staff).exists()
    admin.post("/admin/catalog/modelasset/", {"action": "make_private", "_selected_action": [model.pk]})
    model.refresh_from_db()
    assert model.visibility == "private"
    assert AuditEvent.objects.filter(action="model.unshare", object_id=str(model.pk)).exists()


def test_the_database_refuses_an_unknown_visibility(alice, make_model):
    from django.db import IntegrityError, transaction

    model = make_model(alice)
    with pytest.raises(IntegrityError), transaction.atomic():
        ModelAsset.objects.filter(pk=model.pk).update(visibility="friends")
    with pytest.raises(IntegrityError), transaction.atomic():
        Dataset.objects.create(owner=alice, name="x", file_path="/tmp/x", sha256="cd" * 32, visibility="")
