"""MultiTurnRollout's state machine with a scripted engine (fixed ids), then one real tiny-model run.

The scripted engine is a legitimate RolloutEngine that replays token ids encoded from fixed assistant
texts: it tests the bookkeeping (masks, deltas, finish reasons, tool errors), not the model.
"""
import asyncio
import time

import pytest

from trainer.rollout.agent import MultiTurnRollout, truncate_text
from trainer.rollout.base import GenerationOutput, RolloutEngine, SamplingParams
from trainer.tools import BaseTool, ToolResult, build_tools
from trainer.types import PromptItem

CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "12+34"}}\n</tool_call>'
ANSWER = "#### 46<|im_end|>"


class ScriptedEngine(RolloutEngine):
    """Replays `script(request_id, turn) -> text` as token ids; honours stop ids and max_new_tokens."""

    def __init__(self, tokenizer, script):
        self.tok, self.script, self.turns, self.batches, self.requests = tokenizer, script, {}, [], []

    @classmethod
    def from_config(cls, **kw):
        raise NotImplementedError

    def generate(self, requests):
        self.batches.append(len(requests))
        outs = []
        for r in requests:
            self.requests.append(r)
            turn = self.turns.get(r.request_id, 0)
            self.turns[r.request_id] = turn + 1
            ids = self.tok.encode(self.script(r.request_id, turn), add_special_tokens=False)
            out, reason = [], "length"
            for t in ids[: r.sampling.max_new_tokens]:
                out.append(t)
                if t in r.sampling.stop_token_ids:
                    reason = "stop"
                    break
            outs.append(GenerationOutput(r.request_id, out, [-0.5] * len(out), reason))
        return outs

    def update_weights(self, named_tensors):
        pass

    def release_memory(self):
        pass

    def resume_memory(self):
        pass

    def flush_cache(self):
        pass


class SlowTool(BaseTool):
    name = "slow"
    schema = {"type": "function", "function": {"name": "slow", "description": "sleeps",
                                               "parameters": {"type": "object", "properties": {"s": {"type": "number"}}}}}

    async def execute(self, instance_id, arguments, **kw):
        await asyncio.sleep(float(arguments.get("s", 0)))
        return ToolResult("slept", step_reward=0.0)


class BoomTool(BaseTool):
    name = "boom"
    schema = {"type": "function", "function": {"name": "boom", "description": "raises",
                                               "parameters": {"type": "object", "properties": {}}}}

    async def execute(self, instance_id, arguments, **kw):
        raise RuntimeError("kaboom")


def make_prompt(tok, tools, uid="u0", index=0, **kw):
    from trainer.tasks import arith

    msgs = arith.prompt_messages(12, 34, "+")
    ids = tok.apply_chat_template(msgs, tools=[t.schema for t in tools.values()], add_generation_prompt=True,
                                  tokenize=False)
    return PromptItem(uid=uid, index=index, messages=msgs, prompt_ids=tok.encode(ids, add_special_tokens=False),
                      data_source="arith", ground_truth=46, tools=[t.schema for t in tools.values()], **kw)


def rollout(tok, engine, tools, max_turns=3, max_response_length=256, **mt):
    cfg = {"multi_turn": {"enable": True, "max_turns": max_turns, **mt}}
    return MultiTurnRollout(engine, tok, tools, cfg, {"max_response_length": max_response_length})


def test_tool_turn_masks_and_template_equivalence(tiny_tokenizer):
    tok = tiny_tokenizer
    tools = build_tools(["calculator"])
    engine = ScriptedEngine(tok, lambda rid, turn: [CALL + "<|im_end|>", ANSWER][turn])
    prompt = make_prompt(tok, tools)
    [traj] = rollout(tok, engine, tools).run([prompt], n=1, sampling=SamplingParams(temperature=0, max_new_tokens=64))

    call_ids = tok.encode(CALL, add_special_tokens=False)
    ans_ids = tok.encode(ANSWER, add_special_tokens=False)
    # The call turn stops at </tool_call> (max_parallel_calls=1), so <|im_end|> comes from the template.
    r, m = traj.response_ids, traj.loss_mask
    assert r[: len(call_ids)] == call_ids and m[: len(call_ids)] == [1] * len(call_ids)
    assert r[-len(ans_ids):] == ans_ids and m[-len(ans_ids):] == [1] * len(ans_ids)
    assert sum(m) == len(call_ids) + len(ans_ids)
    assert set(m[len(call_ids):-len(ans_ids)]) == {0}
    assert traj.rollout_logprobs == [(-0.5 if k else 0.0) for k in m]
    assert (traj.num_turns, traj.tool_calls, traj.tool_errors, traj.finish_reason) == (2, 1, 0, "stop")
    assert [msg["role"] for msg in traj.messages] == ["system", "user", "assistant", "tool", "assistant"]
    # Arguments are stored as the object the model generated (a JSON string would be encoded twice
    # when a template re-renders the transcript).
    assert traj.messages[2]["tool_calls"][0]["function"] == {"name": "calculator", "arguments": {"expression": "12+34"}}
    assert traj.messages[3]["content"] == "46" and traj.messages[4]["content"] == "#### 46"
    assert "#### 46" in traj.response_text and "<|im_end|>" not in traj.response_text
    # Token in/out bookkeeping equals re-templating the whole transcript (the sanity check verl runs).
    full = tok.apply_chat_template(traj.messages, tools=prompt.tools, tokenize=False)
    assert traj.prompt_ids + traj.response_ids == tok.encode(full, add_special_tokens=False)[: len(traj.prompt_ids) + len(r)]
    # The second turn's prompt is everything so far, ending in the generation prompt.
    second = engine.requests[1]
    assert second.prompt_ids == traj.prompt_ids + r[: -len(ans_ids)]
    assert second.prompt_ids[-3:] == tok.encode("<|im_start|>assistant\n", add_special_tokens=False)


def test_errors_become_tool_messages(tiny_tokenizer):
    tok = tiny_tokenizer
    tools = {**build_tools(["calculator"]), "slow": SlowTool(), "boom": BoomTool()}
    bad = {
        "json": "<tool_call>{oops</tool_call>",
        "unknown": '<tool_call>{"name": "nosuch", "arguments": {}}</tool_call>',
        "args": '<tool_call>{"name": "calculator", "arguments": {"expr": "1+1"}}</tool_call>',
        "unsafe": '<tool_call>{"name": "calculator", "arguments": {"expression": "__import__(\'os\')"}}</tool_call>',
        "raise": '<tool_call>{"name": "boom", "arguments": {}}</tool_call>',
        "timeout": '<tool_call>{"name": "slow", "arguments": {"s": 5}}</tool_call>',
    }
    kinds = list(bad)
    prompts = [make_prompt(tok, tools, uid=k, index=i) for i, k in enumerate(kinds)]
    engine = ScriptedEngine(tok, lambda rid, turn: bad[rid.split("-")[0]] if turn == 0 else ANSWER)
    t0 = time.perf_counter()
    trajs = rollout(tok, engine, tools, tool_timeout_s=0.3).run(prompts, n=1, sampling=SamplingParams(max_new_tokens=64))
    assert time.perf_counter() - t0 < 4.0
    expect = {"json": "malformed tool call (bad_json)", "unknown": "unknown tool 'nosuch'",
              "args": "invalid arguments for 'calculator'", "unsafe": "invalid arguments for 'calculator'",
              "raise": "failed: RuntimeError: kaboom", "timeout": "timed out after 0.3s"}
    for kind, traj in zip(kinds, trajs):
        tool_msg = traj.messages[3]
        assert tool_msg["role"] == "tool" and tool_msg["content"].startswith("Error:"), kind
        assert expect[kind] in tool_msg["content"], (kind, tool_msg["content"])
        assert (traj.tool_errors, traj.tool_calls, traj.num_turns, traj.finish_reason) == (1, 0, 2, "stop"), kind
        assert traj.messages[-1]["content"] == "#### 46"
    assert engine.batches == [6, 6]  # one engine call per turn, all requests together


def test_tools_run_concurrently_and_n_samples_sorted(tiny_tokenizer):
    tok = tiny_tokenizer
    tools = {"slow": SlowTool()}
    engine = ScriptedEngine(tok, lambda rid, turn: '<tool_call>{"name": "slow", "arguments": {"s": 0.4}}</tool_call>'
                            if turn == 0 else ANSWER)
    prompts = [make_prompt(tok, tools, uid=f"p{i}", index=i) for i in range(2)]
    t0 = time.perf_counter()
    trajs = rollout(tok, engine, tools).run(prompts, n=3, sampling=SamplingParams(max_new_tokens=64, seed=7))
    assert time.perf_counter() - t0 < 1.6  # 6 calls of 0.4 s each, concurrently
    assert [(t.uid, t.index) for t in trajs] == [(f"p{i}", s) for i in range(2) for s in range(3)]
    seeds = {r.sampling.seed for r in engine.requests}
    assert len(seeds) == 12  # every request and turn has its own seed


def test_max_turns_ends_with_tool_calls(tiny_tokenizer):
    tok = tiny_tokenizer
    tools = build_tools(["calculator"])
    engine = ScriptedEngine(tok, lambda rid, turn: CALL)
    [traj] = rollout(tok, engine, tools, max_turns=2).run([make_prompt(tok, tools)], n=1,
                                                          sampling=SamplingParams(max_new_tokens=64))
    assert (traj.num_turns, traj.tool_calls, traj.finish_reason) == (2, 1, "tool_calls")
    assert engine.batches == [1, 1]


def test_response_budget_truncates(tiny_tokenizer):
    tok = tiny_tokenizer
    tools = build_tools(["calculator"])
    engine = ScriptedEngine(tok, lambda rid, turn: CALL)
    call_len = len(tok.encode(CALL, add_special_tokens=False))
    budget = call_len + 5  # room for the call, not for the whole tool reply delta
    [traj] = rollout(tok, engine, tools, max_response_length=budget).run(
        [make_prompt(tok, tools)], n=1, sampling=SamplingParams(max_new_tokens=64))
    assert traj.finish_reason == "length" and len(traj.response_ids) == budget == len(traj.loss_mask)
    assert traj.num_turns == 1 and traj.tool_calls == 1
    # Per-turn cap below the text length: the engine stops at the cap -> length.
    engine = ScriptedEngine(tok, lambda rid, turn: CALL)
    [traj] = rollout(tok, engine, tools).run([make_prompt(tok, tools)], n=1, sampling=SamplingParams(max_new_tokens=4))
    assert traj.finish_reason == "length" and traj.loss_mask == [1] * 4


def test_single_turn_when_multi_turn_disabled(tiny_tokenizer):
    tok = tiny_tokenizer
    engine = ScriptedEngine(tok, lambda rid, turn: CALL + "<|im_end|>")
    ro = MultiTurnRollout(engine, tok, build_tools(["calculator"]), {"multi_turn": {"enable": False}},
                          {"max_response_length": 128})
    [traj] = ro.run([make_prompt(tok, {})], n=1, sampling=SamplingParams(max_new_tokens=64))
    assert tok.convert_tokens_to_ids("</tool_call>") not in engine.requests[0].sampling.stop_token_ids
    assert (traj.num_turns, traj.tool_calls, traj.finish_reason) == (1, 0, "stop")
    assert traj.loss_mask == [1] * len(traj.response_ids)


def test_ignore_eos_sends_no_stop_ids_and_runs_to_the_budget(tiny_tokenizer):
    tok = tiny_tokenizer
    engine = ScriptedEngine(tok, lambda rid, turn: ANSWER + " and more text after the end of the turn" * 4)
    ro = MultiTurnRollout(engine, tok, {}, {"multi_turn": {"enable": False}}, {"max_response_length": 40})
    [traj] = ro.run([make_prompt(tok, {})], n=1,
                    sampling=SamplingParams(max_new_tokens=40, stop_token_ids=[tok.eos_token_id], ignore_eos=True))
    assert engine.requests[0].sampling.stop_token_ids == []
    assert (traj.finish_reason, len(traj.response_ids)) == ("length", 40)


def test_tool_lifecycle_with_tools_kwargs(tiny_tokenizer):
    tok = tiny_tokenizer
    tools = build_tools(["calc_gsm8k_reward"])
    kwargs = {"calc_gsm8k_reward": {"create_kwargs": {"ground_truth": "46"}}}
    engine = ScriptedEngine(tok, lambda rid, turn: '<tool_call>{"name": "calc_gsm8k_reward", "arguments": '
                            '{"answer": "46"}}</tool_call>' if turn == 0 else ANSWER)
    [traj] = rollout(tok, engine, tools).run([make_prompt(tok, tools, tools_kwargs=kwargs)], n=1,
                                              sampling=SamplingParams(max_new_tokens=64))
    assert traj.tool_rewards == {"calc_gsm8k_reward": 1.0}
    assert "reward=1.0" in traj.messages[3]["content"]
    assert tools["calc_gsm8k_reward"]._state == {}  # released


def test_truncate_text():
    assert truncate_text("abcdefghij", 4, "middle") == "ab\n...(truncated)...\nij"
    # verl's sides name the part kept: left = the start, right = the end
    assert truncate_text("abcdefghij", 4, "left") == "abcd...(truncated)"
    assert truncate_text("abcdefghij", 4, "right") == "(truncated)...ghij"
    assert truncate_text("abc", 4) == "abc"


def test_real_tiny_model_run(tiny_model, tiny_tokenizer):
    from trainer.rollout.base import build_engine

    tok = tiny_tokenizer
    tools = build_tools(["calculator"])
    engine = build_engine("hf", model=tiny_model, tokenizer=tok, config=None, device="cpu")
    ro = rollout(tok, engine, tools, max_response_length=48)
    prompts = [make_prompt(tok, tools, uid=f"p{i}", index=i) for i in range(2)]
    sampling = SamplingParams(temperature=1.0, max_new_tokens=24, seed=3)
    trajs = ro.run(prompts, n=2, sampling=sampling)
    again = ro.run(prompts, n=2, sampling=sampling)
    assert len(trajs) == 4
    for t, u in zip(trajs, again):
        assert 0 < len(t.response_ids) <= 48
        assert len(t.loss_mask) == len(t.response_ids) == len(t.rollout_logprobs)
        assert t.finish_reason in {"stop", "length", "tool_calls"} and t.num_turns >= 1
        assert t.response_ids == u.response_ids  # seeded: reproducible


def test_parallel_calls_capped_by_max_parallel_calls(tiny_tokenizer):
    tok = tiny_tokenizer
    tools = build_tools(["calculator"])
    calls = "\n".join('<tool_call>\n{"name": "calculator", "arguments": {"expression": "%s"}}\n</tool_call>' % e
                      for e in ("1+1", "2*3", "9-4"))
    engine = ScriptedEngine(tok, lambda rid, turn: (calls + "<|im_end|>") if turn == 0 else ANSWER)
    ro = rollout(tok, engine, tools, max_parallel_calls=2)
    assert tok.convert_tokens_to_ids("</tool_call>") not in ro.stop_ids  # several calls per turn
    [traj] = ro.run([make_prompt(tok, tools)], n=1, sampling=SamplingParams(max_new_tokens=128))
    assert (traj.tool_calls, traj.tool_errors, traj.num_turns) == (2, 0, 2)
    assert [m["content"] for m in traj.messages if m["role"] == "tool"] == ["2", "6"]
    # Engine ended its turn with <|im_end|>: only "\n" is appended before the tool reply.
    call_ids = tok.encode(calls + "<|im_end|>", add_special_tokens=False)
    assert traj.response_ids[: len(call_ids) + 1] == call_ids + tok.encode("\n", add_special_tokens=False)
    assert traj.loss_mask[len(call_ids)] == 0


def test_max_model_len_limits_the_response(tiny_tokenizer):
    tok = tiny_tokenizer
    tools = build_tools(["calculator"])
    prompt = make_prompt(tok, tools)
    engine = ScriptedEngine(tok, lambda rid, turn: CALL)
    cfg = {"multi_turn": {"enable": True, "max_turns": 3}, "max_model_len": len(prompt.prompt_ids) + 10}
    [traj] = MultiTurnRollout(engine, tok, tools, cfg, {"max_response_length": 500}).run(
        [prompt], n=1, sampling=SamplingParams(max_new_tokens=64))
    assert len(traj.response_ids) == 10 and traj.finish_reason == "length"
    assert engine.requests[0].sampling.max_new_tokens == 10


def test_offered_tool_missing_from_registry_is_a_config_error(tiny_tokenizer):
    tok = tiny_tokenizer
    prompt = make_prompt(tok, build_tools(["calculator"]))
    ro = rollout(tok, ScriptedEngine(tok, lambda rid, turn: ANSWER), {})
    with pytest.raises(KeyError, match="not in the tools registry"):
        ro.run([prompt], n=1, sampling=SamplingParams(max_new_tokens=8))


def test_malformed_call_keeps_the_models_text(tiny_tokenizer):
    """A turn whose only content is a block that does not parse keeps its text (`raw`) and the reasons,
    and the sample event that carries it is valid (fit_sample cuts `raw` like content)."""
    from trainer.events.schema import MAX_MESSAGE_CHARS, SampleData
    from trainer.events.wire import fit_sample, make_event

    tok = tiny_tokenizer
    tools = build_tools(["calculator"])
    bad = '<tool_call>{"name": "calculator", "arguments": {"expression": "1+1"</tool_call>'
    engine = ScriptedEngine(tok, lambda rid, turn: bad if turn == 0 else ANSWER)
    [traj] = rollout(tok, engine, tools).run([make_prompt(tok, tools)], n=1, sampling=SamplingParams(max_new_tokens=64))
    turn = traj.messages[2]
    assert turn["role"] == "assistant" and turn["content"] == "" and turn["tool_calls"] == []
    assert turn["raw"] == bad
    assert [e["reason"] for e in turn["tool_call_errors"]] == ["bad_json"]
    assert traj.messages[3]["content"].startswith("Error: malformed tool call (bad_json)")
    # A well-formed call has neither field.
    assert "raw" not in traj.messages[-1] and "tool_call_errors" not in traj.messages[-1]
    sample = SampleData(step=1, uid="u0", index=0, reward=0.0, advantage=0.0, response_length=1, num_turns=2,
                        finish_reason="stop", messages=traj.messages)
    assert make_event(1, sample).data.messages[2]["raw"] == bad
    long = dict(turn, raw="x" * (MAX_MESSAGE_CHARS + 50))
    fitted = fit_sample(SampleData(**{**sample.__dict__, "messages": [long]}))
    assert len(fitted.messages[0]["raw"]) == MAX_MESSAGE_CHARS and fitted.messages[0]["raw"].endswith("[truncated]")
    with pytest.raises(ValueError, match=r"messages\[0\].raw"):
        make_event(1, SampleData(**{**sample.__dict__, "messages": [dict(turn, raw=7)]}))


def test_a_prompts_samples_do_not_depend_on_its_batch(tiny_model, tiny_tokenizer):
    """Split over two workers or rolled out together, a seeded prompt samples the same trajectories.

    Seeds are keyed by dataset row, sample and turn, never by position in the batch, so the world size
    does not change what is sampled (up to float reduction order in batched kernels).
    """
    from trainer.rollout.base import build_engine

    tok = tiny_tokenizer
    tools = build_tools(["calculator"])
    engine = build_engine("hf", model=tiny_model, tokenizer=tok, config=None, device="cpu")
    ro = rollout(tok, engine, tools, max_response_length=48)
    prompts = [make_prompt(tok, tools, uid=f"p{i}", index=10 + i) for i in range(4)]
    sampling = SamplingParams(temperature=1.0, max_new_tokens=24, seed=11)
    together = ro.run(prompts, n=2, sampling=sampling)
    rank0 = ro.run(prompts[:2], n=2, sampling=sampling)
    rank1 = ro.run(prompts[2:][::-1], n=2, sampling=sampling)  # another order on the other rank
    split = {(t.uid, t.index): t.response_ids for t in rank0 + rank1}
    assert len(split) == 8
    assert {(t.uid, t.index): t.response_ids for t in together} == split
    assert len({tuple(ids) for ids in split.values()}) > 1  # sampled, not one greedy answer
