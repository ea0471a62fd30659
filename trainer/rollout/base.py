"""Rollout engine interface: the request/response types, the abstract engine, and the backend registry.

An engine turns token-id prompts into token-id continuations. It knows nothing of chat templates,
tools or rewards (that is `trainer.rollout.agent`). Backends (one per file) register under a name:

    hf      trainer.rollout.hf      own batched KV-cache sampling loop over a transformers module
    sglang  trainer.rollout.sglang  `sglang.Engine` (optional extra, GPU only, imported lazily)
    vllm    trainer.rollout.vllm    vLLM's offline `vllm.LLM` (optional extra, GPU only, imported lazily)
    auto    sglang when it is importable and CUDA is available, else hf (never vllm: name it)

`sglang` and `vllm` need a GPU: with trainer.device=cpu they are refused (`resolve_engine_name`).

A backend subclass must implement `generate`, `update_weights`, `release_memory`, `resume_memory`
and `flush_cache`, and a classmethod `from_config(*, model, tokenizer, config, device)`.
"""
from __future__ import annotations

import abc
import dataclasses
import importlib
import importlib.util
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterable, Literal

FinishReason = Literal["stop", "length"]


@dataclass
class SamplingParams:
    """How to sample one request. temperature <= 0 means greedy (argmax)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1  # -1 (or 0) = no top-k filtering
    max_new_tokens: int = 512
    stop_token_ids: list[int] = field(default_factory=list)  # generation ends after emitting one
    seed: int | None = None  # None = unseeded (torch's global RNG)
    ignore_eos: bool = False  # True: run to max_new_tokens; the agent then sends no stop ids at all

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def replace(self, **changes: Any) -> "SamplingParams":
        return dataclasses.replace(self, **changes)


@dataclass
class GenerationRequest:
    request_id: str
    prompt_ids: list[int]
    sampling: SamplingParams


@dataclass
class GenerationOutput:
    request_id: str
    output_ids: list[int]  # generated ids, the stop token included when one ended the request
    logprobs: list[float]  # one per output id (see the backend's docstring for which distribution)
    finish_reason: FinishReason  # "stop": a stop token was emitted; "length": max_new_tokens hit


class RolloutEngine(abc.ABC):
    """A generation backend. Subclasses implement every abstract method below."""

    name: ClassVar[str] = ""

    @classmethod
    @abc.abstractmethod
    def from_config(cls, *, model: Any, tokenizer: Any, config: Any, device: Any) -> "RolloutEngine":
        """Build the engine from the rollout config section (actor_rollout_ref.rollout)."""

    @abc.abstractmethod
    def generate(self, requests: list[GenerationRequest]) -> list[GenerationOutput]:
        """Generate every request (as one batch where the backend can); outputs in request order."""

    @property
    def event_loop(self) -> Any:
        """The asyncio loop that calls into this engine must run on (the multi-turn agent drives its
        coroutine there), or None for any loop. sglang: its Engine's own loop."""
        return None

    async def agenerate(self, requests: list[GenerationRequest]) -> list[GenerationOutput]:
        """Async form used by the multi-turn agent. Default: the synchronous `generate` (it blocks
        the loop, which is fine: the agent runs tools only between turns). Async backends override."""
        return self.generate(requests)

    @abc.abstractmethod
    def update_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        """Load (name, tensor) pairs (HF parameter names) into the engine's copy of the policy."""

    @abc.abstractmethod
    def release_memory(self) -> None:
        """Free what generation holds (KV cache; weights too where the backend can) before training."""

    @abc.abstractmethod
    def resume_memory(self) -> None:
        """Undo release_memory before the next rollout."""

    @abc.abstractmethod
    def flush_cache(self) -> None:
        """Drop any prefix / KV cache that weights changed under."""


_REGISTRY: dict[str, type[RolloutEngine]] = {}
# Backends living in their own module register on import; importing lazily keeps sglang optional.
_BUILTIN_MODULES = {"hf": "trainer.rollout.hf", "sglang": "trainer.rollout.sglang", "vllm": "trainer.rollout.vllm"}
# Backends that run only on a GPU (an engine of their own on CUDA).
GPU_ONLY_ENGINES = ("sglang", "vllm")


def register_engine(name: str) -> Callable[[type[RolloutEngine]], type[RolloutEngine]]:
    """Class decorator: make a RolloutEngine subclass buildable as `name`."""

    def deco(cls: type[RolloutEngine]) -> type[RolloutEngine]:
        if not (isinstance(cls, type) and issubclass(cls, RolloutEngine)):
            raise TypeError(f"{cls!r} is not a RolloutEngine subclass")
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(f"rollout engine {name!r} is already registered to {_REGISTRY[name]!r}")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return deco


def sglang_available() -> bool:
    """True when the sglang package is importable (without importing it)."""
    return importlib.util.find_spec("sglang") is not None


def _device_type(device: Any) -> str | None:
    """"cpu" / "cuda" / ... of a device given as a torch.device or a string; None when unknown or auto."""
    if device is None:
        return None
    kind = getattr(device, "type", None) or str(device).split(":", 1)[0]
    return None if kind in ("", "auto") else kind


def resolve_engine_name(name: str, device: Any = None) -> str:
    """Map "auto" to a concrete backend for `device` (trainer.device, resolved or not).

    On the CPU auto is always hf, and sglang and vllm are refused: CUDA is not even asked about, so a
    CPU run never starts an engine on a GPU it was not given. Otherwise (a GPU or an unknown device)
    auto is sglang when sglang is installed and CUDA is usable, else hf. auto never picks vllm, even
    where vllm is installed and sglang is not: the vllm backend has not run against a live vLLM yet
    (trainer/rollout/vllm.py), so it runs only when rollout.name=vllm asks for it.
    """
    kind = _device_type(device)
    if kind == "cpu":
        if name in GPU_ONLY_ENGINES:
            raise ValueError(f"rollout engine {name!r} needs a GPU; use hf with trainer.device=cpu")
        return "hf" if name == "auto" else name
    if name != "auto":
        return name
    import torch

    return "sglang" if (sglang_available() and torch.cuda.is_available()) else "hf"


def get_engine_class(name: str, device: Any = None) -> type[RolloutEngine]:
    """The engine class `name` stands for on `device` ("auto" resolves first)."""
    name = resolve_engine_name(name, device)
    if name not in _REGISTRY and name in _BUILTIN_MODULES:
        importlib.import_module(_BUILTIN_MODULES[name])
    if name not in _REGISTRY:
        known = sorted(set(_REGISTRY) | set(_BUILTIN_MODULES) | {"auto"})
        raise KeyError(f"unknown rollout engine {name!r}; known: {known}")
    return _REGISTRY[name]


def available_engines() -> list[str]:
    return sorted(set(_REGISTRY) | set(_BUILTIN_MODULES) | {"auto"})


def build_engine(name: str, *, model: Any, tokenizer: Any, config: Any, device: Any) -> RolloutEngine:
    """Build the backend `name` ("auto" resolves first). `config` is the rollout config section.

    For `hf`, `model` is the live torch module (the actor's, colocated: no copy is made). For
    `sglang` and `vllm`, `model` is the HF model folder path (or a module whose `name_or_path` gives it).
    """
    return get_engine_class(name, device).from_config(model=model, tokenizer=tokenizer, config=config, device=device)
