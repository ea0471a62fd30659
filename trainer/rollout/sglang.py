"""The `sglang` rollout backend: the same engine interface over `sglang.Engine` (optional, GPU only).

NOT YET RUN AGAINST A REAL SGLANG. SGLang cannot be installed on the machines this project is built
and tested on (docs/design.md §5: it brings its own CUDA torch and its Engine needs a GPU). The logic is
written against SGLang's documented Engine API and tested with an in-process stand-in that implements
exactly the methods called here, with their documented signatures:

    Engine(model_path=..., dtype=..., mem_fraction_static=..., enable_memory_saver=True,
           skip_tokenizer_init=True, random_seed=..., context_length=..., base_gpu_id=..., tp_size=1)
    await engine.async_generate(input_ids=[[...], ...], sampling_params=[{...}, ...], return_logprob=True)
        -> list of {"output_ids": [...], "meta_info": {"finish_reason": {"type": "stop"|"length",
           "matched": ...}, "output_token_logprobs": [(logprob, token_id, text|None), ...], ...}}
    engine.update_weights_from_tensor(named_tensors=[(name, tensor), ...], load_format=None, flush_cache=bool)
    engine.release_memory_occupation(tags=None) / engine.resume_memory_occupation(tags=None)
    engine.flush_cache()
    engine.shutdown()

Sampling params sent per request: temperature (0 = greedy), top_p, top_k, max_new_tokens,
stop_token_ids, and `sampling_seed` when the request is seeded (newer SGLang releases; the
reproducibility it gives also depends on SGLang's deterministic-inference settings).
Weights are sent in buckets of about `update_weights_bucket_megabytes` MB (verl HEAD / slime style:
one call per bucket, flush_cache only with the last). `import sglang` happens only when an Engine is
built, so the rest of the trainer never needs it.
"""
from __future__ import annotations

import asyncio
from typing import Any, Callable, Iterable, Iterator

from trainer.rollout.base import GenerationOutput, GenerationRequest, RolloutEngine, register_engine


def bucket_named_tensors(named_tensors: Iterable[tuple[str, Any]], bucket_bytes: int) -> Iterator[list[tuple[str, Any]]]:
    """Group (name, tensor) pairs into lists of at most `bucket_bytes` (a larger tensor goes alone)."""
    bucket: list[tuple[str, Any]] = []
    size = 0
    for name, tensor in named_tensors:
        nbytes = int(tensor.numel()) * int(tensor.element_size())
        if bucket and size + nbytes > bucket_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, tensor))
        size += nbytes
    if bucket:
        yield bucket


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
        self.last_stats: dict[str, float] = {}

    @classmethod
    def from_config(cls, *, model: Any, tokenizer: Any, config: Any, device: Any,
                    engine_factory: Callable[..., Any] | None = None) -> "SGLangRolloutEngine":
        path = model if isinstance(model, str) else getattr(model, "name_or_path", None)
        if not path:
            raise ValueError("the sglang engine needs the model folder path (or a module with name_or_path)")

        def get(key: str, default: Any) -> Any:
            value = config.get(key, default) if isinstance(config, dict) else getattr(config, key, default)
            return default if value is None else value

        if engine_factory is None:
            try:
                import sglang  # noqa: F401 - optional extra, GPU machines only
            except ImportError as exc:
                raise RuntimeError("rollout.name=sglang needs the optional sglang package "
                                   "(pip install 'rlstudio[sglang]' on a CUDA machine)") from exc
            engine_factory = sglang.Engine
        gpu = 0
        if device is not None and str(device).startswith("cuda:"):
            gpu = int(str(device).split(":", 1)[1])
        kwargs: dict[str, Any] = {
            "model_path": str(path),
            "dtype": "bfloat16" if str(get("dtype", "bfloat16")) in ("auto", "bfloat16") else str(get("dtype", "")),
            "mem_fraction_static": float(get("gpu_memory_utilization", 0.5)),
            "enable_memory_saver": True,
            "skip_tokenizer_init": True,  # token ids in, token ids out
            "random_seed": int(get("seed", 0)),
            "base_gpu_id": gpu,
            "tp_size": 1,
        }
        if get("max_model_len", None):
            kwargs["context_length"] = int(get("max_model_len", 0))
        return cls(engine_factory(**kwargs), bucket_megabytes=float(get("update_weights_bucket_megabytes", 512)))

    async def agenerate(self, requests: list[GenerationRequest]) -> list[GenerationOutput]:
        if not requests:
            return []
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
        """Synchronous form on a private persistent loop (from async code, await agenerate instead)."""
        if self._loop is None or self._loop.is_closed():
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(self.agenerate(requests))

    def update_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        buckets = 0
        total = 0
        pending: list[tuple[str, Any]] | None = None
        # Look one bucket ahead so flush_cache rides on the last call only.
        for bucket in bucket_named_tensors(named_tensors, self.bucket_bytes):
            if pending is not None:
                self.engine.update_weights_from_tensor(named_tensors=pending, load_format=None, flush_cache=False)
                buckets += 1
            pending = bucket
            total += sum(int(t.numel()) * int(t.element_size()) for _, t in bucket)
        if pending is not None:
            self.engine.update_weights_from_tensor(named_tensors=pending, load_format=None, flush_cache=True)
            buckets += 1
        self.last_stats = {"weight_buckets": float(buckets), "weight_bytes": float(total)}

    def release_memory(self) -> None:
        self.engine.release_memory_occupation()

    def resume_memory(self, tags: list[str] | None = None) -> None:
        """Resume weights and KV cache (or only `tags`, e.g. ["weights"] before a sync, as verl HEAD)."""
        if tags is None:
            self.engine.resume_memory_occupation()
        else:
            self.engine.resume_memory_occupation(tags=tags)

    def flush_cache(self) -> None:
        self.engine.flush_cache()

    def shutdown(self) -> None:
        self.engine.shutdown()
        if self._loop is not None and not self._loop.is_closed():
            self._loop.close()
