"""Tool sets: verl tool-config YAML naming the trainer's registered tools only, checked by building the
tools in a separate process; a run's copy is written into its folder by `tool_set_write`."""
import pytest
import yaml

from rlstudio.accounts.models import AuditEvent
from rlstudio.registry.models import ToolSet
from rlstudio.registry.services import RegistryRefused, tool_set_check, tool_set_names, tool_set_write
from trainer.tools import load_tool_config

URL = "/api/v1/tool-sets/"
GOOD_YAML = """\
tools:
  - class_name: verl.tools.gsm8k_tool.Gsm8kTool
    config: {type: native}
    tool_schema:
      type: function
      function:
        name: calc_gsm8k_reward
        description: Check a GSM8K answer
        parameters: {type: object, properties: {answer: {type: string}}, required: [answer]}
  - class_name: calculator
"""


def register(api, text=GOOD_YAML, name="gsm8k-tools"):
    return api.post(URL, {"name": name, "description": "answer checker", "config_yaml": text}, format="json")


@pytest.mark.django_db
def test_a_tool_set_of_registered_tools_is_ready_and_listed(staff_api, user_api, staff):
    resp = register(staff_api)
    assert resp.status_code == 201, resp.json()
    body = resp.json()
    assert body["status"] == "ready" and body["config_yaml"] == GOOD_YAML
    assert [(t["name"], t["description"]) for t in body["tools"]] == [
        ("calc_gsm8k_reward", "Check a GSM8K answer"), ("calculator", body["tools"][1]["description"])]
    listed = user_api.get(URL).json()
    assert [t["name"] for t in listed] == ["gsm8k-tools"] and "config_yaml" not in listed[0]
    assert tool_set_names() == ["gsm8k-tools"]
    assert AuditEvent.objects.filter(action="tool_set.register", actor=staff).exists()


@pytest.mark.django_db
@pytest.mark.parametrize("text, words", [
    ("tools:\n  - class_name: os.system\n", ["'os.system' is not a registered tool", "calc_gsm8k_reward"]),
    ("tools:\n  - class_name: my.package.Gsm8kTool\n", ["'my.package.Gsm8kTool' is not a registered tool"]),
    ("tools:\n  - class_name: calculator\n    config: [1]\n", ["config must be an object"]),
    ("tools: [\n", ["not valid YAML"]),
    ("tools: []\n", ["lists no tools"]),
])
def test_a_tool_set_the_trainer_would_refuse_is_refused_and_nothing_saved(staff_api, text, words):
    resp = register(staff_api, text)
    assert resp.status_code == 400, resp.json()
    error = resp.json()["error"]
    assert error["field"] == "config_yaml" and "failed its check" in error["message"]
    for word in words:
        assert word in error["message"], error
    assert not ToolSet.objects.exists() and not AuditEvent.objects.filter(action="tool_set.register").exists()


@pytest.mark.django_db
def test_only_staff_register_or_delete_tool_sets(staff_api, user_api):
    resp = register(user_api)
    assert resp.status_code == 403 and not ToolSet.objects.exists()
    register(staff_api)
    assert user_api.delete(URL + "gsm8k-tools/").status_code == 403
    assert user_api.post(URL + "gsm8k-tools/check/").status_code == 403
    assert staff_api.delete(URL + "gsm8k-tools/").status_code == 204
    assert not ToolSet.objects.exists() and AuditEvent.objects.filter(action="tool_set.delete").exists()


@pytest.mark.django_db
def test_tool_set_write_puts_the_yaml_in_the_run_folder(staff_api, tmp_path):
    register(staff_api)
    out_dir = tmp_path / "runs" / "7"
    path = tool_set_write(name="gsm8k-tools", out_dir=out_dir)
    assert path == out_dir / "tool_config.yaml"
    assert path.read_text() == GOOD_YAML and yaml.safe_load(path.read_text())["tools"][1] == {"class_name": "calculator"}
    assert sorted(load_tool_config(path)) == ["calc_gsm8k_reward", "calculator"]  # what the trainer will read
    # A link planted where the file goes is replaced, never written through.
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    path.unlink()
    path.symlink_to(victim)
    tool_set_write(name="gsm8k-tools", out_dir=out_dir)
    assert victim.read_text() == "keep" and not path.is_symlink()
    with pytest.raises(RegistryRefused, match="no tool set named 'nope'"):
        tool_set_write(name="nope", out_dir=out_dir)


@pytest.mark.django_db
def test_a_broken_tool_set_cannot_be_written(staff_api, staff, tmp_path):
    register(staff_api)
    ToolSet.objects.filter(name="gsm8k-tools").update(config_yaml="tools:\n  - class_name: os.system\n")
    tool_set = tool_set_check(tool_set=ToolSet.objects.get(name="gsm8k-tools"), by=staff)
    assert tool_set.status == "broken" and "not a registered tool" in tool_set.error
    with pytest.raises(RegistryRefused, match="is broken"):
        tool_set_write(name="gsm8k-tools", out_dir=tmp_path)
    assert tool_set_names() == []
