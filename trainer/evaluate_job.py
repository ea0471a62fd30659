"""The evaluation job: ``python -m trainer evaluate SPEC --output DIR``.

The platform writes SPEC (JSON) into the evaluation's own folder and runs this command as a Ray job:

    {"config": <the run's trainer config>, "data_file": <rows file>, "max_prompts": int,
     "columns": [{"key": "base" | "<step>", "step": int, "path": <step folder> | null}],
     "k": int, "sampling": {"temperature", "top_p", "top_k", "max_new_tokens", "seed"},
     "device": "cpu" | "cuda", "torch_threads": int | null}

and reads back what it writes into DIR: ``samples.jsonl`` (one `trainer.evaluate.Sample` a line),
then ``results.json`` (the figures and the matrix; written last, atomically: its presence means the job
finished), or ``error.json`` ({"error": "<Type>: <message>"}) with exit status 1 when it fails. Nothing
is sent over the network, so the job holds no token.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any

RESULTS, SAMPLES, ERROR = "results.json", "samples.jsonl", "error.json"


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def run_spec(spec: dict[str, Any], out: Path) -> dict[str, Any]:
    """Evaluate what `spec` says and write samples.jsonl then results.json into `out`."""
    from trainer.checkpoint import require_actor
    from trainer.data.dataset import read_rows
    from trainer.evaluate import Column, evaluate_columns

    threads = spec.get("torch_threads")
    if threads:
        import torch

        torch.set_num_threads(int(threads))
    columns = [Column(key=str(c["key"]), step=int(c["step"]), path=Path(c["path"]) if c.get("path") else None)
               for c in spec["columns"]]
    for c in columns:  # a checkpoint pruned since the evaluation was asked fails it before any work
        if c.path is not None:
            require_actor(c.path)
    rows = read_rows(spec["data_file"])[: int(spec["max_prompts"])]
    s = spec["sampling"]
    results, samples = evaluate_columns(spec["config"], columns, rows, k=int(spec["k"]),
                                        temperature=float(s["temperature"]), top_p=float(s["top_p"]),
                                        top_k=int(s["top_k"]), max_new_tokens=int(s["max_new_tokens"]),
                                        seed=int(s.get("seed", 0)), device=str(spec.get("device") or "cpu"))
    out.mkdir(parents=True, exist_ok=True)
    _write_atomic(out / SAMPLES, "".join(json.dumps(asdict(x), ensure_ascii=False) + "\n" for x in samples))
    _write_atomic(out / RESULTS, json.dumps(results, ensure_ascii=False))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer evaluate",
                                     description="evaluate checkpoints from a spec the platform wrote")
    parser.add_argument("spec", type=Path)
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args(argv)
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / ERROR).unlink(missing_ok=True)
    try:
        spec = json.loads(args.spec.read_text(encoding="utf-8"))
        results = run_spec(spec, args.output)
    except Exception as exc:  # the job fails with its reason written where the platform reads it
        traceback.print_exc()
        _write_atomic(args.output / ERROR, json.dumps({"error": f"{type(exc).__name__}: {exc}"[:4000]}))
        return 1
    for col in results["checkpoints"]:
        print(f"evaluated {col['key']}: mean@k {col['mean_at_k']:.3f} pass@k {col['pass_at_k']:.3f} "
              f"maj@k {col['maj_at_k']:.3f} ({col['samples']} samples, {col['samples_per_s']} samples/s)",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
