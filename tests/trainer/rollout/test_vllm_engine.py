"""The vllm backend's logic against an in-process stand-in for `vllm.LLM`.

vLLM itself cannot be installed here (see trainer/rollout/vllm.py). FakeLLM has the LLM methods the
backend calls with the pinned release's exact signatures (parameter names, order, kinds and
defaults); its result classes carry only attributes vLLM's have; test_vllm_conformance.py checks
both against the release's source, so they cannot drift. It also enforces the rules of the real
LLM read in its source (v1/engine/core.py, v1/executor/abstract.py, v1/worker/gpu_worker.py,
distributed/weight_transfer/ipc_engine.py):
- sleep needs enable_sleep_mode; a request while any tag sleeps never finishes (the scheduler
  resumes only once every tag is awake): the stand-in raises instead of hanging;
- wake_up of a tag that is not asleep logs a warning and wakes nothing: the stand-in raises;
- weight transfer needs weight_transfer_config and init_weight_transfer_engine; update_weights needs
  start_weight_update; a second start needs finish_weight_update; update_info must carry names,
  dtype_names, shapes and one IPC handle per name (IPCWeightTransferUpdateInfo's checks), a handle
  for this GPU (IPCWeightTransferEngine.receive_weights); a chunk that fails to load ends the session
  (gpu_worker's _end_weight_update); generating during an update, or after one that did not finish
  (layers left on the meta device by the layerwise reload), is refused: vLLM would run on them.
"""
from __future__ import annotations

import dataclasses
import types

import pytest
import torch

from trainer.rollout.base import GenerationRequest, build_engine, resolve_engine_name
from trainer.rollout.base import SamplingParams as Sampling
from trainer.rollout.vllm import VLLM_SLEEP_TAGS, VLLMRolloutEngine, ipc_update_info, output_from_vllm

UUID = "GPU-stand-in"


@dataclasses.dataclass
class Logprob:
    logprob: float
    rank: int | None = None


@dataclasses.dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


class RequestOutput:
    def __init__(self, request_id, prompt_token_ids, outputs, finished):
        self.request_id = request_id
        self.prompt_token_ids = prompt_token_ids
        self.outputs = outputs
        self.finished = finished


@dataclasses.dataclass
class SamplingParams:
    """vllm.SamplingParams with the fields the backend sets; a dataclass refuses any other keyword."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    max_tokens: int | None = 16
    logprobs: int | None = None
    detokenize: bool = True
    skip_special_tokens: bool = True


class FakeLLM:
    """vllm.LLM's calls as the pinned release declares them; generation is a toy counter."""

    def __init__(self, model, **kwargs):
        self.model = model
        self.kwargs = kwargs
        self.calls = []
        self.weights = {}
        self.sleeping_tags = set()
        self.transfer_ready = False
        self.updating = False
        self.incomplete = False  # an update started and did not finish: the weights are partly loaded

    def _asleep_check(self, what):
        if self.sleeping_tags:
            raise RuntimeError(f"{what} while {sorted(self.sleeping_tags)} sleep: the scheduler is paused (a hang)")

    def generate(self, prompts, sampling_params=None, *, use_tqdm=True, lora_request=None, priority=None,
                 tokenization_kwargs=None, mm_processor_kwargs=None):
        self._asleep_check("generate")
        if self.updating:
            raise RuntimeError("generate during an incomplete weight update: the engine is not inference-ready")
        if self.incomplete:
            raise RuntimeError("generate on partly loaded weights (an update that did not finish)")
        assert len(prompts) == len(sampling_params)
        self.calls.append(("generate", [p["prompt_token_ids"] for p in prompts], list(sampling_params), use_tqdm))
        out = []
        for i, (prompt, sp) in enumerate(zip(prompts, sampling_params)):
            ids = prompt["prompt_token_ids"]
            gen, reason, stop = [], "length", None
            for k in range(sp.max_tokens):
                tok = (ids[-1] + k + 1) % 50 + 10
                gen.append(tok)
                if tok in (sp.stop_token_ids or []):
                    reason, stop = "stop", tok
                    break
            lps = [{t: Logprob(-0.1 * (k + 1), 1)} for k, t in enumerate(gen)] if sp.logprobs is not None else None
            done = CompletionOutput(0, "", gen, None, lps, reason, stop)
            out.append(RequestOutput(str(i), ids, [done], True))
        return out

    def sleep(self, level=1, mode="abort", reset_connector=True):
        if not self.kwargs.get("enable_sleep_mode"):
            raise RuntimeError("sleep needs enable_sleep_mode=True")
        if "weights" in self.sleeping_tags:
            return  # vLLM: "Executor is already sleeping." (a warning)
        if self.sleeping_tags:
            raise RuntimeError("sleep while partly asleep (the backend never does this)")
        self.calls.append(("sleep", level))
        self.sleeping_tags = set(VLLM_SLEEP_TAGS)

    def wake_up(self, tags=None):
        wake = set(self.sleeping_tags if tags is None else tags)
        if not self.sleeping_tags or not wake <= self.sleeping_tags:
            raise RuntimeError(f"wake_up({tags}) with {sorted(self.sleeping_tags)} asleep: vLLM wakes nothing")
        self.calls.append(("wake_up", sorted(wake)))
        self.sleeping_tags -= wake
        return not self.sleeping_tags

    def init_weight_transfer_engine(self, request):
        if (self.kwargs.get("weight_transfer_config") or {}).get("backend") != "ipc":
            raise RuntimeError("Weight transfer not configured (weight_transfer_config)")
        info = request["init_info"]
        assert set(info) <= {"packed"}, info
        self.transfer_ready = True

    def start_weight_update(self):
        if not self.transfer_ready:
            raise RuntimeError("init_weight_transfer_engine first")
        if self.updating:
            raise RuntimeError("start_weight_update called while a weight update is already active")
        if "weights" in self.sleeping_tags:
            raise RuntimeError("weight update into sleeping weights")
        self.updating = self.incomplete = True
        self.calls.append(("start",))

    def update_weights(self, request):
        if not self.updating:
            raise RuntimeError("start_weight_update must be called before update_weights")
        try:
            info = request["update_info"]
            names = info["names"]
            assert len(info["dtype_names"]) == len(names) == len(info["shapes"]) == len(info["ipc_handles"]), info
            for name, dtype, shape, handle in zip(names, info["dtype_names"], info["shapes"], info["ipc_handles"]):
                if UUID not in handle:
                    raise ValueError(f"IPC handle not found for GPU UUID {UUID}. Available UUIDs: {list(handle)}")
                tensor = handle[UUID][0]  # the stand-in's "rebuild": the tensor itself
                assert str(tensor.dtype).endswith(dtype) and list(tensor.shape) == shape
                self.weights[name] = tensor
        except BaseException:
            self.updating = False  # vLLM's worker: _end_weight_update(refresh=False); the weights stay incomplete
            raise
        self.calls.append(("update", list(names)))

    def finish_weight_update(self, weight_version=None):
        if not self.updating:
            raise RuntimeError("finish_weight_update called without a matching start_weight_update")
        self.updating = self.incomplete = False
        self.calls.append(("finish",))

    def reset_prefix_cache(self, reset_running_requests=False, reset_connector=False):
        self.calls.append(("reset",))
        return True


VLLM = types.SimpleNamespace(LLM=FakeLLM, SamplingParams=SamplingParams)


def make(config=None, device="cuda:0"):
    eng = VLLMRolloutEngine.from_config(model="/models/tiny", tokenizer=None, config=config or {"seed": 3},
                                        device=device, vllm_module=VLLM)
    eng.ipc_handle = lambda t: (t, {UUID: (t,)})  # CPU tensors: the stand-in reads the tensor itself
    return eng


def test_engine_built_from_config():
    eng = make({"gpu_memory_utilization": 0.4, "max_model_len": 1024, "seed": 5, "enforce_eager": True})
    kw, llm = eng.llm.kwargs, eng.llm
    assert llm.model == "/models/tiny" and kw["gpu_memory_utilization"] == 0.4 and kw["max_model_len"] == 1024
    assert kw["seed"] == 5 and kw["enable_sleep_mode"] is True and kw["tensor_parallel_size"] == 1
    assert kw["dtype"] == "bfloat16" and kw["enforce_eager"] is True
    assert kw["weight_transfer_config"] == {"backend": "ipc"} and llm.transfer_ready
    assert "max_model_len" not in make().llm.kwargs


def test_generate_maps_params_and_outputs():
    eng = make()
    reqs = [GenerationRequest("a", [1, 2, 3], Sampling(temperature=0.0, max_new_tokens=5, stop_token_ids=[16])),
            GenerationRequest("b", [40], Sampling(temperature=0.7, top_k=20, top_p=0.9, max_new_tokens=3, seed=9))]
    a, b = eng.generate(reqs)
    _, ids, params, use_tqdm = eng.llm.calls[0]
    assert ids == [[1, 2, 3], [40]] and use_tqdm is False
    assert params[0].temperature == 0.0 and params[0].stop_token_ids == [16] and params[0].seed is None
    assert dataclasses.asdict(params[1]) == {"n": 1, "temperature": 0.7, "top_p": 0.9, "top_k": 20, "seed": 9,
                                             "stop_token_ids": [], "ignore_eos": False, "max_tokens": 3,
                                             "logprobs": 0, "detokenize": False, "skip_special_tokens": False}
    assert params[0].top_k == 0  # -1 (off) is vLLM's 0
    assert (a.output_ids, a.finish_reason) == ([14, 15, 16], "stop")
    assert a.logprobs == pytest.approx([-0.1, -0.2, -0.3])
    assert (b.output_ids, b.finish_reason, len(b.logprobs)) == ([51, 52, 53], "length", 3)
    assert eng.generate([]) == []


def test_outputs_abort_and_stop_token():
    req = GenerationRequest("a", [1], Sampling(max_new_tokens=4))
    res = RequestOutput("0", [1], [CompletionOutput(0, "", [5], None, None, "abort", None)], True)
    with pytest.raises(RuntimeError, match="finish_reason='abort'"):
        output_from_vllm(req, res)
    res.outputs = [CompletionOutput(0, "", [5, 2], None, [{5: Logprob(-1.0)}, {2: Logprob(-0.5)}], "stop", 2)]
    out = output_from_vllm(req, res)  # vLLM keeps the stop token in token_ids, with its log-prob
    assert (out.output_ids, out.logprobs, out.finish_reason) == ([5, 2], [-1.0, -0.5], "stop")


def test_a_missing_log_prob_or_stop_token_is_an_error_not_a_made_up_zero():
    """The trainer may take these log-probs as the old ones (rollout correction's bypass mode): a
    made-up 0.0 would say the sampled token had probability 1."""
    req = GenerationRequest("a", [1], Sampling(max_new_tokens=4))
    res = RequestOutput("0", [1], [CompletionOutput(0, "", [5], None, [{5: Logprob(-1.0)}], "stop", 2)], True)
    with pytest.raises(RuntimeError, match="stopped request 'a' on token 2 but its token_ids end with \\[5\\]"):
        output_from_vllm(req, res)
    res.outputs = [CompletionOutput(0, "", [5, 6], None, [{5: Logprob(-1.0)}, {7: Logprob(-2.0)}], "length")]
    with pytest.raises(RuntimeError, match="no log-prob for token 1 \\(6\\) of request 'a'"):
        output_from_vllm(req, res)
    res.outputs = [CompletionOutput(0, "", [5, 6], None, None, "length")]
    with pytest.raises(RuntimeError, match="0 log-prob positions for the 2 tokens"):
        output_from_vllm(req, res)


def test_weight_sync_is_one_session_in_buckets():
    tensors = [(f"w{i}", torch.zeros(256, dtype=torch.float32)) for i in range(10)]  # 1 KiB each
    eng = make({"update_weights_bucket_megabytes": 3 / 1024})
    eng.update_weights(iter(tensors[:4]))  # the worker sends its own buckets: one session for all
    eng.update_weights(iter(tensors[4:]))
    assert eng.updating and len(eng._sent) == 10  # handles vLLM may still read stay alive
    with pytest.raises(RuntimeError, match="flush_cache"):
        eng.generate([GenerationRequest("a", [1], Sampling(max_new_tokens=1))])
    eng.flush_cache()
    kinds = [c[0] for c in eng.llm.calls]
    assert kinds == ["start", "update", "update", "update", "update", "finish", "reset"]
    assert [len(c[1]) for c in eng.llm.calls if c[0] == "update"] == [3, 1, 3, 3]
    assert set(eng.llm.weights) == {n for n, _ in tensors} and not eng.updating and eng._sent == []
    assert eng.last_stats == {"weight_buckets": 4.0, "weight_bytes": 10 * 1024.0}
    eng.flush_cache()  # no session open: only the prefix cache
    assert [c[0] for c in eng.llm.calls][-1:] == ["reset"] and kinds.count("finish") == 1


def test_update_info_matches_the_tensors():
    kept = [torch.zeros(2, 3, dtype=torch.bfloat16), torch.zeros(4)]
    info = ipc_update_info([("a", kept[0]), ("b", kept[1])], kept, [{UUID: 1}, {UUID: 2}])
    assert info == {"names": ["a", "b"], "dtype_names": ["bfloat16", "float32"], "shapes": [[2, 3], [4]],
                    "ipc_handles": [{UUID: 1}, {UUID: 2}]}


def _generate(eng):
    return eng.generate([GenerationRequest("a", [1], Sampling(max_new_tokens=1))])


def test_a_chunk_vllm_fails_to_load_ends_the_session_and_generating_waits_for_a_whole_sync():
    eng = make()
    eng.ipc_handle = lambda t: (t, {"GPU-other": (t,)})  # no handle for vLLM's GPU: its worker refuses it
    with pytest.raises(ValueError, match="IPC handle not found"):
        eng.update_weights([("w", torch.zeros(2))])
    assert not eng.updating and not eng.llm.updating and eng._sent == []  # both sides ended the session
    with pytest.raises(RuntimeError, match="partly loaded"):
        _generate(eng)  # vLLM's layers not loaded yet would be used
    eng.ipc_handle = lambda t: (t, {UUID: (t,)})
    eng.update_weights([("w", torch.zeros(2))])
    with pytest.raises(RuntimeError, match="flush_cache"):
        _generate(eng)  # a sync that has not finished yet
    eng.flush_cache()
    assert len(_generate(eng)) == 1 and not eng.weights_incomplete


def test_a_failure_on_this_side_finishes_the_session_vllm_still_holds():
    """A tensor that cannot be shared (here: the second one) fails before vLLM sees its chunk: vLLM's
    session is still open, so the backend finishes it, or the next sync's start would be refused."""
    eng = make({"update_weights_bucket_megabytes": 1 / 1024})
    shared = []

    def flaky(t):
        if shared:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (cast to the engine's dtype)")
        shared.append(t)
        return t, {UUID: (t,)}

    eng.ipc_handle = flaky
    with pytest.raises(torch.cuda.OutOfMemoryError):
        eng.update_weights([(f"w{i}", torch.zeros(256)) for i in range(3)])
    assert not eng.updating and not eng.llm.updating and eng._sent == []
    assert [c[0] for c in eng.llm.calls] == ["start", "update", "finish"]
    with pytest.raises(RuntimeError, match="partly loaded"):
        _generate(eng)
    eng.ipc_handle = lambda t: (t, {UUID: (t,)})
    eng.update_weights([(f"w{i}", torch.zeros(256)) for i in range(3)])  # a new session starts
    eng.flush_cache()
    assert len(_generate(eng)) == 1 and [c[0] for c in eng.llm.calls][3:5] == ["start", "update"]


def test_memory_calls_weights_first_kv_cache_at_generate():
    eng = make()
    eng.resume_memory()  # nothing asleep: no call (vLLM would wake nothing and warn)
    eng.release_memory()
    eng.release_memory()  # already asleep: no call
    eng.resume_memory()  # the weights now, the KV cache when generate starts
    assert eng.asleep == {"kv_cache"} and eng.kv_cache_deferred
    eng.update_weights([("w", torch.zeros(2))])
    eng.flush_cache()
    eng.resume_memory()
    eng.generate([GenerationRequest("a", [1], Sampling(max_new_tokens=2))])
    assert [c[:2] if c[0] == "wake_up" else c[:1] for c in eng.llm.calls] == [
        ("sleep",), ("wake_up", ["weights"]), ("start",), ("update",), ("finish",), ("reset",),
        ("wake_up", ["kv_cache"]), ("generate",)]
    assert eng.asleep == set() and not eng.kv_cache_deferred


def test_memory_edges():
    eng = make()
    eng.release_memory()
    with pytest.raises(RuntimeError, match="resume_memory"):
        eng.update_weights([("w", torch.zeros(2))])
    with pytest.raises(RuntimeError, match="resume_memory"):
        eng.generate([GenerationRequest("a", [1], Sampling(max_new_tokens=1))])
    with pytest.raises(ValueError, match="unknown vllm sleep tags"):
        eng.resume_memory(tags=["cuda_graph"])
    eng.resume_memory(tags=["kv_cache", "weights"])  # explicit tags wake now, weights first
    assert [c for c in eng.llm.calls if c[0] == "wake_up"] == [("wake_up", ["weights"]), ("wake_up", ["kv_cache"])]
    eng.release_memory()
    eng.resume_memory()  # weights only
    eng.release_memory()  # from partly asleep: the KV cache wakes first (vLLM sleeps from awake)
    assert eng.llm.calls[-2:] == [("wake_up", ["kv_cache"]), ("sleep", 1)]
    eng.resume_memory()
    eng.update_weights([("w", torch.zeros(2))])
    with pytest.raises(RuntimeError, match="flush_cache"):
        eng.release_memory()
    eng.flush_cache()
    eng.shutdown()
    assert eng.llm is None


def test_stand_in_enforces_vllm_rules():
    fake = FakeLLM("/m", enable_sleep_mode=True, weight_transfer_config={"backend": "ipc"})
    with pytest.raises(RuntimeError, match="wakes nothing"):
        fake.wake_up(tags=["weights"])
    fake.sleep(level=1)
    fake.wake_up(tags=["weights"])
    with pytest.raises(RuntimeError, match="a hang"):
        fake.generate([{"prompt_token_ids": [1]}], [SamplingParams(max_tokens=1)])
    with pytest.raises(RuntimeError, match="init_weight_transfer_engine"):
        fake.start_weight_update()
    fake.init_weight_transfer_engine({"init_info": {"packed": False}})
    with pytest.raises(RuntimeError, match="start_weight_update must be called"):
        fake.update_weights({"update_info": {}})
    fake.start_weight_update()
    with pytest.raises(RuntimeError, match="already active"):
        fake.start_weight_update()
    with pytest.raises(TypeError):
        SamplingParams(max_new_tokens=3)  # not a field of vLLM's SamplingParams
    with pytest.raises(RuntimeError, match="enable_sleep_mode"):
        FakeLLM("/m").sleep()


def test_refused_without_a_gpu_or_the_package(monkeypatch):
    with pytest.raises(ValueError, match="needs a GPU"):
        build_engine("vllm", model="/models/tiny", tokenizer=None, config={}, device="cpu")
    with pytest.raises(ValueError, match="first visible GPU"):
        make(device="cuda:1")
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    with pytest.raises(ValueError, match="VLLM_ENABLE_V1_MULTIPROCESSING"):
        make()
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING")
    if __import__("importlib").util.find_spec("vllm") is None:
        with pytest.raises(RuntimeError, match=r"optional vllm package \(pip install 'rlstudio\[vllm\]'"):
            build_engine("vllm", model="/models/tiny", tokenizer=None, config={}, device="cuda:0")


def test_auto_never_picks_vllm(monkeypatch):
    from trainer.rollout import base

    monkeypatch.setattr(base, "sglang_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_engine_name("auto", "cuda") == "hf"
    assert resolve_engine_name("vllm", "cuda") == "vllm"
    with pytest.raises(ValueError, match="'vllm' needs a GPU"):
        resolve_engine_name("vllm", torch.device("cpu"))
    assert "vllm" in base.available_engines()


def test_hybrid_cycle_through_the_agent(tiny_tokenizer):
    """The worker's order (trainer/parallel/worker.py) over two steps: sync (resume, buckets, flush),
    rollout through the multi-turn agent (resume, generate, release)."""
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
        trajs = ro.run(prompts, n=2, sampling=Sampling(max_new_tokens=4, seed=1))
        assert [len(t.response_ids) for t in trajs] == [4, 4]
        eng.release_memory()
    kinds = [c[0] for c in eng.llm.calls]
    assert kinds == ["start", "update", "update", "update", "finish", "reset", "generate", "sleep",
                     "wake_up", "start", "update", "update", "update", "finish", "reset", "wake_up", "generate",
                     "sleep"]
    assert [c[1] for c in eng.llm.calls if c[0] == "wake_up"] == [["weights"], ["kv_cache"]]


def test_a_training_step_through_the_real_worker(tmp_path, monkeypatch, tiny_model_dir):
    """The trainer with rollout.name=vllm on the CPU (the GPU checks patched out for this dry run
    only) over FakeLLM: RankWorker builds the engine from the config, syncs the actor's weights in
    the worker's buckets, rolls out through the agent, sleeps, and syncs again after the update;
    the stand-in ends up with the actor's weights under their HF names."""
    import sys

    from trainer.config import apply_overrides, checks
    from trainer.loop import Trainer
    from trainer.recipes import get_recipe
    from trainer.rollout import base
    from trainer.rollout import vllm as backend
    from trainer.sinks import Emitter, build_sinks
    from trainer.tasks import arith

    built = []

    class LLM(FakeLLM):
        def __init__(self, model, **kwargs):
            super().__init__(model, **kwargs)
            built.append(self)

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=LLM, SamplingParams=SamplingParams))
    monkeypatch.setattr(backend, "cuda_ipc_handle", lambda t, dtype=None: (t.detach().clone(), {UUID: (t.detach().clone(),)}))
    original_check, resolve = checks._check_multi_turn, base.resolve_engine_name

    def allow_vllm_on_cpu(cfg):
        try:
            original_check(cfg)
        except checks.ConfigError as exc:
            if "vllm needs a GPU" not in str(exc):
                raise

    monkeypatch.setattr(checks, "_check_multi_turn", allow_vllm_on_cpu)
    monkeypatch.setattr(base, "resolve_engine_name", lambda name, device=None: name if name == "vllm"
                        else resolve(name, device))
    arith.main([str(tmp_path / "data"), "--train", "64", "--test", "4", "--sft", "0"])
    cfg = apply_overrides(get_recipe("cpu_smoke"), {
        "actor_rollout_ref.model.path": str(tiny_model_dir), "data.train_files": str(tmp_path / "data" / "train.jsonl"),
        "data.train_batch_size": 2, "actor_rollout_ref.rollout.n": 2, "actor_rollout_ref.actor.ppo_mini_batch_size": 2,
        "actor_rollout_ref.rollout.name": "vllm", "actor_rollout_ref.rollout.response_length": 8,
        "data.max_response_length": 8, "actor_rollout_ref.rollout.update_weights_bucket_megabytes": 1,
        "trainer.device": "cpu", "trainer.launcher": "local", "trainer.total_training_steps": 1,
        "trainer.save_freq": -1, "trainer.default_local_dir": str(tmp_path / "run"), "trainer.logger": ["jsonl"]})
    (tmp_path / "run").mkdir()
    emitter = Emitter(build_sinks(["jsonl"], out_dir=tmp_path / "run", config=cfg))
    trainer = Trainer(cfg, emitter=emitter)
    try:
        trainer.setup()
        worker = trainer.group.worker
        assert worker.engine_name == "vllm" and isinstance(worker.engine, VLLMRolloutEngine)
        metrics = trainer.train_step(1)
        (llm,) = built
        actor = {n: p.detach() for n, p in worker.actor.model.named_parameters()}
        assert set(llm.weights) == set(actor)
        assert all(torch.equal(llm.weights[n].to(actor[n].dtype), actor[n]) for n in actor)
    finally:
        trainer.close()
        emitter.close()
    kinds = [c[0] for c in llm.calls]
    first_generate = kinds.index("generate")
    assert kinds[:first_generate] == ["start", *["update"] * kinds[:first_generate].count("update"), "finish", "reset"]
    assert kinds[first_generate:first_generate + 3] == ["generate", "sleep", "wake_up"]
    assert kinds[-2:] == ["finish", "reset"] and llm.calls[first_generate + 2] == ("wake_up", ["weights"])
    assert metrics["perf/weight_sync_buckets"] >= 1 and llm.kwargs["gpu_memory_utilization"] == 0.5
    assert worker.engine is None or worker.engine.llm is None  # trainer.close() shut the engine down
