"""The sglang backend's logic against an in-process stand-in for `sglang.Engine`.

SGLang itself cannot be installed here (see trainer/rollout/sglang.py); FakeSGLangEngine implements
exactly the Engine methods the backend calls, with SGLang's documented signatures and result shapes.
"""
import asyncio

import pytest
import torch

from trainer.rollout.base import GenerationRequest, SamplingParams, build_engine, resolve_engine_name
from trainer.rollout.sglang import SGLangRolloutEngine, bucket_named_tensors


class FakeSGLangEngine:
    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.calls = []
        self.weights = {}
        self.loop = None

    async def async_generate(self, prompt=None, sampling_params=None, input_ids=None, image_data=None,
                             return_logprob=False, logprob_start_len=None, top_logprobs_num=None,
                             lora_path=None, custom_logit_processor=None, stream=False):
        loop = asyncio.get_running_loop()
        assert self.loop in (None, loop), "sglang binds to the first event loop it runs on"
        self.loop = loop
        await asyncio.sleep(0)
        self.calls.append(("generate", input_ids, sampling_params, return_logprob))
        out = []
        for ids, sp in zip(input_ids, sampling_params):
            gen, finish = [], {"type": "length", "length": sp["max_new_tokens"]}
            for i in range(sp["max_new_tokens"]):
                tok = (ids[-1] + i + 1) % 50 + 10
                gen.append(tok)
                if tok in sp["stop_token_ids"]:
                    finish = {"type": "stop", "matched": tok}
                    break
            out.append({"text": "", "output_ids": gen, "meta_info": {
                "id": "x", "finish_reason": finish, "prompt_tokens": len(ids), "completion_tokens": len(gen),
                "output_token_logprobs": [(-0.1 * (k + 1), t, None) for k, t in enumerate(gen)]}})
        return out

    def update_weights_from_tensor(self, named_tensors, load_format=None, flush_cache=True):
        self.calls.append(("update", [n for n, _ in named_tensors], flush_cache))
        self.weights.update(dict(named_tensors))

    def release_memory_occupation(self, tags=None):
        self.calls.append(("release", tags))

    def resume_memory_occupation(self, tags=None):
        self.calls.append(("resume", tags))

    def flush_cache(self):
        self.calls.append(("flush",))

    def shutdown(self):
        self.calls.append(("shutdown",))


def make(config=None, model="/models/tiny"):
    return SGLangRolloutEngine.from_config(model=model, tokenizer=None, config=config or {"seed": 3},
                                           device="cuda:1", engine_factory=FakeSGLangEngine)


def test_engine_built_from_config():
    eng = make({"gpu_memory_utilization": 0.4, "max_model_len": 1024, "seed": 5})
    kw = eng.engine.kwargs
    assert kw["model_path"] == "/models/tiny" and kw["mem_fraction_static"] == 0.4
    assert kw["skip_tokenizer_init"] and kw["enable_memory_saver"] and kw["base_gpu_id"] == 1
    assert kw["context_length"] == 1024 and kw["random_seed"] == 5


def test_generate_maps_params_and_outputs():
    eng = make()
    reqs = [GenerationRequest("a", [1, 2, 3], SamplingParams(temperature=0.0, max_new_tokens=5, stop_token_ids=[16])),
            GenerationRequest("b", [40], SamplingParams(temperature=0.7, top_k=20, top_p=0.9, max_new_tokens=3, seed=9))]
    a, b = eng.generate(reqs)
    _, ids, params, logprob = eng.engine.calls[0]
    assert ids == [[1, 2, 3], [40]] and logprob is True
    assert params[0]["temperature"] == 0.0 and params[0]["stop_token_ids"] == [16] and "sampling_seed" not in params[0]
    assert params[1] == {"temperature": 0.7, "top_p": 0.9, "top_k": 20, "max_new_tokens": 3, "stop_token_ids": [],
                         "skip_special_tokens": False, "n": 1, "sampling_seed": 9}
    assert (a.output_ids, a.finish_reason) == ([14, 15, 16], "stop")
    assert a.logprobs == pytest.approx([-0.1, -0.2, -0.3])
    assert (b.output_ids, b.finish_reason, len(b.logprobs)) == ([51, 52, 53], "length", 3)
    eng.generate(reqs)  # second call on the same private loop


def test_bucketed_weight_sync_flushes_once():
    tensors = [(f"w{i}", torch.zeros(256, dtype=torch.float32)) for i in range(10)]  # 1 KiB each
    assert [len(b) for b in bucket_named_tensors(tensors, 3 * 1024)] == [3, 3, 3, 1]
    assert [len(b) for b in bucket_named_tensors([("big", torch.zeros(4096))], 1024)] == [1]
    eng = make({"update_weights_bucket_megabytes": 3 / 1024})
    eng.update_weights(iter(tensors))
    updates = [c for c in eng.engine.calls if c[0] == "update"]
    assert [len(c[1]) for c in updates] == [3, 3, 3, 1]
    assert [c[2] for c in updates] == [False, False, False, True]
    assert set(eng.engine.weights) == {n for n, _ in tensors}
    assert eng.last_stats == {"weight_buckets": 4.0, "weight_bytes": 10 * 1024.0}


def test_memory_calls():
    eng = make()
    eng.release_memory()
    eng.resume_memory(tags=["weights"])
    eng.resume_memory()
    eng.flush_cache()
    eng.shutdown()
    assert eng.engine.calls == [("release", None), ("resume", ["weights"]), ("resume", None), ("flush",), ("shutdown",)]


def test_abort_raises():
    from trainer.rollout.sglang import output_from_sglang

    req = GenerationRequest("a", [1], SamplingParams(max_new_tokens=4))
    with pytest.raises(RuntimeError, match="aborted"):
        output_from_sglang(req, {"output_ids": [], "meta_info": {"finish_reason": {"type": "abort"}}})
    out = output_from_sglang(req, {"output_ids": [5], "meta_info": {"finish_reason": {"type": "stop", "matched": 2}}})
    assert out.output_ids == [5, 2] and out.logprobs == [0.0, 0.0]


def test_auto_and_missing_sglang():
    assert resolve_engine_name("auto") == ("sglang" if torch.cuda.is_available() and
                                            __import__("importlib").util.find_spec("sglang") else "hf")
    if __import__("importlib").util.find_spec("sglang") is None:
        with pytest.raises(RuntimeError, match="optional sglang package"):
            build_engine("sglang", model="/models/tiny", tokenizer=None, config={}, device="cuda:0")


def test_multi_turn_agent_over_sglang_backend(tiny_tokenizer):
    from trainer.rollout.agent import MultiTurnRollout
    from trainer.types import PromptItem

    eng = make()
    ro = MultiTurnRollout(eng, tiny_tokenizer, {}, {"multi_turn": {"enable": False}}, {"max_response_length": 6})
    prompts = [PromptItem(uid=f"p{i}", index=i, messages=[{"role": "user", "content": "hi"}], prompt_ids=[3 + i, 7])
               for i in range(2)]
    first = ro.run(prompts, n=2, sampling=SamplingParams(max_new_tokens=6, seed=1))
    second = ro.run(prompts, n=2, sampling=SamplingParams(max_new_tokens=6, seed=1))  # same loop again
    assert [len(t.response_ids) for t in first] == [6, 6, 6, 6]
    assert [t.response_ids for t in first] == [t.response_ids for t in second]
    assert [c[0] for c in eng.engine.calls] == ["generate", "generate"]
