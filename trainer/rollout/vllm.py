"""The `vllm` rollout backend: the engine interface over vLLM's offline `vllm.LLM` (optional, GPU only).

NOT YET RUN AGAINST A LIVE vLLM (no GPU has run it; docs/distributed.md). vLLM cannot be installed on
the CPU machines this project is built and tested on. What is checked without a GPU:
tests/trainer/rollout/test_vllm_conformance.py reads the pinned release's source (the `vllm` extra's
version, fetched as a wheel, parsed with `ast`) and checks every LLM method, keyword, SamplingParams
field, result attribute, finish reason, sleep tag and weight-transfer field used here against it,
and the stand-in `LLM` the logic is tested on (tests/trainer/rollout/test_vllm_engine.py) against the
same parse. The calls made (vLLM 0.34's offline API, the LLM in the worker's own process as verl's
hybrid engine does; its engine core runs in a child process, vLLM's default):

    llm = vllm.LLM(model=..., dtype=..., seed=..., gpu_memory_utilization=..., tensor_parallel_size=1,
                   enable_sleep_mode=True, enforce_eager=..., max_model_len=...,
                   logprobs_mode="processed_logprobs", weight_transfer_config={"backend": "ipc"})
    llm.init_weight_transfer_engine({"init_info": {"packed": False}})              once, when built
    llm.generate([{"prompt_token_ids": [...]}, ...], [vllm.SamplingParams(...), ...], use_tqdm=False)
        -> [RequestOutput], each .outputs[0] a CompletionOutput: .token_ids (a stop token
           included), .logprobs (one {token_id: Logprob} per position, a list or vLLM's FlatLogprobs;
           Logprob.logprob), .finish_reason, .stop_reason
    llm.sleep(level=1)  /  llm.wake_up(tags=["weights"]), then llm.wake_up(tags=["kv_cache"])
    llm.start_weight_update(); llm.update_weights({"update_info": {names, dtype_names, shapes,
        ipc_handles}}) per bucket; llm.finish_weight_update(); llm.reset_prefix_cache()

Weights: vLLM 0.34 documents a weight-transfer API for RL (`weight_transfer_config`, and on the LLM
`init_weight_transfer_engine` / `start_weight_update` / `update_weights` / `finish_weight_update`,
which reach the worker through `collective_rpc`). Its `ipc` backend fits a trainer and an engine on
the same GPU: each tensor goes as a CUDA IPC handle ({GPU uuid: torch's rebuild arguments}), the
worker rebuilds it and calls the model's `load_weights` (HF names). vLLM's own IPC sender keeps the
tensors alive until `finish_weight_update`, because the worker may buffer them until a layer is
complete; so does this backend: a sync is one session, opened by the first `update_weights` and
finished by `flush_cache` (the worker calls it after the last bucket), which then resets the prefix
cache. Floating tensors are sent in the engine's dtype (half the bytes of the actor's float32).

Memory: `enable_sleep_mode=True`; `release_memory` is `sleep(level=1)` (weights to host memory, KV
cache dropped); `resume_memory` wakes the weights first and the KV cache only when the next
`generate` starts (verl's order: the weight sync runs without the KV pool). Rules read from vLLM's
source that the stand-in enforces: a request while anything sleeps never finishes (the scheduler
resumes only when every tag is awake, and `LLM.generate` waits for its requests), so the backend
wakes the KV cache first and refuses to generate without the weights; `wake_up` with a tag that is
not asleep logs a warning and wakes nothing (the backend keeps the sleeping tags and wakes only
those); `update_weights` needs `start_weight_update` first and a second start needs a finish.

A failed sync: a chunk the worker fails to load ends vLLM's session there (gpu_worker.update_weights);
a failure on this side (a tensor not gathered, cast or shared) leaves it open, so the backend finishes
it. Either way vLLM's weights are left partly loaded (its layerwise reload has put the layers not yet
loaded on the meta device), and `generate` refuses until a whole sync (update_weights, flush_cache)
finishes; the trainer stops the run on the error anyway. A missing log-prob or a stop token missing
from token_ids is an error, never a made-up 0.0 (the trainer may use these log-probs as the old ones).

Sampling params sent per request: temperature (0 = greedy), top_p, top_k (0 = off), max_tokens,
stop_token_ids, ignore_eos, seed (when the request is seeded), logprobs=0 (the sampled token's own
log-prob; `processed_logprobs`: of the distribution after temperature and top-k/top-p, which is the
hf backend's tempered distribution when top-k/top-p are off), skip_special_tokens=False,
detokenize=False, n=1 (the agent expands n). `import vllm` happens only when an engine is built.
"""
from __future__ import annotations

import logging
import os
from typing import Any, Callable, Iterable

from trainer.rollout.base import GenerationOutput, GenerationRequest, RolloutEngine, register_engine
from trainer.rollout.common import bucket_named_tensors, config_value, gpu_index, model_folder, tensor_bytes

log = logging.getLogger(__name__)

# vLLM's sleep tags (SLEEP_TAGS of vllm/v1/executor/abstract.py, checked against the pinned release
# by the conformance test), in the order they wake: the weights first, then the KV cache.
VLLM_SLEEP_TAGS = ("weights", "kv_cache")
# The weight-transfer backend: CUDA IPC between processes on one GPU.
WEIGHT_TRANSFER_BACKEND = "ipc"


def prompt_to_vllm(req: GenerationRequest) -> dict[str, Any]:
    """A TokensPrompt: token ids in, no text."""
    return {"prompt_token_ids": list(req.prompt_ids)}


def sampling_to_vllm(req: GenerationRequest) -> dict[str, Any]:
    """The keywords of vllm.SamplingParams for one request."""
    sp = req.sampling
    params: dict[str, Any] = {
        "n": 1,  # the agent expands n into separate requests (verl does the same)
        "temperature": 0.0 if sp.greedy else float(sp.temperature),
        "top_p": float(sp.top_p),
        "top_k": int(sp.top_k) if sp.top_k > 0 else 0,
        "max_tokens": int(sp.max_new_tokens),
        "stop_token_ids": list(sp.stop_token_ids),
        "ignore_eos": bool(sp.ignore_eos),  # vLLM stops at the model's EOS without it
        "logprobs": 0,  # the sampled token's log-prob only
        "skip_special_tokens": False,
        "detokenize": False,  # token ids out; nobody reads the text
    }
    if sp.seed is not None:
        params["seed"] = int(sp.seed) % (1 << 31)
    return params


def output_from_vllm(req: GenerationRequest, result: Any) -> GenerationOutput:
    """A RequestOutput (one completion) as a GenerationOutput."""
    if len(result.outputs) != 1:
        raise RuntimeError(f"vllm returned {len(result.outputs)} completions for request {req.request_id!r}")
    completion = result.outputs[0]
    reason = completion.finish_reason
    if reason not in ("stop", "length"):  # abort, error, repetition, or None (unfinished)
        raise RuntimeError(f"vllm ended request {req.request_id!r} with finish_reason={reason!r}")
    ids = [int(t) for t in completion.token_ids]
    matched = completion.stop_reason
    if reason == "stop" and isinstance(matched, int) and (not ids or ids[-1] != matched):
        # vLLM 0.34 keeps a stop token in token_ids (v1/engine/detokenizer.py puts it back after
        # detokenizing): without it the trajectory would lack a token it sampled, and its log-prob.
        raise RuntimeError(f"vllm stopped request {req.request_id!r} on token {matched} but its token_ids end "
                           f"with {ids[-1:]}: not vLLM 0.34's output")
    # One {token id: Logprob} per position (a list, or vLLM's FlatLogprobs, which reads the same), the
    # sampled token's always among them with logprobs=0. A missing one is an error, not 0.0: the
    # trainer may take these as the old log-probs (rollout correction's bypass mode).
    positions = completion.logprobs or []
    if len(positions) != len(ids):
        raise RuntimeError(f"vllm returned {len(positions)} log-prob positions for the {len(ids)} tokens of "
                           f"request {req.request_id!r}")
    found = [step[tok].logprob if step and tok in step else None for step, tok in zip(positions, ids)]
    if None in found:
        k = found.index(None)
        raise RuntimeError(f"vllm returned no log-prob for token {k} ({ids[k]}) of request {req.request_id!r}")
    logprobs = [float(lp) for lp in found]
    if len(ids) > req.sampling.max_new_tokens:
        raise RuntimeError(f"vllm returned {len(ids)} tokens for max_new_tokens={req.sampling.max_new_tokens}")
    return GenerationOutput(req.request_id, ids, logprobs, reason)


def cuda_ipc_handle(tensor: Any, dtype: Any = None) -> tuple[Any, dict[str, tuple]]:
    """(the tensor to keep alive, {this GPU's uuid: torch's rebuild arguments}) for vLLM's ipc backend."""
    import torch
    from torch.multiprocessing.reductions import reduce_tensor

    weight = tensor.detach()
    if weight.device.type != "cuda":
        weight = weight.to(torch.device("cuda", torch.cuda.current_device()))
    if dtype is not None and weight.is_floating_point() and weight.dtype != dtype:
        weight = weight.to(dtype)
    weight = weight.contiguous()
    _, args = reduce_tensor(weight)
    return weight, {str(torch.cuda.get_device_properties(weight.device.index).uuid): args}


@register_engine("vllm")
class VLLMRolloutEngine(RolloutEngine):
    """Rollout over a `vllm.LLM` (see the module docstring: logic tested on a stand-in only)."""

    def __init__(self, llm: Any, vllm_module: Any, *, bucket_megabytes: float = 512.0, weight_dtype: Any = None,
                 ipc_handle: Callable[[Any], tuple[Any, dict[str, tuple]]] | None = None) -> None:
        self.llm = llm
        self.vllm = vllm_module
        self.bucket_bytes = max(1, int(float(bucket_megabytes) * (1 << 20)))
        self.weight_dtype = weight_dtype
        self.ipc_handle = ipc_handle or (lambda t: cuda_ipc_handle(t, self.weight_dtype))
        self.asleep: set[str] = set()  # sleep tags not woken yet
        self.kv_cache_deferred = False  # resume_memory left the KV cache for the next generate
        self.updating = False  # a weight update session is open (start_weight_update sent)
        self.weights_incomplete = False  # a sync started and did not finish: vLLM's weights are partly loaded
        self._sent: list[Any] = []  # tensors whose IPC handles vLLM may still read
        self.last_stats: dict[str, float] = {}
        self.llm.init_weight_transfer_engine({"init_info": {"packed": False}})

    @classmethod
    def from_config(cls, *, model: Any, tokenizer: Any, config: Any, device: Any,
                    vllm_module: Any = None) -> "VLLMRolloutEngine":
        path = model_folder(model, "vllm")

        def get(key: str, default: Any) -> Any:
            return config_value(config, key, default)

        if gpu_index(device) != 0:
            raise ValueError(f"the vllm engine runs on the process's first visible GPU, not {device}; "
                             "select the GPU with CUDA_VISIBLE_DEVICES (Ray does this for each worker)")
        if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1").strip() == "0":
            raise ValueError("the vllm engine sends weights as CUDA IPC handles to vLLM's engine process; "
                             "VLLM_ENABLE_V1_MULTIPROCESSING=0 would put that engine in this process")
        if vllm_module is None:
            try:
                import vllm  # optional extra, GPU machines only
            except ImportError as exc:
                raise RuntimeError("rollout.name=vllm needs the optional vllm package "
                                   "(pip install 'rlstudio[vllm]' on a CUDA machine)") from exc
            vllm_module = vllm
        dtype = str(get("dtype", "bfloat16"))
        dtype = "bfloat16" if dtype == "auto" else dtype
        kwargs: dict[str, Any] = {
            "model": path,
            "dtype": dtype,
            "seed": int(get("seed", 0)),
            "trust_remote_code": bool(get("trust_remote_code", False)),  # the model's (actor_rollout_ref.model)
            "gpu_memory_utilization": float(get("gpu_memory_utilization", 0.5)),
            "tensor_parallel_size": 1,
            "enable_sleep_mode": True,
            "enforce_eager": bool(get("enforce_eager", False)),
            "logprobs_mode": "processed_logprobs",
            "weight_transfer_config": {"backend": WEIGHT_TRANSFER_BACKEND},
        }
        if get("max_model_len", None):
            kwargs["max_model_len"] = int(get("max_model_len", 0))
        llm = vllm_module.LLM(**kwargs)
        return cls(llm, vllm_module, bucket_megabytes=float(get("update_weights_bucket_megabytes", 512)),
                   weight_dtype=_torch_dtype(dtype))

    # ------------------------------------------------------------------------------ generation
    def generate(self, requests: list[GenerationRequest]) -> list[GenerationOutput]:
        if not requests:
            return []
        if self.updating:
            raise RuntimeError("a vllm weight update is open: flush_cache() finishes it before generating")
        if self.weights_incomplete:
            raise RuntimeError("the last vllm weight sync failed, leaving vLLM's weights partly loaded: a whole "
                               "sync (update_weights, then flush_cache) must finish before generating")
        if "weights" in self.asleep:
            raise RuntimeError("vllm weights are released: resume_memory() before generating")
        self._wake([t for t in VLLM_SLEEP_TAGS if t in self.asleep])  # the KV cache resume_memory deferred
        self.kv_cache_deferred = False
        results = self.llm.generate([prompt_to_vllm(r) for r in requests],
                                    [self.vllm.SamplingParams(**sampling_to_vllm(r)) for r in requests],
                                    use_tqdm=False)
        if len(results) != len(requests):
            raise RuntimeError(f"vllm returned {len(results)} results for {len(requests)} requests")
        return [output_from_vllm(r, res) for r, res in zip(requests, results)]

    # ------------------------------------------------------------------------------ weights
    def update_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        """Send (name, tensor) pairs in buckets; the session stays open until flush_cache."""
        if "weights" in self.asleep:
            raise RuntimeError("vllm weights are released: resume_memory() before update_weights")
        if not self.updating:
            self.llm.start_weight_update()
            self.updating = True
            self.weights_incomplete = True  # until finish_weight_update returns (flush_cache)
            self.last_stats = {"weight_buckets": 0.0, "weight_bytes": 0.0}
        try:
            for bucket in bucket_named_tensors(named_tensors, self.bucket_bytes):
                kept, handles = zip(*(self.ipc_handle(t) for _, t in bucket))
                self._sent.extend(kept)
                try:
                    self.llm.update_weights({"update_info": ipc_update_info(bucket, kept, handles)})
                except BaseException:
                    self.updating = False  # vLLM's worker ends the session when it fails to load a chunk
                    raise
                self.last_stats["weight_buckets"] += 1.0
                self.last_stats["weight_bytes"] += float(sum(tensor_bytes(t) for t in kept))
        except BaseException:
            self._abandon_update()
            raise

    def _abandon_update(self) -> None:
        """After a failed sync: when the failure was on this side (a tensor not gathered, cast or
        shared), vLLM's session is still open, so it is finished here (else the next sync's
        start_weight_update is refused); then the shared tensors go. vLLM's weights stay partly loaded
        (`weights_incomplete`): generate refuses until a whole sync finishes."""
        if self.updating:
            self.updating = False
            try:
                self.llm.finish_weight_update()
            except Exception as exc:  # the sync's own error is the one raised
                log.warning("vllm: finishing the weight update abandoned after an error failed too: %r", exc)
        self._release_sent()

    def flush_cache(self) -> None:
        """Finish an open weight update, then drop the prefix cache computed with the old weights."""
        if self.updating:
            try:
                self.llm.finish_weight_update()
                self.weights_incomplete = False
            finally:
                self.updating = False
                self._release_sent()
        if not self.llm.reset_prefix_cache():
            raise RuntimeError("vllm reset_prefix_cache failed (requests still running)")

    def _release_sent(self) -> None:
        self._sent.clear()
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.ipc_collect()  # let the IPC-shared blocks go
        except ImportError:  # pragma: no cover - torch is a dependency of the trainer
            pass

    # ------------------------------------------------------------------------------ memory
    def release_memory(self) -> None:
        """sleep(level=1): weights to host memory, the KV cache dropped (and the prefix cache with it)."""
        if self.updating:
            raise RuntimeError("vllm weight update still open: flush_cache() before release_memory()")
        if set(VLLM_SLEEP_TAGS) <= self.asleep:
            return
        self._wake([t for t in VLLM_SLEEP_TAGS if t in self.asleep])  # sleep only from fully awake
        self.llm.sleep(level=1)
        self.asleep = set(VLLM_SLEEP_TAGS)
        self.kv_cache_deferred = False

    def resume_memory(self, tags: Iterable[str] | None = None) -> None:
        """Wake `tags` that sleep (in VLLM_SLEEP_TAGS order). Default: the weights now and the KV cache
        when the next generate starts, so a weight sync in between runs without the KV pool."""
        if tags is None:
            self._wake(["weights"] if "weights" in self.asleep else [])
            self.kv_cache_deferred = "kv_cache" in self.asleep
            return
        tags = list(tags)
        unknown = sorted(set(tags) - set(VLLM_SLEEP_TAGS))
        if unknown:
            raise ValueError(f"unknown vllm sleep tags {unknown}; vLLM's are {list(VLLM_SLEEP_TAGS)}")
        self._wake([t for t in VLLM_SLEEP_TAGS if t in tags and t in self.asleep])

    def _wake(self, tags: list[str]) -> None:
        for tag in tags:  # one call per tag, weights before kv_cache (verl's order)
            self.llm.wake_up(tags=[tag])
            self.asleep.discard(tag)

    def shutdown(self) -> None:
        """vLLM 0.34's LLM has no shutdown method: dropping it lets its engine client's finalizer stop
        the engine process and free its GPU memory."""
        self._sent.clear()
        self.llm = None
        import gc

        gc.collect()


def ipc_update_info(bucket: list[tuple[str, Any]], kept: Iterable[Any], handles: Iterable[dict]) -> dict[str, Any]:
    """The update_info of vLLM's ipc weight-transfer backend for one bucket (one handle per tensor)."""
    kept = list(kept)
    info: dict[str, Any] = {}
    info["names"] = [name for name, _ in bucket]
    info["dtype_names"] = [str(t.dtype).rsplit(".", 1)[-1] for t in kept]
    info["shapes"] = [list(t.shape) for t in kept]
    info["ipc_handles"] = list(handles)
    return info


def _torch_dtype(name: str) -> Any:
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency of the trainer
        return None
    value = getattr(torch, name, None)
    return value if isinstance(value, torch.dtype) else None
