"""The playground's generation speed (issue 19, item 3): what streaming in chunks costs and how fast a
stop is heard.

    .venv/bin/python bench/playground.py [--presets smoke,demo] [--model PATH] [--tokens 256] [--repeats 5]
                                          [--threads 1] [--write]

For each model (the tiny model's presets, random weights, built in a temporary folder; `--model` adds a
Hugging Face folder of your own):
- one-shot: the `hf` engine's own `generate` of `--tokens` greedy tokens (no stop token), tokens/s;
- streamed: the same request through `trainer.playground.StreamingEngine` (chunks of 2, 4, ..., 32
  tokens, each a fresh `generate` over the prompt and the text so far), tokens/s and its ratio to
  one-shot: the price of re-reading the context once per chunk;
- first text: from the request to the first streamed text (the first 2-token chunk);
- stop: the stop flag is set at a random moment of a long answer (from a second thread, as the
  platform's pump does); the time until `Stopped` is raised (median and max over `--repeats`).
Model loading is not timed. `--write` puts the table into docs/benchmarks.md (section
`bench:playground`) with the machine it ran on.
"""
from __future__ import annotations

import argparse
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROMPT = "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May."


def _engine(path: str):
    from trainer.evaluate import load_policy
    from trainer.models.hf_folder import load_tokenizer
    from trainer.rollout.base import build_engine

    tok = load_tokenizer(path, model_path=path)
    model = load_policy(path, None)
    return build_engine("hf", model=model, tokenizer=tok, config={}, device="cpu"), tok


def _request(tok, n: int):
    from trainer.rollout.base import GenerationRequest, SamplingParams

    ids = tok(PROMPT, add_special_tokens=False)["input_ids"]
    return GenerationRequest("bench", ids, SamplingParams(temperature=0.0, max_new_tokens=n))


def measure(path: str, *, tokens: int, repeats: int) -> dict:
    from trainer.playground import Stopped, StreamingEngine

    inner, tok = _engine(path)
    one, streamed, first, stops = [], [], [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = inner.generate([_request(tok, tokens)])[0]
        one.append(len(out.output_ids) / (time.perf_counter() - t0))
        seen: list[float] = []
        t0 = time.perf_counter()
        eng = StreamingEngine(inner, tokenizer=tok, on_text=lambda *a: seen.append(time.perf_counter()),
                              should_stop=lambda: False)
        out = eng.generate([_request(tok, tokens)])[0]
        streamed.append(len(out.output_ids) / (time.perf_counter() - t0))
        first.append((seen[0] - t0) if seen else float("nan"))
        # a stop at a random moment of a long answer, set from another thread
        flag = threading.Event()
        eng = StreamingEngine(inner, tokenizer=tok, on_text=lambda *a: None, should_stop=flag.is_set)
        at: list[float] = []

        def later(delay: float) -> None:
            time.sleep(delay)
            at.append(time.perf_counter())
            flag.set()

        timer = threading.Thread(target=later, args=(random.uniform(0.05, 0.5),))
        timer.start()
        try:
            eng.generate([_request(tok, 100_000)])
        except Stopped:
            stops.append(time.perf_counter() - at[0])
        timer.join()
    return {"one_shot_tps": statistics.median(one), "streamed_tps": statistics.median(streamed),
            "first_text_s": statistics.median(first), "stop_median_s": statistics.median(stops),
            "stop_max_s": max(stops), "repeats": repeats, "tokens": tokens}


def machine(threads: int) -> str:
    import torch

    cpu = next((line.split(":", 1)[1].strip() for line in
                subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
                if line.startswith("Model name")), platform.processor())
    try:
        load = ", ".join(f"{x:.1f}" for x in __import__("os").getloadavg())
    except OSError:
        load = "?"
    return f"{cpu}, torch {torch.__version__}, {threads} thread(s), load average {load}"


def table(rows: list[tuple[str, dict]]) -> str:
    lines = ["| model | one-shot tok/s | streamed tok/s | streamed / one-shot | first text | stop heard after (median, max) |",
             "|---|---|---|---|---|---|"]
    for name, r in rows:
        lines.append(f"| {name} | {r['one_shot_tps']:.0f} | {r['streamed_tps']:.0f} | "
                     f"{r['streamed_tps'] / r['one_shot_tps']:.2f}x | {1000 * r['first_text_s']:.0f} ms | "
                     f"{1000 * r['stop_median_s']:.0f} ms, {1000 * r['stop_max_s']:.0f} ms |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--presets", default="smoke,demo", help="tiny-model presets to build (comma-separated)")
    ap.add_argument("--model", action="append", default=[], help="a Hugging Face model folder to add")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--write", action="store_true", help="write the table into docs/benchmarks.md")
    args = ap.parse_args(argv)
    import torch

    from trainer.models.tiny import make_tiny_model

    torch.set_num_threads(args.threads)
    random.seed(0)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        paths = [(f"tiny `{p}` preset", str(make_tiny_model(Path(tmp) / p, preset=p, seed=0)))
                 for p in args.presets.split(",") if p]
        paths += [(Path(m).name, m) for m in args.model]
        for name, path in paths:
            r = measure(path, tokens=args.tokens, repeats=args.repeats)
            rows.append((name, r))
            print(name, {k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()}, flush=True)
    text = table(rows)
    where = machine(args.threads)
    print(text)
    print(where)
    if args.write:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from md_sections import replace_section

        begin, end = "<!-- bench:playground:begin -->", "<!-- bench:playground:end -->"
        body = (f"{begin}\n### Playground: streaming in chunks and stopping (`bench/playground.py`)\n\n"
                f"{args.tokens} greedy tokens after a {len(PROMPT)}-character prompt, median of {args.repeats}; "
                "model loading not timed. Streamed = `trainer.playground.StreamingEngine` (chunks of 2, 4, "
                "..., 32 tokens, each re-reading the context); stop = from the flag being set (another thread, "
                "at a random moment) to the generation giving up.\n\n"
                f"{text}\n\nMachine: {where}.\n{end}\n")
        replace_section(REPO / "docs" / "benchmarks.md", body, begin=begin, end=end)
    return 0


if __name__ == "__main__":
    sys.exit(main())
