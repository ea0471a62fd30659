"""A multi-turn rollout in each family's real format (tests/fixtures/families.py) with a scripted engine.

The engine replays each family's own tool-call text as token ids: the call is parsed by the family's
parser, the tool runs, its reply and the next generation prompt are appended as template deltas, and
the answer ends at the family's end of turn. The trajectory must be exactly the ids the engine saw,
with loss mask 1 on the generated ids and nowhere else. SFT on the same conversation gives the same
tokens and mask.
"""
from __future__ import annotations

import pytest

from tests.fixtures import families as F
from trainer import sft
from trainer.data.dataset import template_prompt
from trainer.rollout.agent import MultiTurnRollout
from trainer.rollout.base import GenerationOutput, RolloutEngine, SamplingParams
from trainer.tools import build_tools
from trainer.types import PromptItem

# What a model of each family writes: the tool call, then the answer after the reply.
CALL = {
    "qwen2.5": '<tool_call>\n{"name": "calculator", "arguments": {"expression": "12+34"}}\n</tool_call><|im_end|>',
    "qwen3": '<think>\nAdd them with the tool.\n</think>\n\n<tool_call>\n{"name": "calculator", "arguments": '
             '{"expression": "12+34"}}\n</tool_call><|im_end|>',
    "llama3": '{"name": "calculator", "parameters": {"expression": "12+34"}}<|eot_id|>',
    # Plain ChatML has no tool format of its own: the system prompt asks for Hermes blocks.
    "chatml": '<tool_call>\n{"name": "calculator", "arguments": {"expression": "12+34"}}\n</tool_call><|im_end|>',
}
ANSWER = {"qwen2.5": "#### 46<|im_end|>", "qwen3": "<think>\n\n</think>\n\n#### 46<|im_end|>",
          "llama3": "#### 46<|eot_id|>", "chatml": "#### 46<|im_end|>"}
PARSER = {"qwen2.5": "qwen25", "qwen3": "qwen25", "llama3": "llama3", "chatml": "hermes"}
END = {"qwen2.5": "<|im_end|>", "qwen3": "<|im_end|>", "llama3": "<|eot_id|>", "chatml": "<|im_end|>"}
REPLY = {"qwen2.5": "<|im_start|>user\n<tool_response>\n46\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
         "llama3": "<|start_header_id|>ipython<|end_header_id|>\n\n46<|eot_id|>"
                   "<|start_header_id|>assistant<|end_header_id|>\n\n",
         "chatml": "<|im_start|>tool\n46<|im_end|>\n<|im_start|>assistant\n"}
REPLY["qwen3"] = REPLY["qwen2.5"]


class ScriptedEngine(RolloutEngine):
    """Replays fixed id lists per turn; honours stop ids and max_new_tokens; records every request."""

    def __init__(self, turns: list[list[int]]):
        self.turns, self.requests, self.outputs = turns, [], []

    @classmethod
    def from_config(cls, **kw):
        raise NotImplementedError

    def generate(self, requests):
        outs = []
        for r in requests:
            ids = self.turns[sum(q.request_id == r.request_id for q in self.requests)]
            self.requests.append(r)
            out, reason = [], "length"
            for t in ids[: r.sampling.max_new_tokens]:
                out.append(t)
                if t in r.sampling.stop_token_ids:
                    reason = "stop"
                    break
            self.outputs.append(out)
            outs.append(GenerationOutput(r.request_id, out, [-0.25] * len(out), reason))
        return outs

    def update_weights(self, named_tensors):
        pass

    def release_memory(self):
        pass

    def resume_memory(self):
        pass

    def flush_cache(self):
        pass


def _enc(tok, text):
    return tok.encode(text, add_special_tokens=False)


def _prompt(tok, tools):
    msgs = [{"role": "system", "content": "Use the calculator tool, then answer as '#### <number>'."},
            {"role": "user", "content": "What is 12+34?"}]
    schemas = [t.schema for t in tools.values()]
    return PromptItem(uid="u0", index=0, messages=msgs, prompt_ids=template_prompt(tok, msgs, schemas),
                      data_source="arith", ground_truth=46, tools=schemas)


def _rollout(family, turns, **mt):
    tok = F.tokenizer(family)
    tools = build_tools(["calculator"])
    engine = ScriptedEngine(turns)
    cfg = {"multi_turn": {"enable": True, "max_turns": 3, "format": PARSER[family], **mt}}
    agent = MultiTurnRollout(engine, tok, tools, cfg, {"max_response_length": 256})
    prompt = _prompt(tok, tools)
    [traj] = agent.run([prompt], n=1, sampling=SamplingParams(temperature=0, max_new_tokens=64))
    return tok, engine, agent, traj


@pytest.mark.parametrize("family", F.FAMILIES)
def test_tool_call_rollout(family):
    tok0 = F.tokenizer(family)
    tok, engine, agent, traj = _rollout(family, [_enc(tok0, CALL[family]), _enc(tok0, ANSWER[family])])
    ids = F.special_ids(family)
    end = ids[END[family]]
    # The family's stop tokens reach the engine: its end of turn (and Llama's <|eom_id|>).
    stops = set(engine.requests[0].sampling.stop_token_ids)
    assert end in stops and (family != "llama3" or ids["<|eom_id|>"] in stops)
    # Parsed and executed; the transcript keeps the arguments as an object.
    assert (traj.num_turns, traj.tool_calls, traj.tool_errors, traj.finish_reason) == (2, 1, 0, "stop")
    call = traj.messages[2]
    assert call["tool_calls"][0]["function"] == {"name": "calculator", "arguments": {"expression": "12+34"}}
    if family == "qwen3":
        assert call["content"] == "<think>\nAdd them with the tool.\n</think>"
    assert traj.messages[3] == {"role": "tool", "tool_call_id": "call_1_0", "name": "calculator", "content": "46"}
    # Exactly the ids the engine saw: each request's prompt is the trajectory so far, and its output
    # follows verbatim; mask 1 on the outputs, 0 on everything between them.
    seq = traj.prompt_ids + traj.response_ids
    mask = [0] * len(traj.prompt_ids) + traj.loss_mask
    assert len(engine.requests) == 2
    for req, out in zip(engine.requests, engine.outputs):
        n = len(req.prompt_ids)
        assert seq[:n] == req.prompt_ids and seq[n:n + len(out)] == out
        assert mask[n:n + len(out)] == [1] * len(out)
    first, second = engine.outputs
    assert sum(traj.loss_mask) == len(first) + len(second) and seq[-len(second):] == second
    assert traj.rollout_logprobs == [(-0.25 if m else 0.0) for m in traj.loss_mask]
    # The call turn stops at the family's end (Hermes: at </tool_call>, one call per turn).
    stop_at = ids["</tool_call>"] if family != "llama3" else end
    assert first[-1] == stop_at and second[-1] == end
    delta = tok.decode(seq[len(engine.requests[0].prompt_ids) + len(first):len(engine.requests[1].prompt_ids)],
                       skip_special_tokens=False)
    assert delta == (f"{END[family]}\n" if family != "llama3" else "") + REPLY[family]


def test_llama3_call_ending_in_eom_gets_no_eot():
    tok = F.tokenizer("llama3")
    ids = F.special_ids("llama3")
    call = _enc(tok, '<|python_tag|>{"name": "calculator", "parameters": {"expression": "12+34"}}<|eom_id|>')
    tok, engine, _, traj = _rollout("llama3", [call, _enc(tok, ANSWER["llama3"])])
    assert engine.outputs[0][-1] == ids["<|eom_id|>"] and traj.tool_calls == 1
    second_prompt = engine.requests[1].prompt_ids
    assert tok.decode(second_prompt[len(engine.requests[0].prompt_ids):], skip_special_tokens=False) == (
        '<|python_tag|>{"name": "calculator", "parameters": {"expression": "12+34"}}<|eom_id|>' + REPLY["llama3"])


def test_a_parser_that_cannot_read_the_template_is_refused():
    tok = F.tokenizer("llama3")
    with pytest.raises(ValueError, match="multi_turn.format=llama3"):
        MultiTurnRollout(ScriptedEngine([]), tok, build_tools(["calculator"]),
                         {"multi_turn": {"enable": True, "format": "hermes"}}, {})


@pytest.mark.parametrize("family", ["qwen2.5", "qwen3", "llama3"])
def test_sft_example_is_the_trajectory_of_the_same_conversation(family):
    """An SFT example and a rollout of the same conversation agree token for token and on the mask."""
    tok = F.tokenizer(family)
    tools = build_tools(["calculator"])
    prompt = _prompt(tok, tools)
    convo = prompt.messages + [
        {"role": "assistant", "content": "",
         "tool_calls": [{"type": "function", "function": {"name": "calculator", "arguments": {"expression": "12+34"}}}]},
        {"role": "tool", "name": "calculator", "content": "46"},
        {"role": "assistant", "content": "#### 46"}]
    ex = sft.build_example(tok, convo, prompt.tools)
    # The engine emits exactly the example's trained runs (two calls allowed: no stop at </tool_call>).
    runs, cur = [], []
    for i, m in zip(ex.input_ids, ex.loss_mask):
        if m:
            cur.append(i)
        elif cur:
            runs, cur = runs + [cur], []
    runs += [cur] if cur else []
    _, engine, _, traj = _rollout(family, runs, max_parallel_calls=2)
    n = len(traj.prompt_ids + traj.response_ids)
    assert traj.prompt_ids + traj.response_ids == ex.input_ids[:n]
    assert [0] * len(traj.prompt_ids) + traj.loss_mask == ex.loss_mask[:n]
    assert ex.input_ids[n:] == tok.encode("\n", add_special_tokens=False) * (family != "llama3")


def test_qwen3_non_thinking_rollout():
    """data.apply_chat_template_kwargs={enable_thinking: false}: the prompt and every later generation
    prompt end in the empty think block, so the model's turns start after it."""
    tok = F.tokenizer("qwen3")
    tools = build_tools(["calculator"])
    call = _enc(tok, CALL["qwen2.5"])
    engine = ScriptedEngine([call, _enc(tok, "#### 46<|im_end|>")])
    kwargs = {"enable_thinking": False}
    agent = MultiTurnRollout(engine, tok, tools, {"multi_turn": {"enable": True, "format": "qwen25"}},
                             {"max_response_length": 256, "apply_chat_template_kwargs": kwargs})
    msgs = _prompt(tok, tools).messages
    schemas = [t.schema for t in tools.values()]
    prompt = PromptItem(uid="u0", index=0, messages=msgs, prompt_ids=template_prompt(tok, msgs, schemas, kwargs),
                        tools=schemas)
    [traj] = agent.run([prompt], n=1, sampling=SamplingParams(temperature=0, max_new_tokens=64))
    think = "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    assert [tok.decode(r.prompt_ids, skip_special_tokens=False).endswith(think) for r in engine.requests] == [True] * 2
    assert traj.tool_calls == 1 and traj.messages[-1]["content"] == "#### 46"
