"""The new-run form and the API show every error at once; the form's preview (POST /runs/new/preview/)."""
import re

import pytest
from django.test import Client
from rest_framework.test import APIClient

from rlstudio.catalog.models import ModelAsset
from rlstudio.runs.models import Run

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from trainer.models.tiny import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("m") / "tiny", preset="smoke", seed=0)


@pytest.fixture
def ready(alice, make_dataset, tiny_dir):
    return {"dataset": make_dataset(alice, status="ready"),
            "model": ModelAsset.objects.create(owner=alice, name="tiny", path=str(tiny_dir))}


@pytest.fixture
def page(alice):
    c = Client()
    c.force_login(alice)
    return c


def _form(ready, **extra):
    return {"name": "f1", "dataset": ready["dataset"].pk, "model": ready["model"].pk, "preset": "cpu_smoke",
            "gpus": 0, **extra}


def _field_text(html: str, field: str) -> str:
    match = re.search(rf'<p data-field="{field}">(.*?)</p>', html, re.S)
    assert match, field
    return match.group(1)


BAD = "actor_rollout_ref.rollout.temperature=99\ntrainer.default_local_dir=/etc\n"


def test_the_form_shows_every_error_on_its_field(page, ready):
    resp = page.post("/runs/new/", _form(ready, overrides=BAD, samples_per_prompt=0))
    assert resp.status_code == 400
    html = resp.content.decode()
    overrides = _field_text(html, "overrides")
    assert "actor_rollout_ref.rollout.temperature: must be &lt;= 10, got 99" in overrides
    assert "trainer.default_local_dir: set by the platform" in overrides
    assert "actor_rollout_ref.rollout.n: must be &gt;= 1, got 0" in _field_text(html, "samples_per_prompt")
    assert "Not launched" in html and Run.objects.count() == 0


def test_an_empty_name_and_config_errors_show_together(page, ready):
    resp = page.post("/runs/new/", _form(ready, name="", overrides=BAD))
    html = resp.content.decode()
    assert resp.status_code == 400
    assert "This field is required" in _field_text(html, "name")
    assert "temperature" in _field_text(html, "overrides") and "default_local_dir" in _field_text(html, "overrides")


def test_a_saved_config_name_taken_is_shown_on_save_as(page, ready, alice):
    assert page.post("/runs/new/", _form(ready, save_as="mine", name="a")).status_code == 302
    resp = page.post("/runs/new/", _form(ready, save_as="mine", name="b"))
    assert resp.status_code == 400 and "already have a config named" in _field_text(resp.content.decode(), "save_as")


def test_the_saved_configs_cap_is_shown_on_save_as_and_launches_nothing(page, ready, alice, settings):
    settings.RLSTUDIO_MAX_SAVED_CONFIGS_PER_USER = 1
    assert page.post("/runs/new/", _form(ready, save_as="one", name="a")).status_code == 302
    resp = page.post("/runs/new/", _form(ready, save_as="two", name="b"))
    assert resp.status_code == 400
    assert "RLSTUDIO_MAX_SAVED_CONFIGS_PER_USER is 1" in _field_text(resp.content.decode(), "save_as")
    assert not Run.objects.filter(name="b").exists()


def test_the_gpu_preset_launches_on_the_cpu_without_overrides(page, ready):
    resp = page.post("/runs/new/", _form(ready, preset="gsm8k_multiturn_grpo"))
    assert resp.status_code == 302, resp.content.decode()[-3000:]
    run = Run.objects.get(name="f1")
    assert run.config["actor_rollout_ref"]["rollout"]["name"] == "hf" and run.config["trainer"]["device"] == "cpu"


def test_preview_of_the_gpu_preset_on_the_cpu(page, ready):
    body = page.post("/runs/new/preview/", _form(ready, preset="gsm8k_multiturn_grpo", name="",
                                                 samples_per_prompt=4)).json()
    assert body["errors"] == []  # the empty name is not an error yet: nothing typed
    assert body["resources"] == "CPU"
    assert {a["key"] for a in body["adapted"]} == {"actor_rollout_ref.rollout.name", "trainer.device",
                                                  "trainer.n_gpus_per_node"}
    marks = {line["key"]: line["mark"] for line in body["lines"] if line["mark"]}
    assert marks["actor_rollout_ref.rollout.n"] == "yours" and marks["actor_rollout_ref.rollout.name"] == "adapted"
    assert "    name: hf" in body["yaml"]
    mem = body["memory"]
    assert mem["device"] == "cpu" and mem["fits"] and mem["lines"][0]["name"] == "actor weights"
    assert mem["lines"][0]["bytes"] == 4 * 177_024


def test_preview_lists_each_error_with_its_form_field(page, ready):
    body = page.post("/runs/new/preview/", _form(ready, overrides=BAD, samples_per_prompt=0, gpus=-1)).json()
    assert [(e["field"], e["form_field"]) for e in body["errors"]] == [("gpus", "gpus")]  # no config without GPUs
    body = page.post("/runs/new/preview/", _form(ready, overrides=BAD, samples_per_prompt=0)).json()
    got = [(e["field"], e["form_field"]) for e in body["errors"]]
    assert got == [("actor_rollout_ref.rollout.n", "samples_per_prompt"),
                   ("actor_rollout_ref.rollout.temperature", "overrides"),
                   ("trainer.default_local_dir", "overrides")]
    yaml_error = page.post("/runs/new/preview/", _form(ready, config_yaml="data: [unclosed")).json()["errors"]
    assert yaml_error[0]["field"] == "config" and yaml_error[0]["form_field"] == "config_yaml"


def test_preview_needs_a_login_and_a_post(ready, page):
    assert Client().post("/runs/new/preview/", _form(ready)).status_code == 302
    assert page.get("/runs/new/preview/").status_code == 405


def test_the_api_answers_every_error_with_the_first_as_error(alice, ready):
    api = APIClient()
    api.force_authenticate(alice)
    body = {"name": "r", "dataset": ready["dataset"].pk, "model": ready["model"].pk, "preset": "cpu_smoke",
            "overrides": ["actor_rollout_ref.rollout.temperature=99", "trainer.default_local_dir=/etc",
                          "actor_rollout_ref.rollout.n=x"]}
    resp = api.post("/api/v1/runs/", body, format="json")
    assert resp.status_code == 400
    data = resp.json()
    assert data["errors"][0] == {"field": data["error"]["field"], "message": data["error"]["message"]}
    assert {e["field"] for e in data["errors"]} == {"actor_rollout_ref.rollout.temperature",
                                                   "trainer.default_local_dir", "actor_rollout_ref.rollout.n"}
    # the serializer's own errors: every field at once too
    data = api.post("/api/v1/runs/", {"gpus": -1}, format="json").json()
    assert {e["field"] for e in data["errors"]} >= {"name", "dataset", "model", "gpus"}
    assert data["errors"][0]["field"] == data["error"]["field"]


def test_saving_a_gpu_preset_from_a_cpu_form_keeps_what_the_run_started_from(page, ready, alice):
    """A preset made for 8 GPUs, launched on the CPU (adapted) and saved as a config: the save is checked
    as that CPU run, not as the preset on no GPUs, and stores the adapted config without platform keys."""
    from rlstudio.runs.models import RunConfig

    resp = page.post("/runs/new/", _form(ready, preset="gsm8k_multiturn_grpo", save_as="gsm8k-cpu",
                                         overrides="actor_rollout_ref.rollout.n=4"))
    assert resp.status_code == 302, resp.content.decode()[-3000:]
    saved = RunConfig.objects.get(owner=alice, name="gsm8k-cpu")
    run = Run.objects.get(name="f1")
    assert saved.config["actor_rollout_ref"]["rollout"]["n"] == 4
    assert saved.config["actor_rollout_ref"]["rollout"]["name"] == run.config["actor_rollout_ref"]["rollout"]["name"]
    assert saved.config["data"]["train_batch_size"] == run.config["data"]["train_batch_size"]
    assert not saved.config["actor_rollout_ref"]["model"]["path"]  # the platform's keys are not kept
    # and a run launched from it on the CPU needs no override
    resp = page.post("/runs/new/", {**_form(ready, name="f2"), "saved_config": saved.pk})
    assert resp.status_code == 302, resp.content.decode()[-3000:]


def test_the_api_checks_a_saved_config_on_the_gpus_it_names(alice):
    from rlstudio.runs.gate.changes import user_view
    from rlstudio.runs.launch import build_config

    api = APIClient()
    api.force_login(alice)
    config = user_view(build_config(preset="gsm8k_multiturn_grpo", gpus=8, adapt=True))
    resp = api.post("/api/v1/configs/", {"name": "eight", "config": config}, format="json")
    assert resp.status_code == 400  # checked as a CPU run, its 8-GPU batch layout does not fit
    resp = api.post("/api/v1/configs/", {"name": "eight", "config": config, "gpus": 8}, format="json")
    assert resp.status_code == 201, resp.json()
    resp = api.post("/api/v1/configs/", {"name": "bad", "config": config, "gpus": -1}, format="json")
    assert resp.status_code == 400 and "gpus" in str(resp.json())


def _alias_bomb(levels: int = 7, width: int = 8) -> str:
    """The reported denial of service: `levels` lines of `width` aliases of the line above, inside
    data.apply_chat_template_kwargs (about 650 bytes; safe_load builds width**levels leaves)."""
    lines = ["data:", "  apply_chat_template_kwargs:", f"    l0: &l0 [{', '.join(['x'] * width)}]"]
    lines += [f"    l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_is_refused_on_the_form_and_nothing_is_made(page, ready):
    from rlstudio.runs.models import RunConfig

    bomb = _alias_bomb()
    assert len(bomb) < 800
    resp = page.post("/runs/new/", _form(ready, config_yaml=bomb, save_as="boom"))
    assert resp.status_code == 400
    shown = _field_text(resp.content.decode(), "config_yaml")
    assert "config: YAML anchors (&amp;l0) and aliases are not accepted" in shown and "(line 3)" in shown
    assert Run.objects.count() == 0 and RunConfig.objects.count() == 0
    errors = page.post("/runs/new/preview/", _form(ready, config_yaml=bomb)).json()["errors"]
    assert [(e["field"], e["form_field"]) for e in errors] == [("config", "config_yaml")]
    assert "anchors (&l0)" in errors[0]["message"]
    # an alias without its anchor, and a merge key (also an alias), are refused the same way
    for text in ("data: *nowhere\n", "a: {x: 1}\ndata:\n  <<: *a\n"):
        errors = page.post("/runs/new/preview/", _form(ready, config_yaml=text)).json()["errors"]
        assert errors[0]["field"] == "config" and "not accepted" in errors[0]["message"], text


def test_yaml_past_the_bounds_is_a_form_error_not_a_500(page, ready):
    from rlstudio.runs.user_yaml import MAX_YAML_BYTES, MAX_YAML_DEPTH, MAX_YAML_NODES

    deep = "data: {apply_chat_template_kwargs: " + "[" * 3000 + "]" * 3000 + "}\n"  # RecursionError before
    many = "data:\n  apply_chat_template_kwargs:\n    k: [" + ", ".join(["1"] * MAX_YAML_NODES) + "]\n"
    big = "# " + "x" * MAX_YAML_BYTES + "\ndata: {}\n"
    for text, words in ((deep, f"nested more than {MAX_YAML_DEPTH} levels"), (many, f"more than {MAX_YAML_NODES}"),
                        (big, f"at most {MAX_YAML_BYTES}")):
        resp = page.post("/runs/new/", _form(ready, config_yaml=text))
        assert resp.status_code == 400 and words in _field_text(resp.content.decode(), "config_yaml"), words
    assert Run.objects.count() == 0


def test_a_lone_surrogate_escape_in_yaml_is_a_form_error_not_a_500(page, ready):
    """YAML's double-quoted "\\ud800" reads into a str no UTF-8 encoder takes (PostgreSQL's json column
    refused the saved config with a DataError, a 500): the config field's error, with its line."""
    from rlstudio.runs.models import RunConfig

    text = 'reward:\n  reward_kwargs:\n    a: "x\\ud800"\n'
    resp = page.post("/runs/new/", _form(ready, config_yaml=text, save_as="s"))
    assert resp.status_code == 400
    shown = _field_text(resp.content.decode(), "config_yaml")
    assert "lone surrogate" in shown and "(line 3)" in shown, shown
    assert Run.objects.count() == 0 and RunConfig.objects.count() == 0
    errors = page.post("/runs/new/preview/", _form(ready, config_yaml=text)).json()["errors"]
    assert errors[0]["field"] == "config" and "lone surrogate" in errors[0]["message"]
    # YAML's own escape of a character past U+FFFF (\U0001F600, no surrogates) is accepted
    ok = page.post("/runs/new/preview/", _form(ready, config_yaml='reward:\n  reward_kwargs:\n    a: "\\U0001F600"\n'))
    assert not [e for e in ok.json()["errors"] if "surrogate" in e["message"]]


def test_plain_yaml_still_launches(page, ready):
    text = "actor_rollout_ref:\n  rollout:\n    n: 4\ndata:\n  apply_chat_template_kwargs: {enable_thinking: false}\n"
    resp = page.post("/runs/new/", _form(ready, config_yaml=text))
    assert resp.status_code == 302, resp.content.decode()[-3000:]
    cfg = Run.objects.get(name="f1").config
    assert cfg["actor_rollout_ref"]["rollout"]["n"] == 4
    assert cfg["data"]["apply_chat_template_kwargs"] == {"enable_thinking": False}


def test_verls_exponent_floats_in_yaml_are_numbers(page, ready):
    """verl's configs write `lr: 1e-6` (OmegaConf reads it as a float); PyYAML's YAML 1.1 resolver
    read it as the string '1e-6', so pasting a verl config was refused with "expected a number, got
    '1e-6'". A quoted one stays a string (and is refused as one)."""
    import yaml

    from rlstudio.runs.user_yaml import load_user_yaml

    text = "actor_rollout_ref:\n  actor:\n    optim:\n      lr: 1e-6\n    kl_loss_coef: 1E-3\n"
    assert load_user_yaml(text)["actor_rollout_ref"]["actor"]["optim"]["lr"] == 1e-6
    assert yaml.safe_load("lr: 1e-6") == {"lr": "1e-6"}  # plain safe_load (operators' files) unchanged
    assert load_user_yaml("a: abc\nb: 1e\nc: 3\nd: '1e-6'\n") == {"a": "abc", "b": "1e", "c": 3, "d": "1e-6"}
    errors = page.post("/runs/new/preview/", _form(ready, config_yaml=text)).json()["errors"]
    assert errors == [], errors
    resp = page.post("/runs/new/", _form(ready, config_yaml=text))
    assert resp.status_code == 302, resp.content.decode()[-3000:]
    actor = Run.objects.get(name="f1").config["actor_rollout_ref"]["actor"]
    assert actor["optim"]["lr"] == 1e-6 and actor["kl_loss_coef"] == 1e-3



def test_the_form_says_what_is_missing_before_a_run_can_be_launched(page, alice, make_dataset, tiny_dir):
    html = page.get("/runs/new/").content.decode()
    note = re.search(r'<p class="notice" id="run-form-missing">(.*?)</p>', html, re.S).group(1)
    assert "a ready dataset" in note and 'href="/datasets/upload/"' in note and 'href="/models/"' in note
    make_dataset(alice, status="ready")
    note = re.search(r'id="run-form-missing">(.*?)</p>', page.get("/runs/new/").content.decode(), re.S).group(1)
    assert "dataset" not in note and "a model" in note
    model = ModelAsset.objects.create(owner=alice, name="tiny", path=str(tiny_dir))
    html = page.get("/runs/new/").content.decode()
    assert 'id="run-form-missing"' not in html
    # the one model and the one dataset the user can pick are picked
    assert re.search(rf'<option value="{model.pk}" selected>', html)
    dataset = re.search(r'name="dataset"[^>]*>.*?</select>', html, re.S).group(0)
    assert " selected>" in dataset
    ModelAsset.objects.create(owner=alice, name="tiny-2", path=str(tiny_dir) + "-2")
    two = re.search(r'name="model"[^>]*>.*?</select>', page.get("/runs/new/").content.decode(), re.S).group(0)
    assert not re.search(r'<option value="\d+" selected>', two)  # two: the user picks
