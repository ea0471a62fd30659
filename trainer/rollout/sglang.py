"""The `sglang` rollout backend: the same engine interface over `sglang.Engine` (optional, GPU only).

NOT YET RUN AGAINST A LIVE SGLANG ENGINE (no GPU has run it; docs/distributed.md). SGLang cannot be
installed on the CPU machines this project is built and tested on (docs/design.md §5). What is checked
without a GPU: tests/trainer/rollout/test_sglang_conformance.py reads the pinned release's source
(the `sglang` extra's version, fetched as a wheel, parsed with `ast`) and checks every Engine method,
keyword, result field and memory tag used here against it, and the stand-in engine the logic is
tested on (tests/trainer/rollout/test_sglang_engine.py) against the same parse. The calls made:

    Engine(model_path=..., dtype=..., mem_fraction_static=..., enable_memory_saver=True,
           skip_tokenizer_init=True, random_seed=..., context_length=..., base_gpu_id=..., tp_size=1)
           (Engine(**kwargs) builds a ServerArgs from them)
    await engine.async_generate(input_ids=[[...], ...], sampling_params=[{...}, ...], return_logprob=True)
        -> list of {"output_ids": [...], "meta_info": {"finish_reason": {"type": "stop"|"length"|"abort",
           "matched": ...}, "output_token_logprobs": [(logprob, token_id, None), ...], ...}}
    success, message = engine.update_weights_from_tensor(named_tensors=[(name, tensor), ...],
                                                         load_format=None, flush_cache=bool)
    engine.release_memory_occupation(tags=[...]) / engine.resume_memory_occupation(tags=[...])
    engine.flush_cache()
    engine.shutdown()

Two rules read from SGLang's source that the stand-in enforces:
- One event loop. The Engine keeps the loop it was built on (`engine.loop`); its synchronous methods
  run their coroutine there, and its TokenizerManager binds its receive loop to the first loop a
  call runs on. A request awaited on any other loop would wait for replies nobody reads, so
  `async_generate` runs on `engine.loop` too (`event_loop`; the multi-turn agent drives its
  coroutine there).
- Release and resume are not idempotent: the scheduler adds each released tag to a set and
  `remove`s it on resume (a KeyError for a region that was not released). The backend keeps the
  released tags and sends only what changes; tags are SGLang's GPU_MEMORY_ALL_TYPES.

Sampling params sent per request: temperature (0 = greedy), top_p, top_k, max_new_tokens,
stop_token_ids, and `sampling_seed` when the request is seeded (the reproducibility it gives also
depends on SGLang's deterministic-inference settings). Weights are sent in buckets of about
`update_weights_bucket_megabytes` MB (verl HEAD / slime style: one call per bucket, flush_cache only
with the last). `import sglang` happens only when an Engine is built, so the rest of the trainer
never needs it.
"""
from __future__ import annotations

import asyncio
from typing import Any, Callable, Iterable

from trainer.rollout.base import GenerationOutput, GenerationRequest, RolloutEngine, register_engine
from trainer.rollout.common import bucket_named_tensors, config_value, gpu_index, model_folder, tensor_bytes

# The GPU memory regions an Engine releases and resumes (SGLang's GPU_MEMORY_ALL_TYPES, checked
# against the pinned release by the conformance test).
SGLANG_MEMORY_TAGS = ("kv_cache", "weights", "cuda_graph")


def sampling_to_sglang(req: GenerationRequest) -> dict[str, Any]:
    sp = req.sampling
    params: dict[str, Any] = {
        "temperature": 0.0 if sp.greedy else float(sp.temperature),
        "top_p": float(sp.top_p),
        "top_k": int(sp.top_k) if sp.top_k > 0 else -1,
        "max_new_tokens": int(sp.max_new_tokens),
        "stop_token_ids": list(sp.stop_token_ids),
        "skip_special_tokens": False,
        "n": 1,  # the agent expands n into separate requests (verl does the same)
    }
    if sp.ignore_eos:  # SGLang would still stop at the model's own EOS without it
        params["ignore_eos"] = True
    if sp.seed is not None:
        params["sampling_seed"] = int(sp.seed) % (1 << 31)
    return params


def output_from_sglang(req: GenerationRequest, result: dict[str, Any]) -> GenerationOutput:
    meta = result.get("meta_info") or {}
    token_lps = meta.get("output_token_logprobs") or []
    ids = list(result.get("output_ids") or [])
    if not ids and token_lps:
        ids = [int(t[1]) for t in token_lps]
    logprobs = [float(t[0]) if t[0] is not None else 0.0 for t in token_lps][: len(ids)]
    logprobs += [0.0] * (len(ids) - len(logprobs))
    finish = meta.get("finish_reason") or {}
    kind = finish.get("type") if isinstance(finish, dict) else str(finish)
    if kind == "abort":
        raise RuntimeError(f"sglang aborted request {req.request_id!r}: {finish}")
    matched = finish.get("matched") if isinstance(finish, dict) else None
    if kind == "stop" and isinstance(matched, int) and (not ids or ids[-1] != matched):
        # Keep the stop token in the trajectory, as the hf backend does (it was generated).
        ids.append(matched)
        logprobs.append(0.0)
    reason = "length" if kind == "length" else "stop"
    if len(ids) > req.sampling.max_new_tokens:
        raise RuntimeError(f"sglang returned {len(ids)} tokens for max_new_tokens={req.sampling.max_new_tokens}")
    return GenerationOutput(req.request_id, ids, logprobs, reason)


@register_engine("sglang")
class SGLangRolloutEngine(RolloutEngine):
    """Rollout over an `sglang.Engine` (see the module docstring: logic tested on a stand-in only)."""

    def __init__(self, engine: Any, *, bucket_megabytes: float = 512.0) -> None:
        self.engine = engine
        self.bucket_bytes = max(1, int(float(bucket_megabytes) * (1 << 20)))
        self._loop: asyncio.AbstractEventLoop | None = None
        self.released: set[str] = set()  # memory tags released and not yet resumed
        self.last_stats: dict[str, float] = {}

    @property
    def event_loop(self) -> asyncio.AbstractEventLoop | None:
        """The Engine's own loop (`engine.loop`): every call into SGLang must run on it."""
        return getattr(self.engine, "loop", None)

    @classmethod
    def from_config(cls, *, model: Any, tokenizer: Any, config: Any, device: Any,
                    engine_factory: Callable[..., Any] | None = None) -> "SGLangRolloutEngine":
        path = model_folder(model, "sglang")

        def get(key: str, default: Any) -> Any:
            return config_value(config, key, default)

        if engine_factory is None:
            try:
                import sglang  # noqa: F401 - optional extra, GPU machines only
            except ImportError as exc:
                raise RuntimeError("rollout.name=sglang needs the optional sglang package "
                                   "(pip install 'rlstudio[sglang]' on a CUDA machine)") from exc
            engine_factory = sglang.Engine
        gpu = gpu_index(device)
        kwargs: dict[str, Any] = {
            "model_path": str(path),
            "dtype": "bfloat16" if str(get("dtype", "bfloat16")) in ("auto", "bfloat16") else str(get("dtype", "")),
            "mem_fraction_static": float(get("gpu_memory_utilization", 0.5)),
            "enable_memory_saver": True,
            "skip_tokenizer_init": True,  # token ids in, token ids out
            "random_seed": int(get("seed", 0)),
            "trust_remote_code": bool(get("trust_remote_code", False)),  # the model's (actor_rollout_ref.model)
            "base_gpu_id": gpu,
            "tp_size": 1,
        }
        if get("max_model_len", None):
            kwargs["context_length"] = int(get("max_model_len", 0))
        return cls(engine_factory(**kwargs), bucket_megabytes=float(get("update_weights_bucket_megabytes", 512)))

    async def agenerate(self, requests: list[GenerationRequest]) -> list[GenerationOutput]:
        if not requests:
            return []
        loop = self.event_loop
        if loop is not None and asyncio.get_running_loop() is not loop:
            # Awaited elsewhere, the request would wait for replies read on the Engine's loop: a hang.
            raise RuntimeError("sglang requests must run on the Engine's own event loop (engine.loop); "
                               "drive the coroutine with engine.event_loop.run_until_complete")
        results = await self.engine.async_generate(
            input_ids=[list(r.prompt_ids) for r in requests],
            sampling_params=[sampling_to_sglang(r) for r in requests],
            return_logprob=True,
        )
        if isinstance(results, dict):
            results = [results]
        if len(results) != len(requests):
            raise RuntimeError(f"sglang returned {len(results)} results for {len(requests)} requests")
        return [output_from_sglang(r, res) for r, res in zip(requests, results)]

    def generate(self, requests: list[GenerationRequest]) -> list[GenerationOutput]:
        """Synchronous form on the Engine's loop (from async code running there, await agenerate)."""
        loop = self.event_loop
        if loop is None or loop.is_closed():  # an engine without a loop of its own: a private one
            if self._loop is None or self._loop.is_closed():
                self._loop = asyncio.new_event_loop()
            loop = self._loop
        return loop.run_until_complete(self.agenerate(requests))

    def update_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        buckets = 0
        total = 0
        pending: list[tuple[str, Any]] | None = None
        # Look one bucket ahead so flush_cache rides on the last call only.
        for bucket in bucket_named_tensors(named_tensors, self.bucket_bytes):
            if pending is not None:
                self._send(pending, flush_cache=False)
                buckets += 1
            pending = bucket
            total += sum(tensor_bytes(t) for _, t in bucket)
        if pending is not None:
            self._send(pending, flush_cache=True)
            buckets += 1
        self.last_stats = {"weight_buckets": float(buckets), "weight_bytes": float(total)}

    def _send(self, bucket: list[tuple[str, Any]], *, flush_cache: bool) -> None:
        success, message = self.engine.update_weights_from_tensor(named_tensors=bucket, load_format=None,
                                                                  flush_cache=flush_cache)
        if not success:
            raise RuntimeError(f"sglang update_weights_from_tensor failed: {message}")

    def release_memory(self, tags: Iterable[str] | None = None) -> None:
        """Release `tags` (default: all of SGLANG_MEMORY_TAGS) that are not released already."""
        todo = [t for t in (SGLANG_MEMORY_TAGS if tags is None else tags) if t not in self.released]
        if todo:
            self.engine.release_memory_occupation(tags=todo)
            self.released.update(todo)

    def resume_memory(self, tags: Iterable[str] | None = None) -> None:
        """Resume the released `tags` (default: all; e.g. ["weights"] alone before a sync, as verl HEAD)."""
        todo = [t for t in (SGLANG_MEMORY_TAGS if tags is None else tags) if t in self.released]
        if todo:
            self.engine.resume_memory_occupation(tags=todo)
            self.released.difference_update(todo)

    def flush_cache(self) -> None:
        self.engine.flush_cache()

    def shutdown(self) -> None:
        self.engine.shutdown()
        if self._loop is not None and not self._loop.is_closed():
            self._loop.close()
