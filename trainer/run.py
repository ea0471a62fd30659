"""`python -m trainer run`: train with GRPO from a run spec or a recipe, with graceful stop.

    python -m trainer run SPEC.json [key=value ...] [--output DIR]
    python -m trainer run --recipe cpu_smoke [key=value ...] [--output DIR] [--prepare-demo]

`--prepare-demo` makes what a demo run needs when it is missing: a tiny model (smoke preset, or
demo with `--demo-preset demo`) in `<output>/tiny_model` and the arithmetic demo data in
`<output>/demo_data`, and points `actor_rollout_ref.model.path` / `data.train_files` /
`data.val_files` at them (only where those keys are empty).

Signals: the first SIGTERM/SIGINT sets a flag; the loop finishes the current step, writes a
checkpoint, reports status `stopped` and exits 0. A second signal exits at once (status 130).
Status events: starting -> running -> succeeded | stopped | failed (failed carries the traceback,
or for a run over its disk budget the budget's message, and the exit code is 1). A config refused
before the start, or a tracker in trainer.logger whose package is missing, is one `error:` line on
stderr and exit code 2.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Any


class StopFlag:
    """Set by the first SIGTERM/SIGINT; the second one exits immediately."""

    def __init__(self) -> None:
        self.requested = False
        self.signal_name = ""

    def __call__(self) -> bool:
        return self.requested

    def handler(self, signum: int, _frame: Any) -> None:
        if self.requested:
            os._exit(130)  # second signal: the operator means it
        self.requested = True
        self.signal_name = signal.Signals(signum).name

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self.handler)
        signal.signal(signal.SIGINT, self.handler)


def build_config(args: argparse.Namespace) -> Any:
    from trainer.config import apply_overrides, load_config

    if args.recipe and args.spec:
        raise SystemExit("give a SPEC file or --recipe NAME, not both")
    if args.recipe:
        from trainer.recipes import get_recipe

        cfg = get_recipe(args.recipe)
    elif args.spec:
        cfg = load_config(args.spec)
    else:
        raise SystemExit("usage: python -m trainer run SPEC.json [key=value ...] | --recipe NAME [key=value ...]")
    if args.overrides:
        cfg = apply_overrides(cfg, args.overrides)
    if args.output:
        cfg = apply_overrides(cfg, {"trainer.default_local_dir": str(args.output)})
    return cfg


def prepare_demo(cfg: Any, *, preset: str = "smoke") -> Any:
    """Make the tiny model and the demo data under the output folder when the config lacks them."""
    from trainer.config import apply_overrides

    out = Path(cfg.trainer.default_local_dir)
    changes: dict[str, Any] = {}
    if not cfg.actor_rollout_ref.model.path:
        from trainer.models.tiny import make_tiny_model

        model_dir = out / "tiny_model"
        if not (model_dir / "config.json").exists():
            make_tiny_model(model_dir, preset=preset, seed=0)
        changes["actor_rollout_ref.model.path"] = str(model_dir)
    if not cfg.data.train_files:
        from trainer.tasks import arith

        data_dir = out / "demo_data"
        if not (data_dir / "train.jsonl").exists():
            arith.main([str(data_dir), "--train", "256", "--test", "32", "--sft", "0"])
        changes["data.train_files"] = str(data_dir / "train.jsonl")
        if not cfg.data.val_files:
            changes["data.val_files"] = str(data_dir / "test.jsonl")
    return apply_overrides(cfg, changes) if changes else cfg


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m trainer run", description="Train with GRPO.")
    ap.add_argument("spec", nargs="?", help="run spec (JSON, or YAML with PyYAML)")
    ap.add_argument("overrides", nargs="*", help="dotted overrides, e.g. actor_rollout_ref.rollout.n=8")
    ap.add_argument("--recipe", help="start from a named recipe (python -m trainer recipes)")
    ap.add_argument("--output", help="output folder (trainer.default_local_dir)")
    ap.add_argument("--prepare-demo", action="store_true", help="make a tiny model and demo data when missing")
    ap.add_argument("--demo-preset", default="smoke", choices=["smoke", "demo"])
    argv = list(sys.argv[1:] if argv is None else argv)
    args = ap.parse_intermixed_args(argv)  # overrides may follow an option (--output DIR key=value)
    # argparse binds the first positional to `spec`: with --recipe, a key=value there is an override.
    if args.recipe and args.spec and "=" in args.spec:
        args.overrides = [args.spec] + list(args.overrides)
        args.spec = None

    from trainer.config import ConfigError, validate

    try:
        cfg = build_config(args)
        if args.prepare_demo:
            cfg = prepare_demo(cfg, preset=args.demo_preset)
        validate(cfg)
    except (ConfigError, KeyError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return run(cfg)


def _failure_message(exc: BaseException) -> str:
    """A failed status's message: the traceback's end, or a budget's refusal as it is (not a bug)."""
    from trainer.checkpoint import DiskBudgetExceeded

    if isinstance(exc, DiskBudgetExceeded):
        return str(exc)
    return "".join(traceback.format_exception(exc))[-4000:]


def run(cfg: Any) -> int:
    """Train `cfg` in this process, reporting events; returns the process exit code."""
    import torch

    from trainer.memory import MemoryMonitor
    from trainer.sinks import EVENTS_FILE, Emitter, TrackerMissing, build_sinks, last_seq

    flag = StopFlag()
    flag.install()
    threads = cfg.trainer.torch_threads or len(os.sched_getaffinity(0))
    torch.set_num_threads(int(threads))
    out_dir = Path(cfg.trainer.default_local_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        sinks = build_sinks(list(cfg.trainer.logger), out_dir=out_dir, config=cfg)
    except TrackerMissing as exc:  # verl's default logger list names wandb: say so, not a traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2
    emitter = Emitter(sinks, start_seq=last_seq(out_dir / EVENTS_FILE))
    monitor = None
    trainer = None
    try:
        emitter.status("starting", "loading the model")  # no server path: readers of the run see it
        from trainer.loop import Trainer

        trainer = Trainer(cfg, emitter=emitter, should_stop=flag)
        trainer.setup()
        device = trainer.device.type if trainer.device.type == "cpu" else f"cuda:{trainer.device.index or 0}"
        # The workers sample memory (rank-tagged, every phase); the driver only sends heartbeats.
        monitor = MemoryMonitor(emitter, device=device, memory_interval_s=0,
                                heartbeat_interval_s=cfg.report.heartbeat_interval_s)
        trainer.monitor = monitor
        monitor.start()
        outcome = trainer.fit()
        monitor.stop()
        if outcome == "stopped":
            emitter.status("stopped", f"stopped by {flag.signal_name or 'request'} after a checkpoint",
                           step=trainer.global_step, total_steps=trainer.total_steps)
        else:
            emitter.status("succeeded", "done", step=trainer.global_step, total_steps=trainer.total_steps)
        return 0
    except BaseException as exc:  # noqa: BLE001 - every failure must reach the platform as an event
        if monitor is not None:
            monitor.stop()
        message = _failure_message(exc)
        step = trainer.global_step if trainer is not None else 0
        try:
            emitter.status("failed", message, step=step, total_steps=getattr(trainer, "total_steps", None) or 0)
        finally:
            print(message, file=sys.stderr)
        return 1
    finally:
        if trainer is not None:
            try:
                trainer.close()  # stops the workers (Ray actors, placement group, process group)
            except Exception as exc:  # noqa: BLE001 - shutting down must not hide the outcome
                print(f"warning: worker shutdown: {exc}", file=sys.stderr)
        emitter.close()


if __name__ == "__main__":
    raise SystemExit(main())
