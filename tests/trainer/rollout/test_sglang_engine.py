"""The sglang backend's logic against an in-process stand-in for `sglang.Engine`.

SGLang itself cannot be installed here (see trainer/rollout/sglang.py). FakeSGLangEngine has the
Engine methods the backend calls with the pinned release's exact signatures (parameter names, order,
kinds and defaults) and result shapes; test_sglang_conformance.py checks it against the release's
source, so it cannot drift. It also enforces two rules of the real Engine (read in its source):
every call runs on the Engine's own loop (its sync methods run `self.loop.run_until_complete`, and
the first loop a call runs on is the only one whose replies are read), and a memory region can only
be resumed after it was released (the scheduler `remove`s the tag from its set).
"""
import asyncio

import pytest
import torch

from trainer.rollout.base import GenerationRequest, SamplingParams, build_engine, resolve_engine_name
from trainer.rollout.common import bucket_named_tensors
from trainer.rollout.sglang import SGLANG_MEMORY_TAGS, SGLangRolloutEngine


class FakeSGLangEngine:
    """sglang.Engine's calls as the pinned release declares them; generation is a toy counter."""

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.calls = []
        self.weights = {}
        self.loop = asyncio.new_event_loop()  # Engine keeps the loop it was built on
        self.handle_loop = None  # the loop the TokenizerManager reads replies on (the first one used)
        self.offload_tags = set()

    def _bind(self):
        loop = asyncio.get_running_loop()
        if self.handle_loop is None:
            self.handle_loop = loop
        if loop is not self.handle_loop:
            raise RuntimeError("sglang call on a second event loop: its replies are read on the first (a hang)")

    async def _control(self, call, check=None):
        self._bind()
        if check is not None:
            check()
        self.calls.append(call)

    def _resident(self, *tags):
        off = self.offload_tags.intersection(tags)
        if off:
            raise RuntimeError(f"memory released: {sorted(off)}")

    async def async_generate(self, prompt=None, sampling_params=None, input_ids=None, image_data=None,
                             audio_data=None, video_data=None, mm_hashes=None, mm_content_hashes=None,
                             return_logprob=False, logprob_start_len=None, top_logprobs_num=None,
                             token_ids_logprob=None, lora_path=None, custom_logit_processor=None,
                             require_reasoning=False, return_hidden_states=False, return_routed_experts=False,
                             routed_experts_start_len=0, stream=False, bootstrap_host=None, bootstrap_port=None,
                             bootstrap_room=None, routed_dp_rank=None, disagg_prefill_dp_rank=None, kv_hints=None,
                             data_parallel_rank=None, external_trace_header=None, rid=None, session_params=None,
                             priority=None, session_id=None, *, cache_salt=None):
        self._bind()
        self._resident("weights", "kv_cache")
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
            meta = {"id": "x", "finish_reason": finish, "prompt_tokens": len(ids), "completion_tokens": len(gen)}
            if return_logprob:
                meta["output_token_logprobs"] = [(-0.1 * (k + 1), t, None) for k, t in enumerate(gen)]
            res = {"output_ids": gen, "meta_info": meta}
            if not self.kwargs.get("skip_tokenizer_init"):
                res["text"] = ""
            out.append(res)
        return out

    def update_weights_from_tensor(self, named_tensors, load_format=None, flush_cache=True):
        self.loop.run_until_complete(self._control(("update", [n for n, _ in named_tensors], flush_cache),
                                                   lambda: self._resident("weights")))
        self.weights.update(dict(named_tensors))
        return True, "Success"

    def release_memory_occupation(self, tags=None):
        tags = list(tags or SGLANG_MEMORY_TAGS)
        self.loop.run_until_complete(self._control(("release", tags)))
        self.offload_tags.update(tags)

    def resume_memory_occupation(self, tags=None):
        tags = list(tags or SGLANG_MEMORY_TAGS)
        self.loop.run_until_complete(self._control(("resume", tags)))
        for tag in tags:
            self.offload_tags.remove(tag)  # KeyError for a region not released, as SGLang's scheduler

    def flush_cache(self):
        return self.loop.run_until_complete(self._control(("flush",)))

    def shutdown(self):
        self.calls.append(("shutdown",))
        self.loop.close()  # the stand-in's own cleanup (SGLang kills its subprocesses)


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
    eng.generate(reqs)  # second call, on the same (the Engine's) loop
    assert eng.engine.handle_loop is eng.engine.loop


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
    eng.resume_memory()  # nothing released yet: no call (SGLang's resume would raise KeyError)
    eng.release_memory()
    eng.release_memory()  # already released: no call
    eng.resume_memory(tags=["weights"])
    eng.resume_memory()  # the rest only
    eng.flush_cache()
    eng.shutdown()
    assert eng.engine.calls == [("release", ["kv_cache", "weights", "cuda_graph"]), ("resume", ["weights"]),
                                ("resume", ["kv_cache", "cuda_graph"]), ("flush",), ("shutdown",)]


def test_stand_in_enforces_sglang_rules():
    """The stand-in fails the way SGLang would: resume of a region not released, a second loop."""
    fake = FakeSGLangEngine(skip_tokenizer_init=True)
    with pytest.raises(KeyError):
        fake.resume_memory_occupation()
    fake.release_memory_occupation(tags=["weights"])
    with pytest.raises(RuntimeError, match="memory released"):
        fake.update_weights_from_tensor([("w", torch.zeros(1))])
    fake.resume_memory_occupation(tags=["weights"])
    assert fake.update_weights_from_tensor([("w", torch.zeros(1))]) == (True, "Success")
    other = asyncio.new_event_loop()
    try:
        with pytest.raises(RuntimeError, match="second event loop"):
            other.run_until_complete(fake.async_generate(input_ids=[[1]], sampling_params=[
                {"max_new_tokens": 1, "stop_token_ids": []}]))
    finally:
        other.close()


def test_failed_weight_update_raises():
    eng = make()
    eng.engine.update_weights_from_tensor = lambda named_tensors, load_format=None, flush_cache=True: (
        False, "shape mismatch for w0")
    with pytest.raises(RuntimeError, match="shape mismatch for w0"):
        eng.update_weights([("w0", torch.zeros(4))])


def test_hybrid_cycle_through_the_agent(tiny_tokenizer):
    """The worker's order (trainer/parallel/worker.py) over two steps: sync (resume, buckets, flush),
    rollout through the multi-turn agent (resume, generate, release), sync again. On SGLang every call
    must land on the Engine's loop and every resume must follow a release."""
    from trainer.rollout.agent import MultiTurnRollout
    from trainer.types import PromptItem

    eng = make({"update_weights_bucket_megabytes": 1 / 1024})
    ro = MultiTurnRollout(eng, tiny_tokenizer, {}, {"multi_turn": {"enable": False}}, {"max_response_length": 4})
    prompts = [PromptItem(uid="p0", index=0, messages=[{"role": "user", "content": "hi"}], prompt_ids=[3, 7])]
    weights = [(f"w{i}", torch.zeros(256)) for i in range(3)]
    for _ in range(2):
        eng.resume_memory()
        eng.update_weights(weights)
        eng.flush_cache()
        eng.resume_memory()
        assert len(ro.run(prompts, n=2, sampling=SamplingParams(max_new_tokens=4, seed=1))) == 2
        eng.release_memory()
    kinds = [c[0] for c in eng.engine.calls]
    assert kinds == ["update", "update", "update", "flush", "generate", "release",
                     "resume", "update", "update", "update", "flush", "generate", "release"]
    assert eng.engine.handle_loop is eng.engine.loop


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


def _cuda_and_sglang_everywhere(monkeypatch):
    """Make this machine look like a GPU node with sglang installed, whatever it has."""
    from trainer.rollout import base

    monkeypatch.setattr(base, "sglang_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)


@pytest.mark.parametrize("device", ["cpu", torch.device("cpu")])
def test_auto_is_hf_on_the_cpu_even_with_sglang_and_a_gpu(monkeypatch, device):
    """Security review F1: a CPU run (given no GPU) must never resolve auto to sglang, which would
    start SGLang on GPU 0 of whatever the process can see."""
    _cuda_and_sglang_everywhere(monkeypatch)
    asked = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: asked.append(1) or True)
    assert resolve_engine_name("auto", device) == "hf"
    assert resolve_engine_name("hf", device) == "hf"
    assert asked == []  # CUDA is not even asked about on the CPU
    with pytest.raises(ValueError, match="sglang.*needs a GPU"):
        resolve_engine_name("sglang", device)
    with pytest.raises(ValueError, match="needs a GPU"):
        build_engine("sglang", model="/models/tiny", tokenizer=None, config={}, device=device)
    from trainer.rollout.base import get_engine_class
    from trainer.rollout.hf import HFRolloutEngine

    assert get_engine_class("auto", device) is HFRolloutEngine


@pytest.mark.parametrize("device", ["cuda", "cuda:0", torch.device("cuda", 0), "auto", None])
def test_auto_is_sglang_on_a_gpu_with_sglang(monkeypatch, device):
    _cuda_and_sglang_everywhere(monkeypatch)
    assert resolve_engine_name("auto", device) == "sglang"
    assert resolve_engine_name("hf", device) == "hf"
    from trainer.rollout import base

    monkeypatch.setattr(base, "sglang_available", lambda: False)
    assert resolve_engine_name("auto", device) == "hf"


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
