"""The multi-turn rollout with an interaction (verl's simulated user): the gsm8k interaction checks the
answer, asks for another try when it is wrong and ends the conversation when it is right.

A scripted engine replays fixed assistant texts (tests/trainer/rollout/test_multi_turn_agent.py's):
this tests the bookkeeping (the reply as a user message and a masked template delta, turn scores,
the budgets, the row's kwargs), then one real tiny-model run.
"""
import asyncio

import pytest

from tests.trainer.rollout.test_multi_turn_agent import ScriptedEngine
from trainer.algorithms.metrics import verl_num_turns
from trainer.interactions import BaseInteraction, InteractionReply, get_interaction, registered_interactions
from trainer.interactions.gsm8k import CORRECT, INCORRECT
from trainer.rollout.agent import MultiTurnRollout
from trainer.rollout.base import SamplingParams
from trainer.step_report import interaction_error_metrics
from trainer.types import PromptItem

WRONG = "#### 45<|im_end|>"
RIGHT = "#### 46<|im_end|>"
GREEDY = SamplingParams(temperature=0, max_new_tokens=64)


def make_prompt(tok, *, uid="u0", index=0, ground_truth="46", extra_info=None):
    msgs = [{"role": "user", "content": "What is 12 + 34? End with '#### <answer>'."}]
    text = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    return PromptItem(uid=uid, index=index, messages=msgs, prompt_ids=tok.encode(text, add_special_tokens=False),
                      data_source="openai/gsm8k", ground_truth=ground_truth, extra_info=dict(extra_info or {}))


def rollout(tok, engine, *, max_turns=4, max_response_length=256, **mt):
    cfg = {"multi_turn": {"enable": True, "max_turns": max_turns, "interaction": "gsm8k", **mt}}
    return MultiTurnRollout(engine, tok, {}, cfg, {"max_response_length": max_response_length})


def test_a_wrong_answer_gets_another_try_and_a_right_one_ends_the_conversation(tiny_tokenizer):
    tok = tiny_tokenizer
    engine = ScriptedEngine(tok, lambda rid, turn: [WRONG, RIGHT, RIGHT][turn])
    prompt = make_prompt(tok)
    [traj] = rollout(tok, engine).run([prompt], n=1, sampling=GREEDY)

    assert [m["role"] for m in traj.messages] == ["user", "assistant", "user", "assistant", "user"]
    assert [m["content"] for m in traj.messages[1:]] == ["#### 45", INCORRECT, "#### 46", CORRECT]
    assert (traj.num_turns, traj.user_turns, traj.turn_scores, traj.finish_reason) == (2, 2, [0.0, 1.0], "stop")
    # Tokens: the first answer (trained), the reply as a template delta ending in the generation
    # prompt (not trained), the second answer (trained); the closing reply is in the transcript only.
    wrong, right = (tok.encode(t, add_special_tokens=False) for t in (WRONG, RIGHT))
    r, m = traj.response_ids, traj.loss_mask
    assert r[: len(wrong)] == wrong and r[-len(right):] == right
    assert m == [1] * len(wrong) + [0] * (len(r) - len(wrong) - len(right)) + [1] * len(right)
    full = tok.apply_chat_template(traj.messages[:4], tokenize=False)
    assert traj.prompt_ids + r == tok.encode(full, add_special_tokens=False)[: len(traj.prompt_ids) + len(r)]
    # The second turn was generated after the reply: its prompt ends in the reply and the generation prompt.
    second = tok.decode(engine.requests[1].prompt_ids)
    assert second.endswith(f"{INCORRECT}<|im_end|>\n<|im_start|>assistant\n")
    # verl counts the prompt, both assistant turns and both replies.
    assert verl_num_turns(traj.num_turns, traj.messages, len(prompt.messages), traj.finish_reason) == 5


def test_max_user_turns_ends_after_that_many_replies(tiny_tokenizer):
    tok = tiny_tokenizer
    engine = ScriptedEngine(tok, lambda rid, turn: WRONG)
    [traj] = rollout(tok, engine, max_turns=8, max_user_turns=2).run([make_prompt(tok)], n=1, sampling=GREEDY)
    assert (traj.num_turns, traj.user_turns, traj.turn_scores) == (3, 2, [0.0, 0.0])
    assert traj.messages[-1] == {"role": "assistant", "content": "#### 45"}


def test_max_turns_ends_the_conversation_without_asking(tiny_tokenizer):
    tok = tiny_tokenizer
    engine = ScriptedEngine(tok, lambda rid, turn: WRONG)
    [traj] = rollout(tok, engine, max_turns=2).run([make_prompt(tok)], n=1, sampling=GREEDY)
    assert (traj.num_turns, traj.user_turns, traj.finish_reason) == (2, 1, "stop")


def test_a_reply_that_does_not_fit_ends_with_length(tiny_tokenizer):
    tok = tiny_tokenizer
    engine = ScriptedEngine(tok, lambda rid, turn: WRONG)
    budget = len(tok.encode(WRONG, add_special_tokens=False)) + 5  # the reply's delta is longer than 5
    [traj] = rollout(tok, engine, max_response_length=budget).run([make_prompt(tok)], n=1, sampling=GREEDY)
    assert traj.finish_reason == "length" and len(traj.response_ids) == budget
    assert traj.num_turns == 1 and traj.user_turns == 1


def test_the_rows_interaction_kwargs_win_and_samples_are_independent(tiny_tokenizer):
    tok = tiny_tokenizer
    # The row's kwargs say 45 is right (not the row's 46): sample 0 answers 45 at once; sample 1
    # answers 46, then 45.
    engine = ScriptedEngine(tok, lambda rid, turn: WRONG if rid.endswith("-0") or turn else RIGHT)
    prompt = make_prompt(tok, extra_info={"interaction_kwargs": {"name": "gsm8k", "ground_truth": "45"}})
    trajs = rollout(tok, engine).run([prompt], n=2, sampling=GREEDY)
    assert [t.turn_scores for t in trajs] == [[1.0], [0.0, 1.0]]
    assert [t.num_turns for t in trajs] == [1, 2]


def test_a_row_naming_another_interaction_is_refused(tiny_tokenizer):
    tok = tiny_tokenizer
    prompt = make_prompt(tok, uid="row7", extra_info={"interaction_kwargs": {"name": "weather"}})
    with pytest.raises(ValueError, match="prompt 'row7' asks for the interaction 'weather'.*'gsm8k'"):
        rollout(tok, ScriptedEngine(tok, lambda rid, turn: RIGHT)).run([prompt], n=1, sampling=GREEDY)


def test_interaction_state_is_released(tiny_tokenizer):
    tok = tiny_tokenizer
    ro = rollout(tok, ScriptedEngine(tok, lambda rid, turn: [WRONG, RIGHT][turn]))
    ro.run([make_prompt(tok, uid=f"u{i}", index=i) for i in range(3)], n=2, sampling=GREEDY)
    assert ro.interaction._truth == {}
    assert ro.last_stats["interaction_s"] >= 0.0


async def _reply(interaction, text, truth="46"):
    await interaction.start_interaction("r", ground_truth=truth)
    try:
        return await interaction.generate_response("r", [{"role": "user", "content": "q"},
                                                         {"role": "assistant", "content": text}])
    finally:
        await interaction.finalize_interaction("r")


@pytest.mark.parametrize("text, truth, expected", [
    ("so #### 46", "46", InteractionReply(True, CORRECT, 1.0)),
    # verl's Gsm8kInteraction: "#### " put before the answer unless it starts so, then the flexible
    # method (the last number), not the strict one (the first '#### n' line).
    ("it is 46", "46", InteractionReply(True, CORRECT, 1.0)),
    ("#### 45, no: 46", "46", InteractionReply(True, CORRECT, 1.0)),
    ("46? no, 45", "46", InteractionReply(False, INCORRECT, 0.0)),
    ("#### 45", "46", InteractionReply(False, INCORRECT, 0.0)),
    ("", "46", InteractionReply(False, INCORRECT, 0.0)),
])
def test_the_gsm8k_interaction_scores_as_verls(text, truth, expected):
    import asyncio

    assert asyncio.run(_reply(get_interaction("gsm8k"), text, truth)) == expected


def test_the_gsm8k_replies_are_verls():
    assert (CORRECT, INCORRECT) == ("Your response is correct!",
                                    "Your response is incorrect! You need to reflect on your answer and try again.")


def test_the_registry_names_what_it_has():
    assert "gsm8k" in registered_interactions()
    with pytest.raises(KeyError, match="no interaction named 'nope'; registered: gsm8k"):
        get_interaction("nope")


def test_real_tiny_model_run(tiny_model, tiny_tokenizer):
    """The hf engine with the gsm8k interaction: a random model's answers are wrong, so every sample
    gets replies until max_user_turns; each reply sits in the tokens between two generated turns.
    Every token is a stop token here, so each turn is one token long and ends as a real model's turn
    does (a random model would rarely emit its end-of-turn token and would run out of length)."""
    from trainer.rollout.base import build_engine

    tok = tiny_tokenizer
    engine = build_engine("hf", model=tiny_model, tokenizer=tok, config=None, device="cpu")
    trajs = rollout(tok, engine, max_turns=3, max_user_turns=2, max_response_length=200).run(
        [make_prompt(tok)], n=2, sampling=SamplingParams(temperature=1.0, max_new_tokens=12, seed=3,
                                                         stop_token_ids=list(range(len(tok)))))
    for t in trajs:
        assert (t.num_turns, t.user_turns, t.turn_scores, t.finish_reason) == (3, 2, [0.0, 0.0], "stop")
        assert [m["role"] for m in t.messages[1:]] == ["assistant", "user", "assistant", "user", "assistant"]
        assert len(t.response_ids) == len(t.loss_mask) <= 200 and sum(t.loss_mask) == 3


def test_the_reward_function_sees_the_turn_scores(tiny_tokenizer):
    """The rollout's turn scores reach the reward function as extra_info["turn_scores"] (as verl passes
    its interaction's scores), beside tool_rewards and num_turns."""
    from trainer.config import Config
    from trainer.scoring import score_trajectories

    tok = tiny_tokenizer
    [traj] = rollout(tok, ScriptedEngine(tok, lambda rid, turn: [WRONG, RIGHT][turn])).run(
        [make_prompt(tok)], n=1, sampling=GREEDY)
    seen = []

    def reward_fn(data_source, solution_str, ground_truth, extra_info):
        seen.append(extra_info)
        return extra_info["turn_scores"][-1]

    score_trajectories([traj], reward_fn, Config())
    assert seen[0]["turn_scores"] == [0.0, 1.0] and seen[0]["num_turns"] == 2
    assert traj.score == 1.0


def test_max_user_turns_counts_tool_rounds_as_verl_does(tiny_tokenizer):
    """verl's user_turns counts every round of tool replies as well as every interaction reply, and
    its max_user_turns ends the sample at the assistant turn after that many, with or without an
    interaction. Tools alone: one round, then the turn after it is the last (its call not run)."""
    from tests.trainer.rollout.test_multi_turn_agent import CALL
    from tests.trainer.rollout.test_multi_turn_agent import make_prompt as tool_prompt
    from trainer.tools import build_tools

    tok = tiny_tokenizer
    tools = build_tools(["calculator"])
    engine = ScriptedEngine(tok, lambda rid, turn: CALL)
    cfg = {"multi_turn": {"enable": True, "max_turns": 5, "max_user_turns": 1}}
    [traj] = MultiTurnRollout(engine, tok, tools, cfg, {"max_response_length": 400}).run(
        [tool_prompt(tok, tools)], n=1, sampling=GREEDY)
    assert (traj.num_turns, traj.tool_calls, traj.finish_reason) == (2, 1, "tool_calls")

    # With the interaction: a tool round and a reply are two user turns; the third assistant turn is the last.
    engine = ScriptedEngine(tok, lambda rid, turn: [CALL, WRONG, WRONG, WRONG, WRONG][turn])
    cfg = {"multi_turn": {"enable": True, "max_turns": 5, "max_user_turns": 2, "interaction": "gsm8k"}}
    [traj] = MultiTurnRollout(engine, tok, tools, cfg, {"max_response_length": 400}).run(
        [tool_prompt(tok, tools)], n=1, sampling=GREEDY)
    assert (traj.num_turns, traj.tool_calls, traj.user_turns, traj.finish_reason) == (3, 1, 1, "stop")
    assert [m["role"] for m in traj.messages[-4:]] == ["tool", "assistant", "user", "assistant"]


@pytest.mark.parametrize("key", ["instance_id", "messages"])
def test_a_rows_kwargs_cannot_take_the_calls_own_arguments(tiny_tokenizer, key):
    """interaction_kwargs are passed as keywords beside the request id and the messages: a row holding
    one of those names is refused naming the row before anything is generated (it was a TypeError out
    of the interaction, after the first turn for `messages`)."""
    tok = tiny_tokenizer
    engine = ScriptedEngine(tok, lambda rid, turn: WRONG)
    prompt = make_prompt(tok, uid="row3", extra_info={"interaction_kwargs": {key: "x"}})
    with pytest.raises(ValueError, match=f"prompt 'row3': extra_info.interaction_kwargs may not hold '{key}'"):
        rollout(tok, engine).run([prompt], n=1, sampling=GREEDY)
    assert engine.requests == []


class _Hangs(BaseInteraction):
    """Replies at once, except to the request named in its kwargs (it never answers that one), and
    raises on start for a row whose kwargs say so."""

    name = "test-hangs"

    async def start_interaction(self, instance_id, **kwargs):
        if kwargs.get("broken_start"):
            raise RuntimeError("the judge is down")

    async def generate_response(self, instance_id, messages, **kwargs):
        if kwargs.get("hang"):
            await asyncio.sleep(3600)
        return InteractionReply(should_terminate_sequence=True, content="thanks", score=1.0)


def test_an_interaction_that_hangs_or_raises_ends_only_its_conversation(tiny_tokenizer, caplog, monkeypatch):
    from trainer.interactions import base

    monkeypatch.setitem(base._REGISTRY, _Hangs.name, _Hangs)  # registered for this test only
    tok = tiny_tokenizer
    engine = ScriptedEngine(tok, lambda rid, turn: WRONG)
    prompts = [make_prompt(tok, uid="hangs", index=0, extra_info={"interaction_kwargs": {"hang": True}}),
               make_prompt(tok, uid="ok", index=1),
               make_prompt(tok, uid="broken", index=2, extra_info={"interaction_kwargs": {"broken_start": True}})]
    cfg = {"multi_turn": {"enable": True, "max_turns": 4, "interaction": "test-hangs", "interaction_timeout_s": 0.2}}
    with caplog.at_level("WARNING", logger="trainer.rollout.agent"):
        hangs, ok, broken = MultiTurnRollout(engine, tok, {}, cfg, {"max_response_length": 256}).run(
            prompts, n=1, sampling=GREEDY)
    # the hung reply: the conversation ends at the model's turn, counted
    assert (hangs.num_turns, hangs.user_turns, hangs.interaction_errors, hangs.finish_reason) == (1, 0, 1, "stop")
    assert hangs.messages[-1] == {"role": "assistant", "content": "#### 45"}
    # the others' conversations went on as usual
    assert (ok.user_turns, ok.turn_scores, ok.interaction_errors) == (1, [1.0], 0)
    assert ok.messages[-1] == {"role": "user", "content": "thanks"}
    # a failed start: the conversation goes on without the interaction (never asked again)
    assert (broken.num_turns, broken.user_turns, broken.interaction_errors) == (1, 0, 1)
    said = [r.getMessage() for r in caplog.records]
    assert any("'test-hangs' reply" in m and "timed out after 0.2s" in m for m in said), said
    assert any("'test-hangs' start" in m and "RuntimeError: the judge is down" in m for m in said), said
    assert interaction_error_metrics([hangs, ok, broken]) == {"interaction/errors": 2.0}
    assert interaction_error_metrics([ok]) == {}
