"""Dynamic sampling in the loop (Trainer.rollout) with a scripted engine: generation batches until the
step has data.train_batch_size groups whose metric varies, the limit and its fill-up, the metrics
and the per-batch sampling seeds; then the `dapo` recipe for 2 steps through the trainer CLI on the
tiny model (overlong penalty in the samples' reward parts)."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from trainer.config import apply_overrides
from trainer.data.loader import PromptLoader
from trainer.loop import Timer, Trainer
from trainer.recipes import get_recipe
from trainer.types import Trajectory

N = 2
FLAT = {0, 1, 2, 4, 5}  # prompts whose samples all score the same


class _Data:
    """The loader's view of a dataset: 12 prompt records, row index = position."""

    def __init__(self, rows: int):
        self.records = [SimpleNamespace(index=i, messages=[], prompt_ids=[1, 2], data_source="s",
                                        ground_truth=None, tools=[], tools_kwargs={}, extra_info={})
                        for i in range(rows)]

    def __len__(self) -> int:
        return len(self.records)


class ScriptedGroup:
    """A worker group whose generate answers with scripted trajectories: the response text is the
    score ("1" for every sample of a FLAT prompt, "0" / "1" alternating otherwise)."""

    def __init__(self):
        self.calls: list[tuple[int, list[int]]] = []

    def generate(self, prompts, *, n, sampling, step):
        self.calls.append((sampling.seed, [p.index for p in prompts]))
        return [Trajectory(uid=p.uid, index=i, prompt=p, prompt_ids=[1, 2], response_ids=[3] * (i + 1),
                           loss_mask=[1] * (i + 1), response_text="1" if p.index in FLAT else str(i % 2))
                for p in prompts for i in range(n)]


class Logs:
    def __init__(self):
        self.lines: list[tuple[str, str]] = []

    def log(self, level, message):
        self.lines.append((level, message))


def scripted(**over):
    cfg = apply_overrides(get_recipe("cpu_smoke"), {
        "data.train_batch_size": 2, "data.gen_batch_size": 3, "actor_rollout_ref.rollout.n": N,
        "algorithm.filter_groups.enable": True, "algorithm.filter_groups.metric": "score", **over})
    t = Trainer(cfg, emitter=Logs())
    t.group, t.n, t.stop_ids = ScriptedGroup(), N, [0]
    t.loader = PromptLoader(_Data(12), batch_size=cfg.data.gen_batch_size, shuffle=False)
    t.reward_fn = lambda src, text, gt, extra=None: float(text)
    return t


def test_generates_until_the_batch_is_full():
    t = scripted()
    metrics: dict[str, float] = {}
    trajs = t.rollout(1, Timer(), metrics)
    # batches [0 1 2] (nothing kept), [3 4 5] (3 kept), [6 7 8] (all kept): full after three
    assert [idx for _, idx in t.group.calls] == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    assert [tr.prompt.index for tr in trajs] == [3, 3, 6, 6]
    assert metrics == {"train/num_gen_batches": 3.0, "train/num_groups_generated": 9.0,
                       "train/num_groups_kept": 4.0, "train/kept_group_ratio": 4 / 9,
                       "train/num_groups_filled": 0.0}
    seeds = [s for s, _ in t.group.calls]
    assert seeds[0] == t.sampling(1).seed  # the first batch samples as a plain GRPO step does
    assert len(set(seeds)) == 3  # each generation batch of the step samples afresh
    assert t.emitter.lines == []


def test_limit_fills_up_with_flat_groups_and_says_so():
    t = scripted(**{"algorithm.filter_groups.max_num_gen_batches": 2})
    metrics: dict[str, float] = {}
    trajs = t.rollout(1, Timer(), metrics)
    assert len(t.group.calls) == 2
    assert [tr.prompt.index for tr in trajs] == [3, 3, 0, 0]  # the kept group, then the first dropped
    assert (metrics["train/num_groups_kept"], metrics["train/num_groups_filled"]) == (1.0, 1.0)
    [(level, message)] = t.emitter.lines
    assert level == "warning" and "1 of 2 groups" in message and "max_num_gen_batches=2" in message


def test_without_filter_one_batch_as_before():
    t = scripted(**{"algorithm.filter_groups.enable": False})
    t.loader = PromptLoader(_Data(12), batch_size=2, shuffle=False)
    metrics: dict[str, float] = {}
    trajs = t.rollout(1, Timer(), metrics)
    assert [tr.prompt.index for tr in trajs] == [0, 0, 1, 1] and metrics == {}


def test_acc_metric_reads_the_reward_functions_acc_field():
    t = scripted(**{"algorithm.filter_groups.metric": "acc"})
    # score varies everywhere, acc only where the prompt is not FLAT
    t.reward_fn = lambda src, text, gt, extra=None: {"score": 0.5 + float(text) / 4, "acc": float(text)}
    for tr in t.group.generate(t.loader.next_batch()[1], n=N, sampling=t.sampling(1), step=1):
        t.reward([tr])
        assert tr.score == tr.reward == 0.5 + tr.reward_extra["acc"] / 4
    t.loader.position = 0
    trajs = t.rollout(1, Timer(), {})
    assert [tr.prompt.index for tr in trajs] == [3, 3, 6, 6]


@pytest.mark.parametrize("bad, key", [
    ({"algorithm.filter_groups.metric": None}, "algorithm.filter_groups.metric"),
    ({"algorithm.filter_groups.metric": "seq_final_reward", "algorithm.use_kl_in_reward": True},
     "algorithm.filter_groups.metric"),
    ({"data.gen_batch_size": 2, "algorithm.filter_groups.max_num_gen_batches": 3},
     "algorithm.filter_groups.max_num_gen_batches"),
    ({"reward_model.overlong_buffer.len": 0}, "reward_model.overlong_buffer.len"),
    ({"reward_model.overlong_buffer.len": 335}, "reward_model.overlong_buffer.len"),
    ({"reward_model.overlong_buffer.penalty_factor": -1.0}, "reward_model.overlong_buffer.penalty_factor"),
])
def test_config_checks(bad, key):
    from trainer.config import ConfigError, validate

    cfg = apply_overrides(get_recipe("dapo"), {"data.train_batch_size": 8, **bad})
    with pytest.raises(ConfigError) as err:
        validate(cfg, require_paths=False)
    assert err.value.key == key


def test_config_warnings():
    from trainer.config import config_warnings

    assert config_warnings(get_recipe("dapo")) == []
    cfg = apply_overrides(get_recipe("demo_tool_arith"), {"data.gen_batch_size": 24,
                                                           "reward_model.overlong_buffer.enable": True,
                                                           "reward_model.overlong_buffer.len": 8})
    assert [w.key for w in config_warnings(cfg)] == ["data.gen_batch_size", "reward_model.overlong_buffer.log"]


def test_dapo_recipe_two_steps_through_the_cli(tmp_path, tiny_model_dir, demo_data_dir):
    """The random tiny model scores 0 everywhere: every group is flat in acc, so each step generates
    up to the limit and fills up; responses run into the 16-token buffer of a 48-token budget."""
    from trainer.cli import main

    out = tmp_path / "out"
    rc = main(["run", "--recipe", "dapo", f"data.train_files={demo_data_dir / 'train.jsonl'}",
               f"actor_rollout_ref.model.path={tiny_model_dir}", "data.max_response_length=48",
               "data.train_batch_size=4", "data.gen_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
               "actor_rollout_ref.rollout.n=4", "reward_model.overlong_buffer.len=16",
               "algorithm.filter_groups.max_num_gen_batches=3", "trainer.total_training_steps=2",
               "trainer.torch_threads=1", "trainer.save_freq=-1", "trainer.export_hf=false",
               "trainer.logger=[jsonl]", "report.samples_per_step=-1", "--output", str(out)])
    assert rc == 0
    ev = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    assert [e["data"]["state"] for e in ev if e["type"] == "status"] == ["starting", "running", "succeeded"]
    steps = [e["data"]["metrics"] for e in ev if e["type"] == "metrics" and "actor/pg_loss" in e["data"]["metrics"]]
    assert len(steps) == 2
    for m in steps:
        assert m["train/num_gen_batches"] == 3 and m["train/num_groups_generated"] == 12
        assert m["train/num_groups_kept"] == 0 and m["train/num_groups_filled"] == 4
        assert m["actor/pg_clipfrac"] >= 0 and "actor/kl_loss" not in m  # no KL loss
    warnings = [e["data"]["message"] for e in ev if e["type"] == "log" and e["data"]["level"] == "warning"]
    assert sum("fill the batch" in w for w in warnings) == 2
    samples = [e["data"] for e in ev if e["type"] == "sample"]
    assert len(samples) == 2 * 16
    for s in samples:
        want = min(-(s["response_length"] - 32) / 16, 0.0)
        assert s["reward_extra"]["overlong_reward"] == pytest.approx(want)
        assert s["reward_extra"]["overlong"] == (want < 0)
        assert s["reward"] == pytest.approx(want)  # the arith score is 0 for the random model
    assert any(s["reward_extra"]["overlong"] for s in samples)
