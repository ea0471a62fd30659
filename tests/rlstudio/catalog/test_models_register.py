"""Model registration: a real tiny checkpoint is checked and counted; bad folders are refused; one folder
is registered once across users (a shared one is reused, another user's private one refused)."""
import json

import pytest
from django.test import Client
from rest_framework.test import APIClient

from rlstudio.catalog.models import ModelAsset, Dataset


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from trainer.models.tiny import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("models") / "tiny", preset="smoke")


@pytest.fixture
def api(alice, settings, tiny, tmp_path):
    settings.RLSTUDIO_MODEL_ROOTS = [str(tiny.parent), str(tmp_path)]
    settings.UPLOADS_DIR = tmp_path / "uploads"
    client = APIClient()
    client.force_authenticate(alice)
    return client


@pytest.mark.django_db
def test_register_counts_parameters_without_loading(api, tiny):
    import torch
    from transformers import AutoModelForCausalLM

    resp = api.post("/api/v1/models/", {"name": "tiny", "path": str(tiny)}, format="json")
    assert resp.status_code == 201, resp.json()
    model = AutoModelForCausalLM.from_pretrained(tiny, dtype=torch.float32)
    assert resp.json()["num_parameters"] == sum(p.numel() for p in model.parameters())
    assert resp.json()["tokenizer_ok"] is True


@pytest.mark.django_db
def test_bad_model_folders_are_refused(api, tmp_path, tiny):
    (tmp_path / "empty").mkdir()
    notok = tmp_path / "notok"
    notok.mkdir()
    (notok / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    cases = [("/etc", "must be under"), (str(tmp_path / "missing"), "no such folder"),
             (str(tmp_path / "empty"), "no config.json"), (str(notok), "tokenizer"), ("relative/x", "absolute")]
    for path, words in cases:
        resp = api.post("/api/v1/models/", {"name": "x", "path": path}, format="json")
        assert resp.status_code == 400 and words in resp.json()["error"]["message"], (path, resp.json())
    assert not ModelAsset.objects.exists()


@pytest.mark.django_db
def test_paths_the_file_system_cannot_take_are_refused_on_path(api, alice, tmp_path):
    """A name over the file system's limit (ENAMETOOLONG from is_dir) and a NUL (ValueError from the
    path calls) are refusals on `path`, from the API, the page and the service, never a 500."""
    from rlstudio.catalog.errors import CatalogRefused
    from rlstudio.catalog.services.model_assets import model_register

    resp = api.post("/api/v1/models/", {"name": "x", "path": str(tmp_path / ("a" * 300))}, format="json")
    assert resp.status_code == 400 and resp.json()["error"]["field"] == "path", resp.json()
    assert "File name too long" in resp.json()["error"]["message"]
    page = Client()
    page.force_login(alice)
    resp = page.post("/models/", {"name": "x", "path": f"{tmp_path}/a\x00b"})
    assert resp.status_code == 400 and 'data-field="path"' in resp.content.decode()
    resp = page.post("/models/", {"name": "x", "path": str(tmp_path / ("a" * 300))})
    assert resp.status_code == 200 and "File name too long" in resp.content.decode()
    for path in (f"{tmp_path}/a\x00b", str(tmp_path / ("a" * 300))):
        with pytest.raises(CatalogRefused) as err:
            model_register(owner=alice, name="x", path=path)
        assert err.value.field == "path"
    assert not ModelAsset.objects.exists()


@pytest.mark.django_db
def test_home_of_an_unknown_user_is_refused_on_path(api, alice):
    """POST /api/v1/models/ {"path": "~nosuchuser/m"}: pathlib's expanduser raises RuntimeError for a user
    it cannot find (schemathesis sent "~\\U000fc8b5..."); a 400 on `path`, not a 500."""
    resp = api.post("/api/v1/models/", {"name": "x", "path": "~no-such-user-rlstudio/model"}, format="json")
    assert resp.status_code == 400 and resp.json()["error"]["field"] == "path", resp.json()
    # The answer is the one for any folder outside the roots, as for the home of an account that exists
    # (root's, on every machine): which accounts the server has is not the caller's to learn.
    known = api.post("/api/v1/models/", {"name": "x", "path": "~root/model"}, format="json")
    assert known.status_code == 400 and known.json() == resp.json()
    assert "RLSTUDIO_MODEL_ROOTS" in resp.json()["error"]["message"]
    assert not ModelAsset.objects.exists()


@pytest.mark.django_db
def test_token_stats_with_the_models_tokenizer(api, tiny, alice):
    from transformers import AutoTokenizer

    from rlstudio.catalog.services.validation import dataset_validate

    api.post("/api/v1/models/", {"name": "tiny", "path": str(tiny)}, format="json")
    rows = [{"question": "q " * (i + 1), "answer": f"#### {i}"} for i in range(30)]
    content = "".join(json.dumps(r) + "\n" for r in rows).encode()
    from django.core.files.uploadedfile import SimpleUploadedFile

    resp = api.post("/api/v1/datasets/", {"file": SimpleUploadedFile("s.jsonl", content)}, format="multipart")
    ds = dataset_validate(dataset=Dataset.objects.get(pk=resp.json()["id"]))
    stats = ds.stats["prompt_tokens"]
    tok = AutoTokenizer.from_pretrained(tiny)
    from rlstudio.catalog.services.validation import tool_schemas
    from rlstudio.catalog.conversion import iter_converted

    schemas = tool_schemas()
    want = sorted(len(tok(tok.apply_chat_template(r["prompt"], tools=[schemas["calc_gsm8k_reward"]],
                                                   add_generation_prompt=True, tokenize=False),
                          add_special_tokens=False)["input_ids"]) for r in iter_converted(ds.converted_path))
    assert (stats["count"], stats["min"], stats["max"]) == (30, want[0], want[-1])
    assert stats["mean"] == round(sum(want) / 30, 2) and sum(stats["histogram"]["counts"]) == 30
    assert stats["over_max_prompt_length"] == sum(1 for w in want if w > 1024)


@pytest.mark.django_db
def test_one_folder_one_registration_across_users(api, tiny, tmp_path, alice, bob, staff):
    from rlstudio.accounts.models import AuditEvent
    from rlstudio.catalog.sharing import catalog_set_visibility

    first = api.post("/api/v1/models/", {"name": "tiny", "path": str(tiny)}, format="json")
    again = api.post("/api/v1/models/", {"name": "tiny", "path": str(tiny) + "/"}, format="json")
    assert first.status_code == again.status_code == 201, again.json()
    assert again.json()["id"] == first.json()["id"]  # the same user twice: their existing model
    assert ModelAsset.objects.count() == 1

    other = APIClient()
    other.force_authenticate(bob)
    link = tmp_path / "same-folder"  # the resolved real path is what counts, not the path typed
    link.symlink_to(tiny, target_is_directory=True)
    for path in (str(tiny), str(link)):
        resp = other.post("/api/v1/models/", {"name": "mine", "path": path}, format="json")
        assert resp.status_code == 400, resp.json()
        error = resp.json()["error"]
        assert error["field"] == "path" and error["code"] == "registered_by_other"
        assert "already registered by someone else and not shared" in error["message"]
    page = Client()
    page.force_login(bob)
    html = page.post("/models/", {"name": "mine", "path": str(link)}).content.decode()
    assert "already registered by someone else and not shared" in html
    assert ModelAsset.objects.count() == 1

    catalog_set_visibility(item=ModelAsset.objects.get(), by=staff, visibility="everyone")
    resp = other.post("/api/v1/models/", {"name": "mine", "path": str(link)}, format="json")
    assert resp.status_code == 200, resp.json()
    body = resp.json()
    assert (body["id"], body["owner"], body["name"], body["reused"]) == (first.json()["id"], "alice", "tiny", True)
    assert ModelAsset.objects.count() == 1
    assert not AuditEvent.objects.filter(actor=bob).exists()
    # Reused, not owned: bob still cannot change it.
    assert other.delete(f"/api/v1/models/{body['id']}/").status_code == 403
    assert other.patch(f"/api/v1/models/{body['id']}/", {"visibility": "private"}, format="json").status_code == 403


@pytest.mark.django_db
def test_trust_remote_code_is_no_users_to_set(api, tiny, alice):
    """An operator's decision (the admin, audited): registering or editing a model through the API
    ignores it on registering and refuses it on an edit (400 naming it), and a run on the model is refused
    it (tests/rlstudio/runs/test_trust.py)."""
    resp = api.post("/api/v1/models/", {"name": "tiny", "path": str(tiny), "trust_remote_code": True}, format="json")
    assert resp.status_code == 201, resp.json()
    assert resp.json()["trust_remote_code"] is False
    pk = resp.json()["id"]
    resp = api.patch(f"/api/v1/models/{pk}/", {"trust_remote_code": True}, format="json")
    assert resp.status_code == 400 and resp.json()["error"]["field"] == "trust_remote_code", resp.json()
    assert ModelAsset.objects.get(pk=pk).trust_remote_code is False
    page = Client()
    page.force_login(alice)
    page.post("/models/", {"name": "again", "path": str(tiny), "trust_remote_code": "on"})
    assert not ModelAsset.objects.filter(trust_remote_code=True).exists()
