"""Benchmark: the `hf` rollout engine against plain `model.generate` (tokens per second).

Run: .venv/bin/python bench/rollout_vs_generate.py [--model tiny|qwen-vocab] [--preset demo|smoke]
     [--layers 2 --hidden 256] [--threads 1] [--new-tokens 64] [--batches 1,16,64]
     [--modes greedy,sample,filtered] [--no-extra] [--repeats 3] [--device cpu|cuda] [--write docs/benchmarks.md]
Issue 16's figure (Qwen's vocabulary, the lm-head dominates):
     .venv/bin/python bench/rollout_vs_generate.py --model qwen-vocab --batches 64 --new-tokens 32
     --modes greedy,sample,filtered --repeats 3 --write docs/benchmarks.md

Models: `tiny` is trainer.models.tiny's preset (a 1,000-odd-token vocabulary: the layers dominate);
`qwen-vocab` is a Qwen2.5-format folder from tests/fixtures/families.py with the real 151,936-token
vocabulary and tiny layers (--layers, --hidden; 4 heads, 2 KV heads, tied embeddings), where the
lm-head (hidden x 151,936) and the per-token work over the full vocabulary dominate a decode step.

Same model, same prompts (lengths 24..40, so left padding is exercised), same settings for both:
exactly --new-tokens new tokens per row (no stop tokens: pure decode speed), fp32. The model's own
generation_config.json is replaced by an empty one for `generate` (Qwen2.5's has repetition_penalty
1.05, top_k 20, top_p 0.8, temperature 0.7 and its EOS ids, which `generate` would otherwise merge
into every setting the bench leaves unset), so both sides run exactly the bench's settings. Modes:
greedy; sample (temperature 1, no top-k / top-p); filtered (temperature 0.7, top-k 20, top-p 0.8:
Qwen2.5's defaults, which a run on such a folder samples with). A further column, "tail", gives the
engine's speed when rows stop at different lengths (each row gets its own max_new_tokens, spread
between 8 and --new-tokens); `generate` has no per-row budget, so it has to run every row to the
longest (its figure counts only the useful tokens). A last row has GRPO's shape (8 prompts of ~160
tokens x 8 samples, sampled). --no-extra skips these two. Times are process CPU time (1 thread, so ~
the compute we spent; robust to other processes on a shared machine), the two paths alternating,
best of --repeats. --write replaces this model's section of the file (bench/md_sections.py).
"""
from __future__ import annotations

import argparse
import os
import platform
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

# (temperature, top_k, top_p) per mode; temperature 0 = greedy. "filtered" = Qwen2.5's defaults.
MODES = {"greedy": (0.0, 0, 1.0), "sample": (1.0, 0, 1.0), "filtered": (0.7, 20, 0.8)}


def machine(threads: int) -> dict:
    """CPU model, cores, vector ISA, library versions, torch threads and load: the figures' context."""
    import torch
    import transformers

    cpu, isa = "unknown", []
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        cpu = re.search(r"Model name:\s*(.+)", out).group(1).strip()
        flags = (re.search(r"Flags:\s*(.+)", out) or re.search("()", "")).group(1).split()
        isa = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_tile") if f in flags]
    except Exception:  # noqa: BLE001 - lscpu missing is not fatal for a benchmark
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "isa": isa, "torch": torch.__version__,
            "transformers": transformers.__version__, "python": platform.python_version(),
            "threads": threads, "load_avg": os.getloadavg()}


def render(rows: list[dict], info: dict, *, model_line: str, command: str, new: int, repeats: int) -> str:
    """The docs/benchmarks.md section body: machine, settings, one table row per measurement."""
    load = " / ".join(f"{x:.1f}" for x in info["load_avg"])
    lines = [
        f"Machine: {info['cpu']}, {info['cores']} cores ({', '.join(info['isa']) or 'no AVX2'}); torch "
        f"{info['torch']}, transformers {info['transformers']}, Python {info['python']}; "
        f"torch threads {info['threads']}. Load average at the end: {load} (1/5/15 min).",
        "",
        f"Command: `{command}`",
        "",
        f"Model: {model_line}. {new} new tokens a row, no stop tokens, fp32; tokens/s by process CPU "
        f"time, best of {repeats}, `generate` and the engine alternating.",
        "",
        "| batch | mode | settings | `generate` tok/s | `hf` engine tok/s | ratio |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['batch']} | {r['mode']} | {r['settings']} | {r['generate']:.0f} | {r['engine']:.0f} "
                     f"| **{r['ratio']:.2f}x** |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=("tiny", "qwen-vocab"), default="tiny")
    ap.add_argument("--preset", default="demo", help="tiny model preset (--model tiny)")
    ap.add_argument("--layers", type=int, default=2, help="decoder layers (--model qwen-vocab)")
    ap.add_argument("--hidden", type=int, default=256, help="hidden size (--model qwen-vocab)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--batches", default="1,16,64")
    ap.add_argument("--modes", default="greedy,sample", help=f"comma-separated, of {', '.join(MODES)}")
    ap.add_argument("--no-extra", action="store_true", help="skip the tail and GRPO-shape rows")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--write", type=Path, help="replace this model's section of this markdown file")
    args = ap.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    if unknown := [m for m in modes if m not in MODES]:
        ap.error(f"unknown mode(s) {unknown}; known: {', '.join(MODES)}")

    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    from trainer.rollout.base import GenerationRequest, SamplingParams
    from trainer.rollout.hf import HFRolloutEngine

    torch.set_num_threads(args.threads)
    if args.model == "tiny":
        from trainer.models.tiny import make_tiny_model

        path = make_tiny_model(tempfile.mkdtemp(prefix="bench_tiny_"), preset=args.preset)
    else:
        from tests.fixtures.families import build

        path = build("qwen2.5", Path(tempfile.mkdtemp(prefix="bench_qwen_vocab_")), layers=args.layers,
                     hidden=args.hidden, heads=4, kv_heads=2)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(args.device).eval()
    model.generation_config = GenerationConfig()  # only the bench's settings (see the docstring)
    params = sum(p.numel() for p in model.parameters())
    engine = HFRolloutEngine(model, pad_token_id=0, device=args.device)
    vocab = model.config.vocab_size
    new = args.new_tokens
    cfg = model.config
    head_share = vocab * cfg.hidden_size / max(1, params)  # tied: the embedding is the lm-head
    if args.model == "tiny":
        model_line = f"tiny `{args.preset}` ({params / 1e6:.2f} M params, vocabulary {vocab:,})"
    else:
        model_line = (f"Qwen2.5-format folder from tests/fixtures/families.py, vocabulary {vocab:,}, "
                      f"{cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, {cfg.num_attention_heads} heads "
                      f"/ {cfg.num_key_value_heads} KV heads, MLP {cfg.intermediate_size}, tied embeddings "
                      f"({params / 1e6:.1f} M params, {100 * head_share:.0f}% of them the embedding = lm-head)")

    def prompts(batch: int) -> list[list[int]]:
        rng = random.Random(batch)
        return [[rng.randrange(10, vocab) for _ in range(rng.randint(24, 40))] for _ in range(batch)]

    def run_generate(ps: list[list[int]], mode: str) -> float:
        temp, top_k, top_p = MODES[mode]
        width = max(map(len, ps))
        ids = torch.tensor([[0] * (width - len(p)) + p for p in ps], device=args.device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in ps], device=args.device)
        sampling = dict(do_sample=True, temperature=temp, top_k=top_k, top_p=top_p) if temp > 0 else dict(do_sample=False)
        gc = GenerationConfig(max_new_tokens=new, pad_token_id=0, eos_token_id=None, **sampling)
        t0 = time.process_time()
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=mask, generation_config=gc)
        dt = time.process_time() - t0
        assert out.shape[1] - width == new
        return dt

    def run_engine(ps: list[list[int]], mode: str, budgets: list[int] | None = None) -> tuple[float, int]:
        temp, top_k, top_p = MODES[mode]
        reqs = [GenerationRequest(str(i), p, SamplingParams(temperature=temp, top_k=top_k or -1, top_p=top_p,
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

    def settings(mode: str) -> str:
        temp, top_k, top_p = MODES[mode]
        return "argmax" if temp <= 0 else f"T {temp:g}, top-k {top_k or 'off'}, top-p {top_p:g}"

    rows: list[dict] = []

    def report(batch: int | str, mode: str, toks: int, g: float, e: float, note: str = "") -> None:
        rows.append({"batch": batch, "mode": mode, "settings": settings("sample" if mode in ("tail", "grpo") else mode)
                     + note, "generate": toks / g, "engine": toks / e, "ratio": g / e})
        print(f"{batch:>5} {mode:>8} | {toks / g:>14.0f} | {toks / e:>12.0f} | {g / e:>6.2f}x", flush=True)

    print(f"model: {model_line}, fp32, device {args.device}, torch threads {args.threads}, {new} new tokens/row, "
          f"best of {args.repeats}, tok/s by CPU time")
    header = f"{'batch':>5} {'mode':>8} | {'generate tok/s':>14} | {'engine tok/s':>12} | {'speedup':>7}"
    print(header)
    print("-" * len(header))
    for batch in [int(b) for b in args.batches.split(",")]:
        ps = prompts(batch)
        run_engine(ps, "greedy")  # warm up both paths once
        run_generate(ps, "greedy")
        for mode in modes:
            g, e = best_pair(lambda: run_generate(ps, mode), lambda: run_engine(ps, mode)[0])
            report(batch, mode, batch * new, g, e)
        if batch > 1 and not args.no_extra:
            rng = random.Random(7)
            budgets = [rng.randint(8, new) for _ in range(batch)]
            budgets[0] = new
            useful = sum(budgets)
            # generate must run all rows to `new`; count only the useful tokens for both.
            g, e = best_pair(lambda: run_generate(ps, "sample"), lambda: run_engine(ps, "sample", budgets)[0])
            report(batch, "tail", useful, g, e, f"; budgets 8..{new}, useful tokens only")
    if not args.no_extra:
        # GRPO shape: 8 distinct prompts of 150..170 tokens (a tool schema in the system turn) x 8 samples.
        rng = random.Random(99)
        distinct = [[rng.randrange(10, vocab) for _ in range(rng.randint(150, 170))] for _ in range(8)]
        ps = [p for p in distinct for _ in range(8)]
        run_engine(ps, "sample")
        g, e = best_pair(lambda: run_generate(ps, "sample"), lambda: run_engine(ps, "sample")[0])
        report("8x8", "grpo", len(ps) * new, g, e, "; 8 prompts of ~160 tokens x 8 samples")
        print("      (grpo: the engine prefills each prompt once for its 8 samples)")
    if args.write:
        from md_sections import replace_section

        name = "rollout_vs_generate" if args.model == "tiny" else f"rollout_vs_generate_{args.model.replace('-', '_')}"
        begin, end = f"<!-- bench:{name}:begin -->", f"<!-- bench:{name}:end -->"
        title = ("## Rollout: the `hf` engine against `model.generate`, tiny model" if args.model == "tiny" else
                 "## Rollout: the `hf` engine against `model.generate` at Qwen's 151,936-token vocabulary")
        command = "python bench/rollout_vs_generate.py " + " ".join(argv if argv is not None else sys.argv[1:])
        body = render(rows, machine(args.threads), model_line=model_line, command=command, new=new,
                      repeats=args.repeats)
        replace_section(args.write, f"{begin}\n{title}\n\n{body}{end}\n", begin=begin, end=end)
        print(f"wrote {args.write} ({name})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
