"""trainer.playground on the tiny model: the streaming engine's chunks add up to the engine's own
answer, its deltas add up to the turn's text, a stop between chunks ends it, a seeded answer is the same
every time, and two targets answer side by side (one failing does not stop the other)."""
import pytest

from trainer.playground import ChatSettings, Stopped, StreamingEngine, Target, run_chat


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from trainer.models.tiny import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model", preset="smoke", seed=0)


@pytest.fixture(scope="module")
def engine_and_tokenizer(tiny):
    from trainer.evaluate import load_policy
    from trainer.models.hf_folder import load_tokenizer
    from trainer.rollout.base import build_engine

    tok = load_tokenizer(str(tiny), model_path=str(tiny))
    model = load_policy(str(tiny), None)
    return build_engine("hf", model=model, tokenizer=tok, config={}, device="cpu"), tok


def _req(tok, n, **sampling):
    from trainer.rollout.base import GenerationRequest, SamplingParams

    ids = tok("Tom has 3 apples and buys 4 more.", add_special_tokens=False)["input_ids"]
    return GenerationRequest("r", ids, SamplingParams(max_new_tokens=n, **sampling))


def test_chunks_add_up_to_the_engines_own_greedy_answer(engine_and_tokenizer):
    inner, tok = engine_and_tokenizer
    whole = inner.generate([_req(tok, 40, temperature=0.0)])[0]
    texts = []
    streaming = StreamingEngine(inner, tokenizer=tok, on_text=lambda turn, text, reset: texts.append((turn, text, reset)),
                                should_stop=lambda: False)
    out = streaming.generate([_req(tok, 40, temperature=0.0)])[0]
    assert out.output_ids == whole.output_ids and out.finish_reason == whole.finish_reason
    assert streaming.tokens == len(out.output_ids)
    assert not any(reset for _, _, reset in texts) and {turn for turn, _, _ in texts} == {0}
    assert "".join(t for _, t, _ in texts) == tok.decode(out.output_ids, skip_special_tokens=False)
    if len(out.output_ids) > 2:
        assert len(texts) >= 2  # it came in pieces: 2, 4, 8, ... tokens


def test_a_stop_between_chunks_ends_the_turn(engine_and_tokenizer):
    inner, tok = engine_and_tokenizer
    calls = []

    def should_stop():
        calls.append(1)
        return len(calls) > 2  # after two chunks (2 + 4 tokens)

    streaming = StreamingEngine(inner, tokenizer=tok, on_text=lambda *a: None, should_stop=should_stop)
    with pytest.raises(Stopped):
        streaming.generate([_req(tok, 200, temperature=1.0, seed=3)])
    assert streaming.tokens <= 6


def test_seeded_answers_repeat_and_targets_answer_side_by_side(tiny):
    msgs = [{"role": "user", "content": "What is 2 + 3?"}]
    settings = ChatSettings(temperature=1.0, seed=11, max_new_tokens=30)
    first = run_chat([Target(key="a", model_path=str(tiny)), Target(key="b", model_path=str(tiny))],
                     {"a": msgs, "b": msgs}, settings, emit=lambda e: None, should_stop=lambda: False)
    assert first["a"]["type"] == first["b"]["type"] == "done"
    assert first["a"]["turns"] == first["b"]["turns"]  # the same model and seed on two threads
    events = []
    broken = Target(key="b", model_path=str(tiny), step_path=str(tiny / "no-such-step"))
    again = run_chat([Target(key="a", model_path=str(tiny)), broken], {"a": msgs, "b": msgs}, settings,
                     emit=events.append, should_stop=lambda: False)
    assert again["a"]["turns"] == first["a"]["turns"]
    assert again["b"]["type"] == "error" and any(e["type"] == "error" and e["target"] == "b" for e in events)
    assert any(e["type"] == "done" and e["target"] == "a" for e in events)


def test_stopped_before_anything_is_generated(tiny):
    msgs = [{"role": "user", "content": "hi"}]
    events = []
    out = run_chat([Target(key="a", model_path=str(tiny))], {"a": msgs}, ChatSettings(max_new_tokens=8),
                   emit=events.append, should_stop=lambda: True)
    assert out["a"]["type"] == "stopped" and not [e for e in events if e["type"] == "delta"]


def test_a_lora_checkpoint_answers_as_its_export(tmp_path, tiny_model_dir, demo_data_dir):
    """A LoRA run's step-1 checkpoint (adapter weights only): the playground merges the adapter with the
    run's own LoRA settings, and answers greedily exactly as the exported (merged) model folder does."""
    from tests.trainer.parallel.test_lora_fsdp import cfg_dict as lora_cfg_dict
    from tests.trainer.parallel.test_lora_fsdp import step
    from trainer import checkpoint as ckpt
    from trainer.export import export_checkpoint
    from trainer.parallel.group import LocalWorkerGroup

    d = lora_cfg_dict(tiny_model_dir, demo_data_dir / "train.jsonl")
    d["actor_rollout_ref"]["actor"]["optim"]["lr"] = 1e-2
    group = LocalWorkerGroup(d)
    try:
        step(group, 1)
        ckpt.save_checkpoint(tmp_path / "run", 1, write_actor=lambda p: group.call("save", path=str(p)),
                             loader_state={}, trainer_state={}, config=d)
    finally:
        group.shutdown()
    step1 = ckpt.step_dir(tmp_path / "run", 1)
    assert all(".lora_" in k for k in ckpt.read_actor_model(step1))
    export_checkpoint(d, step1, tmp_path / "out")
    msgs = [{"role": "user", "content": "What is 2 + 3?"}]
    settings = ChatSettings(temperature=0.0, max_new_tokens=20)
    targets = [Target(key="a", model_path=str(tiny_model_dir), step_path=str(step1), run_config=d),
               Target(key="b", model_path=str(tmp_path / "out" / "huggingface")),
               Target(key="c", model_path=str(tiny_model_dir))]
    out = run_chat(targets, {"a": msgs, "b": msgs, "c": msgs}, settings, emit=lambda e: None,
                   should_stop=lambda: False)
    assert {out[k]["type"] for k in "abc"} == {"done"}, out
    assert out["a"]["turns"] == out["b"]["turns"]
    # without the run's config the adapter-only checkpoint is refused, not silently the base model
    plain = run_chat([Target(key="a", model_path=str(tiny_model_dir), step_path=str(step1))], {"a": msgs},
                     settings, emit=lambda e: None, should_stop=lambda: False)
    assert plain["a"]["type"] == "error" and "LoRA" in plain["a"]["error"]


class _ScriptedInner:
    """An inner engine that writes fixed assistant turns (a tool call, then an answer) as token ids,
    continuing a turn across the streaming engine's chunk calls (it tests the bookkeeping, not a model)."""

    def __init__(self, tok, texts):
        self.turns = [tok.encode(t, add_special_tokens=False) for t in texts]
        self.turn, self.start, self.expect = -1, 0, None

    def generate(self, requests):
        from trainer.rollout.base import GenerationOutput

        [r] = requests
        if len(r.prompt_ids) != self.expect:  # a new assistant turn (the prompt grew by a tool reply)
            self.turn, self.start = self.turn + 1, len(r.prompt_ids)
        done = len(r.prompt_ids) - self.start
        out, reason = [], "length"
        for t in self.turns[self.turn][done: done + r.sampling.max_new_tokens]:
            out.append(t)
            if t in r.sampling.stop_token_ids:
                reason = "stop"
                break
        self.expect = len(r.prompt_ids) + len(out)
        return [GenerationOutput(r.request_id, out, [0.0] * len(out), reason)]

    def release_memory(self):
        pass

    def resume_memory(self):
        pass

    def flush_cache(self):
        pass


def test_a_tool_call_and_its_reply_are_reported_between_streamed_turns(tiny):
    from trainer.models.hf_folder import load_tokenizer
    from trainer.playground import _ReportingTool
    from trainer.rollout.agent import MultiTurnRollout
    from trainer.rollout.base import SamplingParams
    from trainer.tools import build_tools
    from trainer.types import PromptItem

    tok = load_tokenizer(str(tiny), model_path=str(tiny))
    call = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "12+34"}}\n</tool_call>'
    events = []
    streaming = StreamingEngine(_ScriptedInner(tok, [call + "<|im_end|>", "#### 46<|im_end|>"]), tokenizer=tok,
                                on_text=lambda turn, text, reset: events.append(("text", turn, text)),
                                should_stop=lambda: False)
    tools = {n: _ReportingTool(t, lambda name, args, result: events.append(("tool", streaming.turn, name, result)))
             for n, t in build_tools(["calculator"]).items()}
    ro = MultiTurnRollout(streaming, tok, tools, {"multi_turn": {"enable": True, "max_turns": 3}},
                          {"max_response_length": 128})
    streaming.stop_ids, streaming.keep_ids = set(ro.stop_ids), {ro.close_id}
    msgs = [{"role": "user", "content": "What is 12+34?"}]
    schemas = [t.schema for t in tools.values()]
    ids = tok(tok.apply_chat_template(msgs, tools=schemas, add_generation_prompt=True, tokenize=False),
              add_special_tokens=False)["input_ids"]
    [traj] = ro.run([PromptItem(uid="p", index=0, messages=msgs, prompt_ids=ids, tools=schemas)], n=1,
                    sampling=SamplingParams(temperature=0.0, max_new_tokens=64))
    ro.close()
    assert traj.tool_calls == 1 and traj.finish_reason == "stop"
    turn0 = "".join(e[2] for e in events if e[0] == "text" and e[1] == 0)
    turn1 = "".join(e[2] for e in events if e[0] == "text" and e[1] == 1)
    assert turn0 == call and turn1 == "#### 46"
    assert ("tool", 0, "calculator", "46") in events
    kinds = [e[0] if e[0] == "tool" else f"text{e[1]}" for e in events]
    assert kinds.index("tool") > max(i for i, k in enumerate(kinds) if k == "text0")  # after the call's text
    assert kinds.index("tool") < kinds.index("text1")  # before the answer
