"""The model card of an export (rlstudio.exports.card, .facts): a Hugging Face YAML header that parses
to exactly its keys whatever the names hold; names and values rendered as plain text (no markup, no
line that starts a block, one table cell each); from a run's records: the held-out reward (best and
last), the evaluations of the exported step with the base model beside it, only user-set keys and no
server path; another user's private dataset is not named."""
import re

import pytest
import yaml
from django.utils import timezone

from rlstudio.exports.card import CardFacts, EvalFigures, HeldOut, clean, model_card
from rlstudio.exports.facts import card_facts, user_settings
from rlstudio.runs.models import Run

EVIL = "x</script><img src=x onerror=alert(1)>\n---\nbase_model: evil | [a](javascript:alert(1)) \u202e`*_"


def facts(**over) -> CardFacts:
    base = dict(run_id=7, run_name=EVIL, step=3, run_step=5, base_model=EVIL, datasets=[("training", EVIL)],
                algorithm="grpo", lora={"rank": 4, "alpha": 8.0, "target_modules": "all-linear"},
                settings={"trainer.experiment_name": EVIL, "actor_rollout_ref.actor.optim.lr": 1e-5},
                held_out=[HeldOut(metric="val-core/arith/reward/mean@1", best=0.75, best_step=2, last=0.5,
                                  last_step=5)],
                evaluations=[EvalFigures(model="step 3", dataset=EVIL, k=4, prompts=8, mean_at_k=0.5,
                                         pass_at_k=0.875, maj_at_k=0.625)])
    return CardFacts(**{**base, **over})


def test_hostile_names_stay_plain_text():
    card = model_card(facts())
    header, body = card.split("---\n")[1], "---\n".join(card.split("---\n")[2:])
    meta = yaml.safe_load(header)
    assert set(meta) == {"base_model", "library_name", "pipeline_tag", "tags"}
    assert meta["base_model"] == clean(EVIL) and "\n" not in meta["base_model"] and "\u202e" not in meta["base_model"]
    assert meta["library_name"] == "transformers" and meta["tags"] == ["rlstudio", "reinforcement-learning", "grpo",
                                                                          "lora"]
    assert not re.search(r"(?<!\\)[<>]", card)  # every angle bracket escaped: Markdown shows it, HTML never starts
    assert not re.search(r"(?<!\\)\]\(", body)  # no link
    assert [line for line in card.splitlines() if line.startswith("---")] == ["---", "---"]
    for line in body.splitlines():
        if line.startswith("|"):  # every row of a table has its columns' cells, no more
            cells = re.split(r"(?<!\\)\|", line)[1:-1]
            assert len(cells) in (2, 5, 7), line
    assert "| step 3 | " in body and "| 0.5000 | 0.8750 | 0.6250 |" in body
    assert "| val-core/arith/reward/mean@1 | 0.7500 | 2 | 0.5000 | 5 |" in body
    assert "| actor\\_rollout\\_ref.actor.optim.lr | 1e-05 |" in body


def test_empty_sections_say_so():
    card = model_card(facts(lora=None, held_out=[], evaluations=[], settings={}))
    assert "The run reported no held-out reward." in card and "No evaluation of step 3 yet." in card
    assert "None: the trainer's defaults." in card and "LoRA" not in card


def test_user_settings_keep_user_keys_only():
    config = {"data": {"train_files": "/srv/data/a.jsonl", "train_batch_size": 64},
              "actor_rollout_ref": {"model": {"path": "/models/secret"}, "actor": {"optim": {"lr": 3e-6}}},
              "trainer": {"default_local_dir": "/srv/runs/9", "experiment_name": "/home/bob/x",
                          "logger": ["jsonl", "http"]}}
    got = user_settings(config)
    assert got == {"data.train_batch_size": 64, "actor_rollout_ref.actor.optim.lr": 3e-6}


@pytest.mark.django_db
def test_facts_from_a_runs_records(alice, bob, make_run, make_dataset):
    from rlstudio.evaluations.models import Evaluation, EvaluationStatus
    from rlstudio.telemetry.models import MetricRow

    run = make_run(alice, "facts")
    config = {"data": {"train_files": "/srv/data/a.jsonl"}, "actor_rollout_ref": {"model": {"path": "/models/m"},
              "actor": {"optim": {"lr": 2e-6}}}, "trainer": {"default_local_dir": "/srv/runs/1"}}
    Run.objects.filter(pk=run.pk).update(config=config, step=4)
    run.refresh_from_db()
    metric = "val-core/arith/reward/mean@1"
    for step, value in ((1, 0.25), (2, 0.75), (4, 0.5)):
        MetricRow.objects.create(run=run, step=step, time=timezone.now(), metrics={metric: value, "x": 1})
    columns = [{"key": "base", "step": 0, "base": True, "mean_at_k": 0.1, "pass_at_k": 0.2, "maj_at_k": 0.0},
               {"key": "2", "step": 2, "base": False, "mean_at_k": 0.6, "pass_at_k": 0.9, "maj_at_k": 0.5},
               {"key": "4", "step": 4, "base": False, "mean_at_k": 0.7, "pass_at_k": 1.0, "maj_at_k": 0.6}]
    mine = make_dataset(alice, "arith-eval", status="ready")
    theirs = make_dataset(bob, "bob-private-eval", status="ready")
    for ds in (mine, theirs):
        Evaluation.objects.create(run=run, owner=alice, dataset=ds, checkpoints=[2, 4], include_base=True, k=4,
                                  max_prompts=3, sampling={}, status=EvaluationStatus.SUCCEEDED,
                                  results={"checkpoints": columns, "prompts": [{}, {}, {}]})
    Evaluation.objects.create(run=run, owner=alice, dataset=mine, checkpoints=[4], k=2, max_prompts=3, sampling={},
                              status=EvaluationStatus.SUCCEEDED, results={"checkpoints": columns[2:], "prompts": []})
    f = card_facts(run=run, step=2, lora=False)
    assert f.held_out == [HeldOut(metric=metric, best=0.75, best_step=2, last=0.5, last_step=4)]
    assert [(e.model, e.dataset, e.mean_at_k, e.pass_at_k) for e in f.evaluations] == [
        ("step 2", "arith-eval", 0.6, 0.9), ("base model", "arith-eval", 0.1, 0.2),
        ("step 2", "(a dataset not shared with the run's owner)", 0.6, 0.9),
        ("base model", "(a dataset not shared with the run's owner)", 0.1, 0.2)]
    assert f.settings == {"actor_rollout_ref.actor.optim.lr": 2e-6} and f.run_step == 4
    card = model_card(f)
    assert "/srv" not in card and "/models" not in card and "bob" not in card and "alice" not in card
