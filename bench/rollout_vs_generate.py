"""Benchmark: the `hf` rollout engine against plain `model.generate` (tokens per second).

Run: .venv/bin/python bench/rollout_vs_generate.py [--preset demo|smoke] [--threads 1] [--new-tokens 64]
     [--batches 1,16,64] [--repeats 3] [--device cpu|cuda]

Same tiny model (made locally with trainer.models.tiny), same prompts (lengths 24..40, so left padding
is exercised), same settings for both: exactly --new-tokens new tokens per row (no stop tokens: pure
decode speed), fp32. Two modes: greedy, and sampling at temperature 1 with no top-k / top-p. A third
column, "tail", gives the engine's speed when rows stop at different lengths (each row gets its own
max_new_tokens, spread between 8 and --new-tokens); `generate` has no per-row budget, so it has to run
every row to the longest (its figure counts only the useful tokens). A last row has GRPO's shape
(8 prompts of ~160 tokens x 8 samples, sampled). Times are process CPU time (1 thread, so ~ the
compute we spent; robust to other processes on a shared machine), the two paths alternating,
best of --repeats.
"""
from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="demo")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--batches", default="1,16,64")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    from trainer.models.tiny import make_tiny_model
    from trainer.rollout.base import GenerationRequest, SamplingParams
    from trainer.rollout.hf import HFRolloutEngine

    torch.set_num_threads(args.threads)
    path = make_tiny_model(tempfile.mkdtemp(prefix="bench_tiny_"), preset=args.preset)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(args.device).eval()
    params = sum(p.numel() for p in model.parameters())
    engine = HFRolloutEngine(model, pad_token_id=0, device=args.device)
    vocab = model.config.vocab_size
    new = args.new_tokens

    def prompts(batch: int) -> list[list[int]]:
        rng = random.Random(batch)
        return [[rng.randrange(10, vocab) for _ in range(rng.randint(24, 40))] for _ in range(batch)]

    def run_generate(ps: list[list[int]], greedy: bool) -> float:
        width = max(map(len, ps))
        ids = torch.tensor([[0] * (width - len(p)) + p for p in ps], device=args.device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in ps], device=args.device)
        gc = GenerationConfig(max_new_tokens=new, min_new_tokens=new, do_sample=not greedy, temperature=1.0,
                              top_k=0, top_p=1.0, pad_token_id=0, eos_token_id=None)
        t0 = time.process_time()
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=mask, generation_config=gc)
        dt = time.process_time() - t0
        assert out.shape[1] - width == new
        return dt

    def run_engine(ps: list[list[int]], greedy: bool, budgets: list[int] | None = None) -> tuple[float, int]:
        reqs = [GenerationRequest(str(i), p, SamplingParams(temperature=0.0 if greedy else 1.0,
                                                            max_new_tokens=(budgets[i] if budgets else new), seed=i))
                for i, p in enumerate(ps)]
        t0 = time.process_time()
        outs = engine.generate(reqs)
        dt = time.process_time() - t0
        return dt, sum(len(o.output_ids) for o in outs)

    def best_pair(gen_fn, eng_fn) -> tuple[float, float]:
        # Alternate the two so a load change on a shared machine hits both alike; best of repeats.
        g, e = [], []
        for _ in range(args.repeats):
            g.append(gen_fn())
            e.append(eng_fn())
        return min(g), min(e)

    print(f"model: tiny {args.preset} ({params / 1e6:.2f} M params), fp32, device {args.device}, "
          f"torch threads {args.threads}, {new} new tokens/row, best of {args.repeats}, tok/s by CPU time")
    header = f"{'batch':>5} {'mode':>7} | {'generate tok/s':>14} | {'engine tok/s':>12} | {'speedup':>7}"
    print(header)
    print("-" * len(header))
    for batch in [int(b) for b in args.batches.split(",")]:
        ps = prompts(batch)
        run_engine(ps, True)  # warm up both paths once
        run_generate(ps, True)
        for mode in ("greedy", "sample"):
            greedy = mode == "greedy"
            g, e = best_pair(lambda: run_generate(ps, greedy), lambda: run_engine(ps, greedy)[0])
            toks = batch * new
            print(f"{batch:>5} {mode:>7} | {toks / g:>14.0f} | {toks / e:>12.0f} | {g / e:>6.2f}x")
        if batch > 1:
            rng = random.Random(7)
            budgets = [rng.randint(8, new) for _ in range(batch)]
            budgets[0] = new
            useful = sum(budgets)
            # generate must run all rows to `new`; count only the useful tokens for both.
            g, e = best_pair(lambda: run_generate(ps, False), lambda: run_engine(ps, False, budgets)[0])
            print(f"{batch:>5} {'tail':>7} | {useful / g:>14.0f} | {useful / e:>12.0f} | {g / e:>6.2f}x")
    # GRPO shape: 8 distinct prompts of 150..170 tokens (a tool schema in the system turn) x 8 samples.
    rng = random.Random(99)
    distinct = [[rng.randrange(10, vocab) for _ in range(rng.randint(150, 170))] for _ in range(8)]
    ps = [p for p in distinct for _ in range(8)]
    run_engine(ps, False)
    g, e = best_pair(lambda: run_generate(ps, False), lambda: run_engine(ps, False)[0])
    toks = len(ps) * new
    print(f"{'8x8':>5} {'grpo':>7} | {toks / g:>14.0f} | {toks / e:>12.0f} | {g / e:>6.2f}x"
          "   (8 prompts of ~160 tokens x 8 samples: the engine prefills each prompt once)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
