"""The reward-model worker: the tiny sequence-classification model with its own tokenizer and chat
template scores whole conversations in micro-batches (equal to one at a time); the weighted sum of
the reward's parts; the config checks; and a 2-step run through the CLI whose samples carry every
part and whose metrics carry reward_model/* and timing_s/reward_model."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from trainer.config import Config, ConfigError, apply_overrides, validate
from trainer.rewards.combine import Weights, part_metrics, parts, weighted_score

CALL = {"type": "function", "function": {"name": "calculator", "arguments": {"expression": "12 + 3"}}}
CONV = [{"role": "system", "content": "Use the calculator tool, then give the answer as #### <number>."},
        {"role": "user", "content": "What is 12 + 3?"},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1_0", "name": "calculator", "content": "15"},
        {"role": "assistant", "content": "#### 15"}]


@pytest.fixture(scope="session")
def tiny_rm_dir(tmp_path_factory) -> Path:
    from trainer.models.tiny_rm import make_tiny_reward_model

    return Path(make_tiny_reward_model(tmp_path_factory.mktemp("tiny_rm"), preset="smoke", seed=0))


def test_tiny_reward_model_is_a_one_label_classifier_with_its_own_tokenizer(tiny_rm_dir, tiny_model_dir):
    from transformers import AutoConfig

    from trainer.models.hf_folder import load_tokenizer
    from trainer.workers.reward_model import render

    cfg = AutoConfig.from_pretrained(tiny_rm_dir)
    assert cfg.architectures == ["Qwen2ForSequenceClassification"] and cfg.num_labels == 1
    rm_tok, pol_tok = load_tokenizer(tiny_rm_dir), load_tokenizer(tiny_model_dir)
    text = render(rm_tok, CONV)
    # the reward model's template: plain-text turns, the tool call and the tool reply included
    assert text.startswith("### system\n") and '[call calculator {"expression": "12 + 3"}]' in text
    assert "### tool\n15\n### assistant\n#### 15\n### end\n" in text and "<|im_start|>" not in text
    # the same text gets other ids from the two tokenizers
    assert rm_tok.encode(text, add_special_tokens=False) != pol_tok.encode(text, add_special_tokens=False)
    assert len(rm_tok) < len(pol_tok)


def test_batched_scores_equal_one_at_a_time_and_keep_the_order(tiny_rm_dir):
    from trainer.workers.reward_model import RewardModelWorker

    w = RewardModelWorker(str(tiny_rm_dir), device=torch.device("cpu"), micro_batch=2)
    convs = [CONV, CONV[:2] + [{"role": "assistant", "content": "#### 14"}], CONV[:3], CONV[:2],
             CONV + [{"role": "user", "content": "and 12 * 3?"}]]
    batched = w.score(convs)
    single = [w.score([c])[0] for c in convs]
    assert batched == pytest.approx(single, abs=1e-5)
    assert len(set(round(s, 6) for s in batched)) == len(convs)  # different conversations, different scores
    # the score is the head's output at the last token of the reward model's own rendering
    ids = torch.tensor([w.encode(CONV)])
    assert batched[0] == pytest.approx(float(w.model(input_ids=ids).logits[0, 0]), abs=1e-5)


def test_max_length_keeps_the_end(tiny_rm_dir):
    from trainer.workers.reward_model import RewardModelWorker

    w = RewardModelWorker(str(tiny_rm_dir), device=torch.device("cpu"), max_length=12)
    full = RewardModelWorker(str(tiny_rm_dir), device=torch.device("cpu")).encode(CONV)
    assert w.encode(CONV) == full[-12:]


def test_weighted_sum_of_the_parts():
    w = Weights(rule=0.5, rm=2.0, tool=0.25, use_rm=True)
    assert weighted_score(w, rule=1.0, rm=-0.5, tool_rewards={"calculator": 1.0, "other": 3.0}) == pytest.approx(0.5 - 1.0 + 1.0)
    # an absent rule (no rule for the data source) counts 0; without a reward model its score is ignored
    assert weighted_score(w, rule=None, rm=1.0, tool_rewards={}) == pytest.approx(2.0)
    assert weighted_score(Weights(rule=1.0, rm=5.0, use_rm=False), rule=0.3, rm=1.0, tool_rewards={}) == pytest.approx(0.3)
    assert Weights().rule_alone and not Weights(use_rm=True).rule_alone and not Weights(tool=1.0).rule_alone
    p = parts(w, rule=1.0, rm=-0.5, tool_rewards={"calculator": 1.0}, penalty=-0.25, reward=0.5)
    assert p == {"rule_score": 1.0, "rm_score": -0.5, "tool_reward": 1.0, "overlong_reward": -0.25, "total": 0.5}
    m = part_metrics([p, {**p, "rm_score": 1.5, "rule_score": None}])
    assert m["reward_model/rm_score/mean"] == pytest.approx(0.5) and m["reward_model/rm_score/min"] == -0.5
    assert m["reward_model/rule_score/mean"] == 1.0  # the None is not a value


def test_score_trajectories_combines_and_records_the_parts():
    from trainer.scoring import score_trajectories
    from trainer.types import PromptItem, Trajectory

    cfg = apply_overrides(Config(), {"reward_model.enable": True, "reward_model.model.path": "/x",
                                     "reward_model.rule_weight": 0.5, "reward_model.rm_weight": 2.0,
                                     "reward_model.tool_reward_weight": 1.0,
                                     "actor_rollout_ref.rollout.response_length": 100})
    prompt = PromptItem(uid="u", index=0, messages=[], prompt_ids=[1], data_source="arith", ground_truth=15)
    trajs = [Trajectory(uid="u", index=i, prompt=prompt, prompt_ids=[1], response_ids=[2, 3], loss_mask=[1, 1],
                        response_text=text, tool_rewards={"calculator": 0.5})
             for i, text in enumerate(["#### 15", "#### 14"])]
    score_trajectories(trajs, lambda src, text, gt, extra=None: float(text == f"#### {gt}"), cfg, [0.25, -1.0])
    assert [t.reward for t in trajs] == pytest.approx([0.5 + 0.5 + 0.5, 0.0 - 2.0 + 0.5])
    assert trajs[1].reward_extra == {"rule_score": 0.0, "rm_score": -1.0, "tool_reward": 0.5,
                                     "overlong_reward": 0.0, "total": pytest.approx(-1.5)}
    with pytest.raises(ValueError, match="one reward-model score per trajectory"):
        score_trajectories(trajs, lambda *a: 0.0, cfg, None)
    # validation scores with the rule alone (verl), nothing recorded beyond the rule's own parts
    for t in trajs:
        t.reward_extra = {}
    score_trajectories(trajs, lambda src, text, gt, extra=None: float(text == f"#### {gt}"), cfg, validation=True)
    assert [t.reward for t in trajs] == [1.0, 0.0] and trajs[0].reward_extra == {}


def test_rule_weight_zero_tolerates_a_data_source_without_a_rule():
    from trainer.rewards import compute_score
    from trainer.scoring import score_trajectories
    from trainer.types import PromptItem, Trajectory

    prompt = PromptItem(uid="u", index=0, messages=[], prompt_ids=[1], data_source="chat", ground_truth=None)
    tr = Trajectory(uid="u", index=0, prompt=prompt, prompt_ids=[1], response_ids=[2], loss_mask=[1])
    rm_only = apply_overrides(Config(), {"reward_model.enable": True, "reward_model.model.path": "/x",
                                         "reward_model.rule_weight": 0.0})
    score_trajectories([tr], compute_score, rm_only, [0.75])
    assert tr.reward == 0.75 and tr.reward_extra["rule_score"] is None
    with pytest.raises(NotImplementedError):  # with a weight on the rule, a missing rule is an error
        score_trajectories([tr], compute_score, apply_overrides(rm_only, {"reward_model.rule_weight": 1.0}), [0.75])


def test_config_checks():
    base = {"data.train_files": "x", "actor_rollout_ref.model.path": "y"}
    with pytest.raises(ConfigError) as exc:
        validate(apply_overrides(Config(), {**base, "reward_model.enable": True}))
    assert exc.value.key == "reward_model.model.path"
    with pytest.raises(ConfigError) as exc:
        validate(apply_overrides(Config(), {**base, "reward_model.rule_weight": 0.0}))
    assert exc.value.key == "reward_model.rule_weight"  # no reward model, no rule: always 0
    with pytest.raises(ConfigError) as exc:
        validate(apply_overrides(Config(), {**base, "reward_model.micro_batch_size_per_gpu": 0}))
    assert exc.value.key == "reward_model.micro_batch_size_per_gpu"
    validate(apply_overrides(Config(), {**base, "reward_model.enable": True, "reward_model.model.path": "/rm",
                                        "reward_model.rule_weight": 0.0}))


def test_two_steps_with_the_reward_model_through_the_cli(tmp_path, tiny_model_dir, tiny_rm_dir, demo_data_dir):
    from trainer.cli import main

    out = tmp_path / "out"
    rc = main(["run", "--recipe", "demo_tool_arith", f"data.train_files={demo_data_dir / 'train.jsonl'}",
               f"data.val_files={demo_data_dir / 'test.jsonl'}",
               f"actor_rollout_ref.model.path={tiny_model_dir}", "data.max_response_length=32",
               "data.train_batch_size=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
               "actor_rollout_ref.rollout.n=2", "reward_model.enable=true",
               f"reward_model.model.path={tiny_rm_dir}", "reward_model.micro_batch_size_per_gpu=3",
               "reward_model.rule_weight=0.5", "reward_model.rm_weight=2.0",
               "trainer.total_training_steps=2", "trainer.test_freq=2", "trainer.torch_threads=1",
               "trainer.save_freq=-1", "trainer.export_hf=false", "trainer.logger=[jsonl]",
               "report.samples_per_step=-1", "--output", str(out)])
    assert rc == 0
    ev = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    steps = [e["data"]["metrics"] for e in ev if e["type"] == "metrics" and "actor/pg_loss" in e["data"]["metrics"]]
    assert len(steps) == 2
    for m in steps:
        assert 0 < m["timing_s/reward_model"] <= m["timing_s/reward"]
        assert m["reward_model/rm_score/min"] <= m["reward_model/rm_score/mean"] <= m["reward_model/rm_score/max"]
        assert "reward_model/rule_score/mean" in m
    samples = [e["data"] for e in ev if e["type"] == "sample" and not e["data"].get("validation")]
    assert len(samples) == 2 * 4
    from trainer.workers.reward_model import RewardModelWorker

    rm = RewardModelWorker(str(tiny_rm_dir), device=torch.device("cpu"))
    for s in samples:
        x = s["reward_extra"]
        assert set(x) >= {"rule_score", "rm_score", "tool_reward", "overlong_reward", "total"}
        assert x["total"] == pytest.approx(0.5 * x["rule_score"] + 2.0 * x["rm_score"], abs=1e-6)
        assert s["reward"] == pytest.approx(x["total"], abs=1e-6)
        # the worker's score is the reward model's score of the sample's transcript
        assert x["rm_score"] == pytest.approx(rm.score([s["messages"]])[0], abs=1e-4)
    mem = [e["data"]["phase"] for e in ev if e["type"] == "memory"]
    assert "reward_model" in mem


def test_demo_reward_model_data_is_labelled_by_the_rule():
    from trainer.models.demo_rm_data import KINDS, conversation, label, labelled_conversations
    from trainer.rewards import compute_score
    from trainer.tasks import arith

    rng = __import__("random").Random(0)
    right = conversation(12, 34, "*", "right_tool", rng)
    assert right[-1]["content"] == "#### 408" and right[-2]["content"] == "408" and label(right, 408) == 1.0
    for kind in KINDS:
        for _ in range(20):
            msgs = conversation(23, 45, "-", kind, rng)
            text = "\n".join(m.get("content") or "" for m in msgs[2:])
            assert label(msgs, -22) == compute_score("arith", text, -22)
    data = labelled_conversations(400, seed=1)
    held = {(a, b) for a, b, _ in arith.problems("test")}
    assert all(tuple(int(x) for x in m[1]["content"][8:-1].split(" ")[::2]) not in held for m, _ in data)
    share = sum(y for _, y in data) / len(data)
    assert 0.3 < share < 0.6  # both labels well represented


def test_demo_reward_model_near_answers_are_wrong_and_of_every_way():
    from trainer.models.demo_rm_data import NEAR_WAYS, near_answer
    from trainer.tasks import arith

    rng = __import__("random").Random(0)
    seen = {"operand": 0, "other_op": 0, "sign": 0, "drop": 0}
    for a, b, op in [(12, 34, "*"), (23, 45, "-"), (60, 60, "-"), (10, 99, "+"), (55, 11, "*")]:
        truth = arith.answer(a, b, op)
        for _ in range(80):
            got = near_answer(a, b, op, rng)
            assert got != truth
            seen["operand"] += got in (a, b)
            seen["other_op"] += got in {arith.answer(a, b, o) for o in arith.OPS if o != op} - {truth}
            seen["sign"] += got == -truth
            seen["drop"] += len(str(abs(got))) < len(str(abs(truth)))
    assert len(NEAR_WAYS) == 8 and all(n >= 10 for n in seen.values()), seen
    # the reply 0 (60 - 60) answered with an operand: the drift seen in the GRPO run on the first model
    assert any(near_answer(60, 60, "-", rng) == 60 for _ in range(100))


def test_demo_reward_model_pairs_differ_only_where_their_kind_says():
    from trainer.models.demo_rm_data import matched_pairs
    from trainer.tasks import arith

    pairs = matched_pairs(200, seed=3)
    held = {(a, b) for a, b, _ in arith.problems("test")}
    kinds = {"answer": 0, "call": 0}
    for (right, y_right), (wrong, y_wrong) in pairs:
        assert y_right == 1.0 and right[:2] == wrong[:2]  # the same problem
        assert tuple(int(x) for x in right[1]["content"][8:-1].split(" ")[::2]) not in held
        if right[2] == wrong[2]:  # same call, same reply: only the answer differs, and it is wrong
            assert right[3] == wrong[3] and right[4] != wrong[4] and y_wrong == 0.0
            kinds["answer"] += 1
        else:  # a miscopied call; its reply answered (right only when the miscopy is harmless, e.g. a swap of +)
            assert wrong[4]["content"] == "#### " + wrong[3]["content"]
            assert y_wrong == (1.0 if wrong[3]["content"] == right[3]["content"] else 0.0)
            kinds["call"] += 1
    assert kinds["answer"] > 100 and kinds["call"] > 30


def test_demo_reward_model_agreement_and_ranking_score_a_perfect_and_a_blind_model():
    from trainer.models.demo_rm_data import KINDS, NEAR_WAYS, agreement_by_kind, label, ranking_by_way
    from trainer.tasks import arith

    def truth(conv):  # "What is a op b?"
        a, op, b = conv[1]["content"][8:-1].split(" ")
        return arith.answer(int(a), int(b), op)

    class Rule:  # scores by the rule itself: agrees everywhere, ranks every pair
        def score(self, convs):
            return [1.0 if label(m, truth(m)) else -1.0 for m in convs]

    class Blind:  # the same score for everything: ranks no pair above another
        def score(self, convs):
            return [1.0] * len(convs)

    perfect, blind = agreement_by_kind(Rule(), n=32), agreement_by_kind(Blind(), n=32)
    assert set(perfect) == {*KINDS, "pair_ranking"} and all(v == 1.0 for v in perfect.values())
    assert blind["pair_ranking"] == 0.0 and blind["wrong_answer"] == 0.0 and blind["right_tool"] == 1.0
    perfect, blind = ranking_by_way(Rule(), n=24), ranking_by_way(Blind(), n=24)
    assert list(perfect) == [*NEAR_WAYS, "miscopy_a", "miscopy_b", "miscopy_op"]
    assert all(v == 1.0 for v in perfect.values()) and all(v == 0.0 for v in blind.values())


def test_demo_reward_model_prefix_targets_start_where_a_pair_differs():
    from trainer.models.demo_rm import first_differences, prefix_targets

    seqs = [[5, 5], [1, 2, 3, 4], [1, 2, 9, 4, 7], [1, 2, 3], [1, 2, 3]]  # a mix row, then two pairs
    labels = torch.tensor([1.0, 1.0, 0.0, 1.0, 1.0])  # the second pair has equal labels: no targets
    target, weight = prefix_targets(seqs, labels, 1, 6)
    assert weight[0].sum() == 0 and weight[3:].sum() == 0
    assert weight[1].tolist() == [0, 0, 1, 1, 0, 0] and target[1].tolist() == [0, 0, 1, 1, 0, 0]
    assert weight[2].tolist() == [0, 0, 1, 1, 1, 0] and target[2].sum() == 0
    _, weight = prefix_targets([[1, 2], [1, 2, 3]], torch.tensor([1.0, 0.0]), 0, 3)  # one a prefix of the other
    assert weight.tolist() == [[0, 0, 0], [0, 0, 1]]
    assert first_differences(seqs, labels, 1) == [(1, 2)]  # the token both have where they first differ
    assert first_differences([[1, 2], [1, 2, 3]], torch.tensor([1.0, 0.0]), 0) == []


def test_demo_reward_model_token_scores_end_with_the_workers_score(tiny_rm_dir):
    from trainer.models.demo_rm import token_scores
    from trainer.workers.reward_model import RewardModelWorker

    w = RewardModelWorker(str(tiny_rm_dir), device=torch.device("cpu"))
    short = CONV[:2] + [{"role": "assistant", "content": "#### 15"}]
    seqs = [w.encode(CONV), w.encode(short)]
    ids = torch.full((2, len(seqs[0])), w.pad_id)
    mask = torch.zeros((2, len(seqs[0])), dtype=torch.long)
    for r, seq in enumerate(seqs):
        ids[r, : len(seq)], mask[r, : len(seq)] = torch.as_tensor(seq), 1
    per_token = token_scores(w.model, ids, mask)
    assert per_token.shape == ids.shape and len(seqs[1]) < len(seqs[0])
    last = per_token[torch.arange(2), mask.sum(-1) - 1].tolist()
    assert last == pytest.approx(w.score([CONV, short]), abs=1e-5)


def test_demo_reward_model_trains_from_a_policy_folder(tmp_path, tiny_model_dir):
    from trainer.models.demo_rm import make_demo_reward_model
    from trainer.models.demo_rm_data import KINDS
    from trainer.workers.reward_model import RewardModelWorker

    with pytest.raises(ValueError, match="pairs"):
        make_demo_reward_model(tmp_path / "bad", init=tiny_model_dir, steps=1, batch=4, pairs=3)
    res = make_demo_reward_model(tmp_path / "rm", init=tiny_model_dir, steps=3, batch=4, pairs=1, extra_layers=1,
                                 body_lr=0.0, log=lambda m: None)
    assert res["steps"] == 3 and 0.0 <= res["held_out_accuracy"] <= 1.0 and res["pairs"] == 1
    assert set(res["held_out_by_kind"]) == {*KINDS, "pair_ranking"} and res["pair_loss"] > 0
    body = json.loads((Path(tiny_model_dir) / "config.json").read_text())["num_hidden_layers"]
    from transformers import AutoModelForCausalLM

    frozen = AutoModelForCausalLM.from_pretrained(tiny_model_dir).model.layers[0].mlp.down_proj.weight
    w = RewardModelWorker(str(tmp_path / "rm"), device=torch.device("cpu"))
    assert w.model.config.num_labels == 1 and w.model.config.architectures == ["Qwen2ForSequenceClassification"]
    assert w.model.config.num_hidden_layers == body + 1  # one fresh layer on the policy's body, trained
    assert torch.equal(w.model.base_model.layers[0].mlp.down_proj.weight, frozen)  # body_lr 0: the body as it was
    assert w.model.base_model.layers[body].mlp.down_proj.weight.abs().sum() > 0  # started at zero
    assert "<|im_start|>" in w.tokenizer.apply_chat_template(CONV, tokenize=False)  # the policy's template
    assert json.loads((tmp_path / "rm" / "demo_rm_train.json").read_text())["steps"] == 3


def test_the_group_shards_scoring_like_the_rollout_and_keeps_the_order():
    from trainer.parallel.group import WorkerGroup

    class ThreeRanks(WorkerGroup):
        world_size = 3

        def __init__(self):
            self.seen = []

        def call(self, method, *, per_rank=None, **common):
            assert method == "compute_rm_score" and common == {"step": 7}
            self.seen = [len(p["conversations"]) for p in per_rank]
            return [[float(c[0]["content"]) for c in p["conversations"]] for p in per_rank]

        def shutdown(self):
            pass

    g = ThreeRanks()
    convs = [[{"role": "user", "content": str(i)}] for i in range(8)]
    assert g.compute_rm_score(convs, step=7) == [float(i) for i in range(8)]
    assert g.seen == [3, 3, 2]  # contiguous shares, as generate splits prompts
