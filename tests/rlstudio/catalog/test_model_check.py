"""Model registration checks the checkpoint and its chat template (catalog.modelcheck): each family's
real format is detected with its tool-call parser and stop tokens; sharded safetensors are counted; a
template that cannot work for multi-turn RL, or an index naming a missing shard, is refused with the
reason; a run of the model uses the parser its template was checked with."""
import json
import shutil

import pytest
from rest_framework.test import APIClient

from rlstudio.catalog.models import ModelAsset
from rlstudio.catalog.modelcheck import check_model_folder
from tests.fixtures import families

pytestmark = pytest.mark.django_db

EXPECTED = {  # family: (architectures / model_type in config.json, parser, a stop token it must list)
    "qwen2.5": ({"Qwen2ForCausalLM", "qwen2"}, "qwen25", "<|im_end|>"),
    "qwen3": ({"Qwen3ForCausalLM", "qwen3"}, "qwen25", "<|im_end|>"),
    "llama3": ({"LlamaForCausalLM", "llama"}, "llama3", "<|eot_id|>"),
    "chatml": ({"Qwen2ForCausalLM", "qwen2"}, "", "<|im_end|>"),
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("family-models")
    built = {name: families.build(name, root / name.replace(".", "")) for name in families.FAMILIES}
    built["qwen3-sharded"] = families.build("qwen3", root / "qwen3-sharded", shards=3, dtype="bfloat16")
    return root, built


@pytest.fixture
def api(alice, settings, folders, tmp_path):
    settings.RLSTUDIO_MODEL_ROOTS = [str(folders[0]), str(tmp_path)]
    client = APIClient()
    client.force_authenticate(alice)
    return client


@pytest.mark.parametrize("family", families.FAMILIES)
def test_each_family_is_registered_with_what_was_detected(api, folders, family):
    resp = api.post("/api/v1/models/", {"path": str(folders[1][family]), "name": family}, format="json")
    assert resp.status_code == 201, resp.json()
    body = resp.json()
    arch, parser, stop = EXPECTED[family]
    assert body["chat_family"] == family and body["architecture"] in arch
    assert body["tool_parser"] == parser
    assert stop in body["stop_tokens"]
    assert body["check_report"]["ok"] is True and body["dtype"] == "float32" and body["shards"] == 1
    if family == "qwen3":  # its template rewrites earlier turns: reported, not refused
        assert body["check_report"]["prefix_stable"] is False


def test_sharded_bf16_checkpoint_counts_every_shard(api, folders):
    one = check_model_folder(str(folders[1]["qwen3"]))
    three = check_model_folder(str(folders[1]["qwen3-sharded"]))
    assert three.shards == 3 and three.dtype == "bfloat16"
    assert three.num_parameters == one.num_parameters > 0
    page_resp = api.post("/api/v1/models/", {"path": str(folders[1]["qwen3-sharded"])}, format="json")
    assert page_resp.status_code == 201 and page_resp.json()["shards"] == 3


def test_an_index_naming_a_missing_shard_is_refused(api, folders, tmp_path):
    broken = tmp_path / "broken-shards"
    shutil.copytree(folders[1]["qwen3-sharded"], broken)
    index = json.loads((broken / "model.safetensors.index.json").read_text())
    missing = sorted(set(index["weight_map"].values()))[-1]
    (broken / missing).unlink()
    resp = api.post("/api/v1/models/", {"path": str(broken)}, format="json")
    assert resp.status_code == 400 and resp.json()["error"]["field"] == "path"
    assert "names shards that are not in the folder" in resp.json()["error"]["message"] and missing in resp.json()["error"]["message"]
    assert not ModelAsset.objects.filter(path=str(broken.resolve())).exists()


def test_a_template_that_cannot_end_a_turn_is_refused_with_the_reason(api, folders, tmp_path):
    """A ChatML-like template whose assistant turns end in plain text: nothing to stop generation on."""
    bad = tmp_path / "no-stop"
    shutil.copytree(folders[1]["chatml"], bad)
    cfg_path = bad / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["chat_template"] = ("{% for m in messages %}### {{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                            "{% if add_generation_prompt %}### assistant: {% endif %}")
    cfg_path.write_text(json.dumps(cfg))
    (bad / "chat_template.jinja").unlink(missing_ok=True)
    resp = api.post("/api/v1/models/", {"path": str(bad)}, format="json")
    assert resp.status_code == 400, resp.json()
    message = resp.json()["error"]["message"]
    assert "chat template cannot be used for multi-turn RL" in message and "end of turn" in message


def test_a_run_of_the_model_uses_its_checked_parser(alice, api, folders, make_dataset):
    from rlstudio.runs.launch import build_config

    api.post("/api/v1/models/", {"path": str(folders[1]["llama3"]), "name": "llama"}, format="json")
    model = ModelAsset.objects.get(name="llama")
    config = build_config(preset="gsm8k_multiturn_grpo", dataset=make_dataset(alice, status="ready"), model=model)
    assert config["actor_rollout_ref"]["rollout"]["multi_turn"]["format"] == "llama3"


def test_the_models_page_names_the_family(alice, api, folders):
    from django.test import Client

    api.post("/api/v1/models/", {"path": str(folders[1]["qwen3"]), "name": "q3"}, format="json")
    page = Client()
    page.force_login(alice)
    html = page.get("/models/").content.decode()
    assert 'data-family="qwen3"' in html and "<code>qwen25</code>" in html and "<code>&lt;|im_end|&gt;</code>" in html


def test_the_run_form_lists_each_model_with_its_parser_and_stops(alice, api, folders):
    from django.test import Client

    api.post("/api/v1/models/", {"path": str(folders[1]["llama3"]), "name": "llama"}, format="json")
    page = Client()
    page.force_login(alice)
    html = page.get("/runs/new/").content.decode()
    assert "llama (llama3; tool calls: llama3; stops at " in html and "&lt;|eot_id|&gt;" in html


@pytest.mark.parametrize("family,files", [("llama3", "tokenizer.json"), ("qwen2.5", "slow")])
def test_a_folder_with_only_tokenizer_json_or_the_slow_files(api, family, files, tmp_path):
    """Checked with the tokenizer a run loads (trainer.models.hf_folder.load_tokenizer): a Llama folder
    with only tokenizer.json declares no EOS, so its special tokens come from the model's files."""
    folder = families.build(family, tmp_path / f"{family}-{files}", files=files)
    resp = api.post("/api/v1/models/", {"path": str(folder), "name": f"{family}-{files}"}, format="json")
    assert resp.status_code == 201, resp.json()
    body = resp.json()
    assert body["chat_family"] == family and EXPECTED[family][2] in body["stop_tokens"]


def test_a_folder_without_tokenizer_files_is_refused_saying_so(api, folders, tmp_path):
    """Weights and config.json alone: transformers would build an empty tokenizer from the model type
    and the check would blame the chat template; the refusal names the missing files instead."""
    bare = tmp_path / "no-tokenizer"
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(folders[1]["qwen2.5"] / name, bare / name)
    resp = api.post("/api/v1/models/", {"path": str(bare)}, format="json")
    assert resp.status_code == 400 and resp.json()["error"]["field"] == "path"
    message = resp.json()["error"]["message"]
    assert "no tokenizer files in the folder" in message and "tokenizer.json" in message
    assert "chat template" not in message
    assert not ModelAsset.objects.filter(path=str(bare.resolve())).exists()
