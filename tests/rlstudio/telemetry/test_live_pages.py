"""The run page and the telemetry pages render a finished run from stored data; reads are owner-only."""
import json
import re

import pytest
from django.contrib.staticfiles import finders
from django.test import Client, TestCase

from rlstudio.runs.services import run_create
from rlstudio.telemetry.models import Sample

pytestmark = pytest.mark.django_db
T0 = 1_764_440_000.0


@pytest.fixture(autouse=True)
def _rollout_dir(settings, tmp_path):
    settings.RLSTUDIO_ROLLOUT_DIR = str(tmp_path / "runs")


def _sample(seq, step, uid, index, reward, adv):
    return {"seq": seq, "type": "sample", "time": T0 + seq, "data": {
        "step": step, "uid": uid, "index": index, "reward": reward, "advantage": adv, "response_length": 5,
        "num_turns": 2, "finish_reason": "stop", "tool_calls": 1, "reward_extra": {"format": 0.5},
        "ground_truth": "42",
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "6*7?"},
                     {"role": "assistant", "content": None, "tool_calls": [
                         {"name": "calculator", "arguments": {"expression": "6*7 <img src=x>"}}]},
                     {"role": "tool", "content": "42"},
                     {"role": "assistant", "content": "<script>alert(1)</script>#### 42"}],
        "token_view": {"ids": [1, 2, 3], "pieces": ["<b>", "4", "2"], "loss_mask": [0, 1, 1],
                       "logprobs": [-0.5, -1.25, -0.01], "ref_logprobs": [-0.4, -1.0, -0.02],
                       "advantages": [adv, adv, adv]}}}


@pytest.fixture
def finished(alice, make_dataset, make_model):
    run, token = run_create(owner=alice, name="done-run", dataset=make_dataset(alice), model=make_model(alice),
                            config={}, gpus=0)
    events = [{"seq": 1, "type": "metrics", "time": T0 + 1, "data": {"step": 1, "metrics": {
        "critic/score/mean": 0.25, "actor/pg_loss": -0.1, "response_length/mean": 5.0, "timing_s/step": 1.5}}},
              {"seq": 2, "type": "memory", "time": T0 + 2, "data": {"step": 1, "phase": "update", "device": "cpu",
                                                                    "rss": 1 << 28, "peak": 1 << 29}}]
    events += [_sample(10 + i, 1, "p-flat", i, 1.0, 0.0) for i in range(2)]
    events += [_sample(20 + i, 1, "p<x>", i, float(i), (-0.7071, 0.7071)[i]) for i in range(2)]
    events += [_sample(30 + i, 2, "p<x>", i, 1.0, 0.0) for i in range(2)]
    events += [{"seq": 40, "type": "log", "time": T0 + 40, "data": {"level": "info", "message": "<i>done</i>"}}]
    with TestCase.captureOnCommitCallbacks(execute=True):
        r = Client().post(f"/api/v1/runs/{run.pk}/events/", json.dumps({"events": events}),
                          content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert r.json()["accepted"] == len(events)
    return run


def test_run_page_embeds_history_and_renders_samples(alice_client, finished):
    page = alice_client.get(f"/runs/{finished.pk}/").content.decode()
    assert 'id="live-data"' in page and "critic/score/mean" in page and '"update"' in page
    assert "/static/vendor/plotly.min.js" in page and "/static/js/run_live.js" in page
    assert page.count('href="/runs/%d/samples/' % finished.pk) == 6
    assert "&lt;i&gt;done&lt;/i&gt;" in page and "<i>done</i>" not in page
    filtered = alice_client.get(f"/runs/{finished.pk}/?step=2").content.decode()
    assert filtered.count('href="/runs/%d/samples/' % finished.pk) == 2
    assert finders.find("vendor/plotly.min.js")  # served from the plotly wheel


def test_transcript_and_token_view_escaped(alice_client, finished):
    s = Sample.objects.get(run=finished, seq=20)
    page = alice_client.get(f"/runs/{finished.pk}/samples/{s.pk}/").content.decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;#### 42" in page and "<script>alert(1)" not in page
    assert "&quot;expression&quot;: &quot;6*7 &lt;img src=x&gt;&quot;" in page  # pretty JSON arguments
    assert "role-tool" in page and "final answer" in page and "&quot;format&quot;: 0.5" in page
    assert page.count('class="tok trained"') == 2 and page.count('class="tok masked"') == 1
    assert 'data-lp="-1.25"' in page and 'data-ref="-0.4"' in page and "&lt;b&gt;</span>" in page
    assert re.search(r"\d+ assistant turns?</span>", page)  # not verl's num_turns, which counts more


def test_group_view_stats_and_flat_flag(alice_client, finished):
    flat = alice_client.get(f"/runs/{finished.pk}/groups/?step=1&uid=p-flat").content.decode()
    assert "zero advantage" in flat
    mixed = alice_client.get(f"/runs/{finished.pk}/groups/", {"step": 1, "uid": "p<x>"}).content.decode()
    assert "zero advantage" not in mixed and "0.5000" in mixed and "0.7071" in mixed  # mean, unbiased std
    overview = alice_client.get(f"/runs/{finished.pk}/groups/?step=1").content.decode()
    assert overview.count('class="flat-group"') == 1 and "p&lt;x&gt;" in overview


def test_prompt_across_training(alice_client, finished):
    """These samples carry no prompt key (an older trainer's): `?uid=` shows that uid's samples only,
    and the page says the prompt's history is unknown (test_prompt_history follows a keyed prompt)."""
    page = alice_client.get(f"/runs/{finished.pk}/prompts/", {"uid": "p<x>"}).content.decode()
    assert page.index("groups/?step=1") < page.index("groups/?step=2")
    assert "History unknown" in page
    api = alice_client.get(f"/api/v1/runs/{finished.pk}/groups/?step=2&uid=p%3Cx%3E").json()
    assert api["flat"] is True and api["n"] == 2


def test_read_api(alice_client, finished):
    base = f"/api/v1/runs/{finished.pk}"
    assert alice_client.get(f"{base}/metrics/").json()["steps"][0]["metrics"]["actor/pg_loss"] == -0.1
    assert alice_client.get(f"{base}/metrics/?since_step=1").json() == {"steps": [], "next_after_step": None, "next": None}
    page = alice_client.get(f"{base}/samples/?order=-reward&limit=2").json()
    assert page["count"] == 6 and len(page["results"]) == 2 and page["results"][0]["reward"] == 1.0
    assert alice_client.get(f"{base}/samples/?max_reward=0.5").json()["count"] == 1
    assert alice_client.get(f"{base}/samples/?has_tool_call=true&step=2").json()["count"] == 2
    assert alice_client.get(f"{base}/samples/?has_tool_call=ON&step=2").json()["count"] == 2
    assert alice_client.get(f"{base}/samples/?has_tool_call=maybe").json()["error"]["field"] == "has_tool_call"
    assert alice_client.get(f"{base}/samples/?order=bogus").json()["error"]["field"] == "order"
    by_index = [s["index"] for s in alice_client.get(f"{base}/samples/?order=-index").json()["results"]]
    assert by_index == sorted(by_index, reverse=True) and by_index[0] > by_index[-1]
    assert alice_client.get(f"{base}/samples/?min_reward=abc").status_code == 400
    sid = page["results"][0]["id"]
    detail = alice_client.get(f"{base}/samples/{sid}/").json()
    assert detail["token_view"]["loss_mask"] == [0, 1, 1] and detail["messages"][3]["role"] == "tool"
    assert alice_client.get(f"{base}/memory/").json()["points"][0]["rss"] == 1 << 28
    assert alice_client.get(f"{base}/memory/?since={T0 + 5}").json()["points"] == []
    assert alice_client.get(f"{base}/logs/?tail=5").json()["lines"][0]["message"] == "<i>done</i>"
    assert alice_client.put(f"{base}/retention/", {"mode": "per_step", "k": 4},
                            content_type="application/json").json() == {"mode": "per_step", "k": 4}
    assert alice_client.put(f"{base}/retention/", {"mode": "nope"}, content_type="application/json").status_code == 400


def test_other_users_get_404(bob, finished):
    c = Client()
    c.force_login(bob)
    s = Sample.objects.filter(run=finished).first()
    for url in [f"/runs/{finished.pk}/", f"/runs/{finished.pk}/samples/{s.pk}/", f"/runs/{finished.pk}/groups/?step=1",
                f"/api/v1/runs/{finished.pk}/samples/", f"/api/v1/runs/{finished.pk}/samples/{s.pk}/",
                f"/api/v1/runs/{finished.pk}/metrics/", f"/api/v1/runs/{finished.pk}/logs/"]:
        assert c.get(url).status_code == 404, url
    assert Client().get(f"/api/v1/runs/{finished.pk}/metrics/").status_code == 401


def test_nul_in_a_query_parameter_is_a_400_naming_it(alice_client, finished):
    """psycopg2 refuses a NUL in a query: the NUL guard answers before any lookup, in the API's error
    shape under /api/ and as a plain 400 page elsewhere."""
    base = f"/api/v1/runs/{finished.pk}"
    for url in (f"{base}/samples/?uid=%00", f"{base}/groups/?step=0&uid=a%00b", f"{base}/samples/?order=seq&u%00id=1"):
        r = alice_client.get(url)
        assert r.status_code == 400, url
        assert r.json()["error"]["field"] in ("uid", "u\ufffdid"), url
        assert "NUL" in r.json()["error"]["message"]
    for url in (f"/runs/{finished.pk}/?uid=%00", f"/runs/{finished.pk}/groups/?step=0&uid=%00",
                f"/runs/{finished.pk}/prompts/?uid=%00"):
        r = alice_client.get(url)
        assert r.status_code == 400 and r["Content-Type"].startswith("text/html"), url
        page = r.content.decode()
        assert 'data-field="uid"' in page and "uid must not contain the NUL character" in page, url
    assert alice_client.get(f"/runs/{finished.pk}/prompts/?uid=p-flat").status_code == 200  # no NUL: as before


def test_memory_since_an_impossible_date_is_a_400(alice_client, finished):
    r = alice_client.get(f"/api/v1/runs/{finished.pk}/memory/", {"since": "2024-02-30T00:00:00+00:00"})
    assert r.status_code == 400 and r.json()["error"]["field"] == "since"
    r = alice_client.get(f"/api/v1/runs/{finished.pk}/memory/", {"since": "2024-02-29T00:00:00+00:00"})
    assert r.status_code == 200


def test_retention_k_is_bounded(alice_client, finished):
    from rlstudio.telemetry.models import RunRetention
    from rlstudio.retention import RETENTION_K_MAX

    url = f"/api/v1/runs/{finished.pk}/retention/"
    for k in (2**31, RETENTION_K_MAX + 1, 0, -1, "2"):
        r = alice_client.put(url, {"mode": "per_step", "k": k}, content_type="application/json")
        assert r.status_code == 400 and r.json()["error"]["field"] == "k", k
    assert not RunRetention.objects.filter(run=finished).exists()
    r = alice_client.put(url, {"mode": "k x", "k": 2}, content_type="application/json")
    assert r.status_code == 400 and r.json()["error"]["field"] == "mode"
    r = alice_client.put(url, {"mode": "per_step", "k": RETENTION_K_MAX}, content_type="application/json")
    assert r.json() == {"mode": "per_step", "k": RETENTION_K_MAX}


def test_sample_page_with_deeply_nested_tool_arguments(alice, alice_client, make_dataset, make_model):
    """A model's tool call arguments are any text: JSON nested past the recursion limit is shown as text."""
    run, token = run_create(owner=alice, name="deep-args", dataset=make_dataset(alice), model=make_model(alice),
                            config={}, gpus=0)
    event = _sample(1, 1, "p", 0, 1.0, 0.0)
    event["data"]["messages"][2]["tool_calls"][0]["arguments"] = "[" * 100_000
    with TestCase.captureOnCommitCallbacks(execute=True):
        r = Client().post(f"/api/v1/runs/{run.pk}/events/", json.dumps({"events": [event]}),
                          content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert r.json()["accepted"] == 1
    s = Sample.objects.get(run=run)
    page = alice_client.get(f"/runs/{run.pk}/samples/{s.pk}/")
    assert page.status_code == 200 and "[[[[" in page.content.decode()


QWEN25_3B = {"model_type": "qwen2", "hidden_size": 2048, "num_hidden_layers": 36, "num_attention_heads": 16,
             "num_key_value_heads": 2, "intermediate_size": 11008, "vocab_size": 151936, "tie_word_embeddings": True}


@pytest.mark.parametrize("shape,lora_rank", [("qwen2.5-3b", 0), ("qwen2.5-3b", 32), ("smoke", 8)])
def test_run_page_shows_the_memory_estimate_and_the_lora_saving(alice, alice_client, make_dataset, tmp_path,
                                                                shape, lora_rank):
    from rlstudio.catalog.models import ModelAsset
    from rlstudio.runs import launch, preview
    from trainer.models.tiny import make_tiny_model

    if shape == "smoke":
        folder = make_tiny_model(tmp_path / "tiny", preset="smoke", seed=0)
    else:  # the estimate reads only config.json: Qwen2.5-3B's sizes
        folder = tmp_path / "qwen"
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(QWEN25_3B))
    model = ModelAsset.objects.create(owner=alice, name="m", path=str(folder))
    config = launch.build_config(preset="cpu_smoke", gpus=0, model=model,
                                 overrides=[f"actor_rollout_ref.model.lora_rank={lora_rank}"])
    run, _token = run_create(owner=alice, name="lora-run", dataset=make_dataset(alice), model=model, config=config,
                             gpus=0)
    page = alice_client.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="memory-estimate-table"' in page and "actor gradients" in page
    mem = preview.memory(model=model, config=config, gpus=0)  # what the new-run form showed for it
    assert f'peak ({mem["peak_phase"]} phase)</td><td class="num">{mem["peak_gib"]:.2f} GiB' in page
    disk = mem["checkpoint"]  # one checkpoint's disk, as the form said it, against the budget
    line = page[page.index('id="checkpoint-size"'):].split("</p>")[0]
    assert f"One checkpoint: about {disk['gib']:.2f} GiB on disk" in line
    assert ("the LoRA adapter" in line) == bool(lora_rank) and disk["fits"] and 'class="muted small"' in line
    assert f"of this deployment's {disk['budget_gib']:.2f} GiB per run." in line
    if not lora_rank:
        assert 'id="lora-saving"' not in page and "full_fine_tuning" not in mem
        return
    full = mem["full_fine_tuning"]
    saving = page[page.index('id="lora-saving"'):].split("</tr>")[0]
    assert f'full fine-tuning (LoRA off)</td><td class="num">{full["peak_gib"]:.2f} GiB' in saving
    if shape == "smoke":  # 177 k parameters: a saving under 0.01 GiB
        assert 0 < full["saving_gib"] < 0.01 and "LoRA rank 8 saves &lt; 0.01 GiB per device" in saving
    else:  # 3.1 B parameters: gradients and AdamW moments of the adapter only, no reference
        assert full["saving_gib"] > 20 and full["peak_gib"] - mem["peak_gib"] == pytest.approx(full["saving_gib"],
                                                                                              abs=2e-3)
        assert f"LoRA rank 32 saves {full['saving_gib']:.2f} GiB per device" in saving


def test_run_page_without_an_estimate_says_why(alice, alice_client, finished, make_dataset, make_model):
    from rlstudio.runs import launch

    page = alice_client.get(f"/runs/{finished.pk}/").content.decode()  # an empty config
    assert 'id="memory-estimate"' in page and 'id="memory-estimate-table"' not in page
    assert "No estimate for this run's config." in page
    model = make_model(alice, name="no-folder")  # its path has no config.json
    run, _token = run_create(owner=alice, name="r2", dataset=make_dataset(alice, name="d2"), model=model, gpus=0,
                             config=launch.build_config(preset="cpu_smoke", gpus=0))
    page = alice_client.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="memory-estimate-table"' not in page
    assert "no estimate: the model folder has no readable config.json" in page


def test_run_page_says_when_one_checkpoint_is_over_the_disk_budget(alice, alice_client, make_dataset, tmp_path,
                                                                    settings):
    """A budget lowered after the launch: the run page warns that the run cannot resume until an admin
    raises it (the resume is refused on `run`)."""
    from rlstudio.catalog.models import ModelAsset
    from rlstudio.runs import launch
    from trainer.models.tiny import make_tiny_model

    folder = make_tiny_model(tmp_path / "tiny", preset="smoke", seed=0)
    model = ModelAsset.objects.create(owner=alice, name="m", path=str(folder))
    config = launch.build_config(preset="cpu_smoke", gpus=0, model=model)
    run, _token = run_create(owner=alice, name="big", dataset=make_dataset(alice), model=model, config=config, gpus=0)
    settings.RLSTUDIO_RUN_DISK_BUDGET_GB = 0.0001  # about 107 KB: under one checkpoint of 177 k parameters
    page = alice_client.get(f"/runs/{run.pk}/").content.decode()
    line = page[page.index('id="checkpoint-size"'):].split("</p>")[0]
    assert 'class="memory-warning"' in line
    assert "per run: over it, this run cannot resume until an admin raises the budget" in line


@pytest.mark.parametrize("budget,said", [
    (8, "records up to 8 of each step's 64 trajectories, as whole groups"),
    (-1, "records every trajectory of each step (64;"),
    (100, "records every trajectory of each step (64;"),
    (0, "records no samples"),
])
def test_the_samples_card_says_how_much_of_a_step_is_recorded(alice, alice_client, make_run, budget, said):
    run = make_run(alice, "recorded", config={"data": {"train_batch_size": 16},
                                             "actor_rollout_ref": {"rollout": {"n": 4}},
                                             "report": {"samples_per_step": budget}})
    page = alice_client.get(f"/runs/{run.pk}/").content.decode()
    card = page[page.index('id="samples-card"'):]
    assert said in card[:card.index("<form")]


def test_run_page_writes_a_tiny_estimate_as_the_form_does(alice, alice_client, make_dataset, tmp_path):
    """A line of the smoke model's estimate under 0.01 GiB reads '< 0.01 GiB' on the run page, as the new-run
    form's gib() writes it, never '0.00 GiB'."""
    from rlstudio.catalog.models import ModelAsset
    from rlstudio.runs import launch, preview
    from rlstudio.runs.templatetags.run_format import gib
    from trainer.models.tiny import make_tiny_model

    folder = make_tiny_model(tmp_path / "tiny", preset="smoke", seed=0)
    model = ModelAsset.objects.create(owner=alice, name="m", path=str(folder))
    config = launch.build_config(preset="cpu_smoke", gpus=0, model=model)
    run, _token = run_create(owner=alice, name="tiny", dataset=make_dataset(alice), model=model, config=config, gpus=0)
    mem = preview.memory(model=model, config=config, gpus=0)
    tiny = [line for line in mem["lines"] if 0 < line["gib"] < 0.01]
    assert tiny, mem["lines"]  # 177 k parameters: their weights are well under 0.01 GiB
    page = alice_client.get(f"/runs/{run.pk}/").content.decode()
    table = page[page.index('id="memory-estimate-table"'):].split("</table>")[0]
    for line in mem["lines"]:  # 0.00 only for a line that is 0 at the form's precision (the form says so too)
        said = "&lt; 0.01 GiB" if line in tiny else f'{line["gib"]:.2f} GiB'
        assert f'{line["name"]}</td><td class="num">{said}</td>' in table
    assert " 0.00 GiB" not in page[page.index('id="checkpoint-size"'):].split("</p>")[0]
    assert [gib(0), gib(0.004), gib(0.01), gib(2.345), gib(-0.5, "abs"), gib(-0.004, "abs")] == [
        "0.00 GiB", "< 0.01 GiB", "0.01 GiB", "2.35 GiB", "0.50 GiB", "< 0.01 GiB"]


def test_transcript_marks_the_interactions_replies_and_the_final_answer():
    """With an interaction (multi_turn.interaction) the transcript ends in its reply: the last assistant
    message is still the final answer, and the user messages after the first answer are its replies;
    a sample ending in a tool reply has no final answer, as before."""
    from rlstudio.telemetry.views import _pretty_tool_calls

    def marks(roles):
        shown = _pretty_tool_calls([{"role": r, "content": "x"} for r in roles])
        return [(m["reply"], m["final"]) for m in shown]

    assert marks(["system", "user", "assistant", "user", "assistant", "user"]) == [
        (False, False), (False, False), (False, False), (True, False), (False, True), (True, False)]
    assert marks(["user", "assistant"]) == [(False, False), (False, True)]
    assert marks(["user", "assistant", "tool"]) == [(False, False), (False, False), (False, False)]
