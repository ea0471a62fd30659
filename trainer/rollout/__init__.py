"""Rollout: engines that generate token ids, and the multi-turn agent loop that drives them.

    base.py    SamplingParams / GenerationRequest / GenerationOutput, RolloutEngine, the registry
               (register_engine, build_engine, resolve_engine_name: "auto" -> sglang or hf)
    hf.py      `hf` backend: own batched KV-cache sampling loop over a transformers module
    sglang.py  `sglang` backend over sglang.Engine (optional; logic tested on a stand-in only)
    vllm.py    `vllm` backend over vLLM's offline vllm.LLM (optional; logic tested on a stand-in only)
    common.py  what sglang and vllm share: config values, the model folder, weight buckets
    parser.py  tool-call parsers by SGLang's names (hermes / qwen25, llama3): structured errors, never raise
    agent.py   MultiTurnRollout: request state machine, token deltas, tools, budgets
"""
from trainer.rollout.base import (  # noqa: F401 - the public names of this package
    GenerationOutput,
    GenerationRequest,
    RolloutEngine,
    SamplingParams,
    available_engines,
    build_engine,
    register_engine,
    resolve_engine_name,
)
