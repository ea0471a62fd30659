"""bench/gpu_grpo.py's decode part: the `hf` engine's decode forms against `generate` at batch sizes
that fill a GPU (run as that bench's `--engine decode` part, in its own process).

On the model folder the bench built (bf16 on a GPU, fp32 on the CPU), batches of ~150-token prompts
(5 rows per prompt, as GRPO's groups), `new` tokens a row at temperature 1, no stop token:
- engine, CUDA graphs: the static step captured as CUDA graphs (the engine's default on a GPU);
- engine, static eager: the same static step without graphs (rollout.enforce_eager);
- engine, sliced eager: the sliced fast step (the CPU's default);
- generate: transformers' `generate` with its DynamicCache;
- generate, static cache: `generate` with cache_implementation="static" (transformers' static KV cache,
  not compiled: transformers 5.x would otherwise torch.compile the forward for a static cache on CUDA
  mid-measurement, so both `generate` rows pass disable_compile=True).
tokens/s by wall time with the device synchronised; the host reads of the engine's end mask per call
are kept too ("host syncs"). With `partial`, what is done so far is written there after each batch
size, so a part stopped at its budget keeps the batch sizes it finished.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

def run_decode(model: Path, device: str, batches: list[int], new: int, partial: Path | None = None) -> dict:
    """tokens/s of the hf engine's decode forms and of `generate` (see the module docstring)."""
    import random

    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    from trainer.rollout.base import GenerationRequest, SamplingParams
    from trainer.rollout.hf import HFRolloutEngine

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    m = AutoModelForCausalLM.from_pretrained(model, dtype=dtype).to(device).eval()
    m.generation_config = GenerationConfig()
    vocab = m.config.vocab_size

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    warmed: set[str] = set()

    def timed(name: str, fn) -> float:
        """Wall seconds of one call; the first call of each form is a warm-up (kernels, cuBLAS plans).
        The engine captures its CUDA graphs inside every call: that cost is in its figure."""
        if name not in warmed:
            fn()
            warmed.add(name)
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        return time.perf_counter() - t0

    # Correctness first: greedy tokens of the CUDA-graph replay against the same static step run
    # eagerly (the same kernels in the same order: they should agree token for token), rows of
    # different prompt lengths (padding) and stop ids that end some rows early (a compaction, so a
    # second graph).
    rng = random.Random(0)
    check_prompts = [[rng.randrange(10, vocab - 300) for _ in range(rng.randint(20, 60))] for _ in range(16)]
    greedy = [GenerationRequest(str(i), p, SamplingParams(temperature=0.0, max_new_tokens=48))
              for i, p in enumerate(check_prompts)]
    eager_out = HFRolloutEngine(m, pad_token_id=0, device=device, cuda_graphs=False,
                                static_decode=True).generate(greedy)
    stops = sorted({o.output_ids[k] for o, k in zip(eager_out, (5, 11, 17, 23))})
    greedy_stop = [GenerationRequest(r.request_id, r.prompt_ids, SamplingParams(temperature=0.0, max_new_tokens=48,
                                                                                 stop_token_ids=stops)) for r in greedy]
    graphs = HFRolloutEngine(m, pad_token_id=0, device=device)
    check = {"graphs_equal_eager": [o.output_ids for o in graphs.generate(greedy)] == [o.output_ids for o in eager_out]}
    eager_stop = HFRolloutEngine(m, pad_token_id=0, device=device, cuda_graphs=False,
                                 static_decode=True).generate(greedy_stop)
    check["graphs_equal_eager_with_stops"] = ([o.output_ids for o in graphs.generate(greedy_stop)]
                                              == [o.output_ids for o in eager_stop])
    check["graphs_captured"] = graphs.last_stats.get("cuda_graphs")
    print("decode check", check, flush=True)

    rows = []
    for batch in batches:
        rng = random.Random(batch)
        distinct = [[rng.randrange(10, vocab - 300) for _ in range(rng.randint(140, 160))] for _ in range(max(1, batch // 5))]
        prompts = [distinct[i % len(distinct)] for i in range(batch)]
        reqs = [GenerationRequest(str(i), p, SamplingParams(temperature=1.0, max_new_tokens=new, seed=i))
                for i, p in enumerate(prompts)]
        width = max(map(len, prompts))
        ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts], device=device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
        forms = {"engine, CUDA graphs": dict(), "engine, static eager": dict(cuda_graphs=False),
                 "engine, sliced eager": dict(static_decode=False)}
        row = {"batch": batch}
        for name, kw in forms.items():
            if device != "cuda" and name != "engine, sliced eager":
                kw = dict(kw, static_decode=True)
            engine = HFRolloutEngine(m, pad_token_id=0, device=device, **kw)
            row[name] = batch * new / timed(name, lambda: engine.generate(reqs))
            row[name + " host syncs"] = engine.last_stats.get("host_syncs")
        for name, extra in (("generate", {}), ("generate, static cache", {"cache_implementation": "static"})):
            gc = GenerationConfig(max_new_tokens=new, min_new_tokens=new, do_sample=True, temperature=1.0, top_k=0,
                                  top_p=1.0, pad_token_id=0, eos_token_id=None, disable_compile=True, **extra)
            try:
                with torch.no_grad():
                    row[name] = batch * new / timed(name, lambda: m.generate(input_ids=ids, attention_mask=mask,
                                                                             generation_config=gc))
            except Exception as exc:  # a transformers option the installed release lacks: say so, go on
                row[name] = None
                row[name + " error"] = f"{type(exc).__name__}: {exc}"[:300]
        rows.append(row)
        print("decode", {k: (round(v) if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
        if partial is not None:
            partial.write_text(json.dumps({"new_tokens": new, "rows": rows, "dtype": str(dtype), "check": check}))
        if device == "cuda":
            torch.cuda.empty_cache()
    return {"new_tokens": new, "rows": rows, "dtype": str(dtype), "check": check}
