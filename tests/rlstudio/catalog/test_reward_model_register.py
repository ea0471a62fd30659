"""A sequence-classification checkpoint registers as a reward model (kind reward): one label and a chat
template that renders a transcript with tool turns; two labels are refused; a causal LM stays a policy.
Reward models are not offered where a policy's tokenizer is needed."""
import json
import shutil

import pytest
from rest_framework.test import APIClient

from rlstudio.catalog.models import ModelAsset


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    from trainer.models.tiny import make_tiny_model
    from trainer.models.tiny_rm import make_tiny_reward_model

    root = tmp_path_factory.mktemp("models")
    return {"rm": make_tiny_reward_model(root / "rm", preset="smoke"), "policy": make_tiny_model(root / "policy"),
            "root": root}


@pytest.fixture
def api(alice, settings, folders):
    settings.RLSTUDIO_MODEL_ROOTS = [str(folders["root"])]
    client = APIClient()
    client.force_authenticate(alice)
    return client


@pytest.mark.django_db
def test_a_one_label_classifier_registers_as_a_reward_model(api, folders):
    resp = api.post("/api/v1/models/", {"name": "rm", "path": str(folders["rm"])}, format="json")
    assert resp.status_code == 201, resp.json()
    body = resp.json()
    assert body["kind"] == "reward" and body["architecture"] == "Qwen2ForSequenceClassification"
    assert body["check_report"]["num_labels"] == 1 and body["chat_family"] == "" and body["tool_parser"] == ""
    pol = api.post("/api/v1/models/", {"name": "pol", "path": str(folders["policy"])}, format="json").json()
    assert pol["kind"] == "policy"
    listed = {m["name"]: m["kind"] for m in api.get("/api/v1/models/").json()["results"]}
    assert listed == {"rm": "reward", "pol": "policy"}


@pytest.mark.django_db
def test_two_labels_and_a_template_without_tool_turns_are_refused(api, folders, tmp_path, settings):
    settings.RLSTUDIO_MODEL_ROOTS = [str(folders["root"]), str(tmp_path)]
    two = tmp_path / "two"
    shutil.copytree(folders["rm"], two)
    cfg = json.loads((two / "config.json").read_text())
    cfg["id2label"] = {"0": "LABEL_0", "1": "LABEL_1"}
    cfg["label2id"] = {"LABEL_0": 0, "LABEL_1": 1}
    (two / "config.json").write_text(json.dumps(cfg))
    resp = api.post("/api/v1/models/", {"name": "two", "path": str(two)}, format="json")
    assert resp.status_code == 400 and "num_labels=1" in resp.json()["error"]["message"], resp.json()
    notool = tmp_path / "notool"
    shutil.copytree(folders["rm"], notool)
    (notool / "chat_template.jinja").write_text(
        "{% for m in messages %}{% if m['role'] == 'tool' %}{{ raise_exception('no tools') }}{% endif %}"
        "{{ m['content'] }}\n{% endfor %}")
    resp = api.post("/api/v1/models/", {"name": "notool", "path": str(notool)}, format="json")
    assert resp.status_code == 400 and "tool call" in resp.json()["error"]["message"], resp.json()
    assert not ModelAsset.objects.exists()


@pytest.mark.django_db
def test_reward_models_are_not_offered_as_a_tokenizer_for_dataset_stats(api, folders, alice):
    from django.test import Client

    api.post("/api/v1/models/", {"name": "the-rm", "path": str(folders["rm"])}, format="json")
    api.post("/api/v1/models/", {"name": "the-policy", "path": str(folders["policy"])}, format="json")
    web = Client()
    web.force_login(alice)
    page = web.get("/datasets/upload/").content.decode()
    assert "the-policy" in page and "the-rm" not in page
    models = web.get("/models/").content.decode()
    assert "the-rm" in models and "reward model" in models
