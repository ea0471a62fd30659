"""Where events go: the `Emitter` (numbering, validation, fan-out) and the sink backends.

Every event is `{"seq", "type", "time", "data"}` (schema: trainer.events). The Emitter stamps a
per-run sequence number that continues after a resume (it reads the last seq already written to
`events.jsonl`), validates the event, and hands it to each sink. Sinks are picked by name from
`trainer.logger` through a registry whose names are exactly the schema's `trainer.config.LOGGERS`
(the one list of sink names; tests/trainer/test_loggers.py keeps the two equal):

  jsonl        always on: `<default_local_dir>/events.jsonl`, one event a line, flushed per event
  console      a compact progress line per step, status / log / checkpoint lines
  tensorboard  scalar metrics (torch.utils.tensorboard; needs the tensorboard package)
  wandb        scalar metrics (needs wandb; on the platform, the operator's W&B: see `tracker_run`)
  mlflow       scalar metrics (needs mlflow; '@' in names becomes '_at_' as verl does)
  http         the platform's ingest API (its own module, trainer/sinks_http.py)

Trackers are imported only when asked for; a listed tracker that is not installed is an error, not a
silent skip. A new sink registers itself with `@register_sink(name)` and needs its name added to
`LOGGERS` (the config refuses any other name).
"""
from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from trainer.sink_registry import _SINKS, Sink, available_sinks, register_sink

__all__ = ["EVENTS_FILE", "Emitter", "Sink", "TrackerMissing", "available_sinks", "build_sinks", "last_seq",
           "path_part", "register_sink"]

EVENTS_FILE = "events.jsonl"


def build_sinks(names: list[str], *, out_dir: Path, config: Any = None) -> list[Sink]:
    """Build the sinks `names` (jsonl is always included, once)."""
    ordered = ["jsonl"] + [n for n in names if n != "jsonl"]
    sinks = []
    for name in dict.fromkeys(ordered):
        if name not in _SINKS:
            raise ValueError(f"trainer.logger: unknown sink {name!r}; known: {available_sinks()}")
        sinks.append(_SINKS[name](out_dir=Path(out_dir), config=config))
    return sinks


def last_seq(path: Path) -> int:
    """The seq of the last complete event in an events.jsonl (0 when missing or empty)."""
    path = Path(path)
    if not path.exists():
        return 0
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        size = fh.tell()
        block = min(size, 1 << 16)
        while True:
            fh.seek(size - block)
            lines = fh.read(block).splitlines()
            # The first line of a partial block may be cut; only trust it when the block is the file.
            candidates = lines if block == size else lines[1:]
            for raw in reversed(candidates):
                try:
                    return int(json.loads(raw)["seq"])
                except (ValueError, KeyError, TypeError):
                    continue  # a torn last line from a killed process: look further back
            if block == size:
                return 0
            block = min(size, block * 4)


class Emitter:
    """Numbers, validates and fans out events. Thread-safe (the heartbeat thread emits too)."""

    def __init__(self, sinks: list[Sink], *, start_seq: int = 0, validate: bool = True):
        self.sinks = sinks
        self.seq = int(start_seq)
        self._lock = threading.Lock()
        self._validate = validate

    def emit(self, type_: str, data: dict[str, Any], *, at: float | None = None) -> dict[str, Any]:
        """Number and send one event, stamped `at` (unix seconds: when it happened, for an event
        measured elsewhere and forwarded later) or now."""
        with self._lock:
            event = {"seq": self.seq + 1, "type": type_, "time": time.time() if at is None else float(at),
                     "data": data}
            if self._validate:
                from trainer.events.wire import validate_event

                event = validate_event(event).to_dict()
            self.seq += 1
            for sink in self.sinks:
                sink.write(event)
            return event

    # Convenience wrappers, one per event type.
    def status(self, state: str, message: str = "", *, step: int = 0, total_steps: int = 0) -> dict[str, Any]:
        return self.emit("status", {"state": state, "message": message, "step": step, "total_steps": total_steps})

    def heartbeat(self, step: int) -> dict[str, Any]:
        return self.emit("heartbeat", {"step": step})

    def metrics(self, step: int, metrics: dict[str, float]) -> dict[str, Any]:
        return self.emit("metrics", {"step": step, "metrics": metrics})

    def log(self, level: str, message: str) -> dict[str, Any]:
        return self.emit("log", {"level": level, "message": message})

    def checkpoint(self, step: int, path: str) -> dict[str, Any]:
        return self.emit("checkpoint", {"step": step, "path": str(path)})

    def sample(self, data: dict[str, Any]) -> dict[str, Any]:
        return self.emit("sample", data)

    def memory(self, data: dict[str, Any], *, at: float | None = None) -> dict[str, Any]:
        return self.emit("memory", data, at=at)

    def flush(self) -> None:
        with self._lock:
            for sink in self.sinks:
                sink.flush()

    def close(self) -> None:
        with self._lock:
            for sink in self.sinks:
                sink.close()


@register_sink("jsonl")
class JsonlSink(Sink):
    """Appends one JSON line per event to `<out_dir>/events.jsonl`, flushed at once (crash-safe)."""

    def __init__(self, *, out_dir: Path, config: Any = None):
        out_dir.mkdir(parents=True, exist_ok=True)
        self.path = out_dir / EVENTS_FILE
        # A process killed mid-write leaves a torn last line: start on a fresh line so the next event
        # is not glued to it (readers skip the torn fragment).
        torn = False
        if self.path.exists() and self.path.stat().st_size:
            with open(self.path, "rb") as fh:
                fh.seek(-1, os.SEEK_END)
                torn = fh.read(1) != b"\n"
        self._fh: TextIO = open(self.path, "a", encoding="utf-8")
        if torn:
            self._fh.write("\n")

    def write(self, event: dict[str, Any]) -> None:
        self._fh.write(json.dumps(event, ensure_ascii=False, separators=(",", ":")) + "\n")
        self._fh.flush()

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.flush()
            self._fh.close()


@register_sink("console")
class ConsoleSink(Sink):
    """A compact line per step with a progress bar; status, log and checkpoint events as lines.

    `num_turns/mean` is printed under its own name: it counts as verl's agent loop does (the prompt,
    the generations and the rounds of tool replies: 2 for one answer), while a sample's own turns (the
    samples page) are its assistant turns (1 for one answer); a bare "turns" read as the latter."""

    KEYS = [("critic/score/mean", "score"), ("actor/pg_loss", "pg"), ("actor/kl_loss", "kl"),
            ("actor/entropy", "ent"), ("actor/grad_norm", "gnorm"), ("response_length/mean", "len"),
            ("num_turns/mean", "num_turns/mean"), ("timing_s/step", "s/step")]

    def __init__(self, *, out_dir: Path | None = None, config: Any = None, stream: TextIO | None = None):
        self.stream = stream or sys.stdout
        self.total = 0

    def _print(self, line: str) -> None:
        print(line, file=self.stream, flush=True)

    def write(self, event: dict[str, Any]) -> None:
        t, d = event["type"], event["data"]
        if t == "status":
            self.total = int(d.get("total_steps") or self.total)
            msg = f" {d['message']}" if d.get("message") else ""
            self._print(f"[status] {d['state']} step {d.get('step', 0)}/{self.total}{msg}")
        elif t == "metrics":
            step, m = int(d["step"]), d["metrics"]
            width = 20
            done = int(width * step / self.total) if self.total else 0
            bar = "#" * done + "." * (width - done)
            parts = [f"{short} {m[k]:.4g}" for k, short in self.KEYS if k in m]
            parts += [f"{k} {v:.4g}" for k, v in m.items() if k.startswith("val-core/")]
            self._print(f"[{bar}] step {step}/{self.total or '?'} " + " | ".join(parts))
        elif t == "log":
            self._print(f"[{d['level']}] {d['message']}")
        elif t == "checkpoint":
            self._print(f"[checkpoint] step {d['step']} -> {d['path']}")


def _scalars(event: dict[str, Any]) -> tuple[int, dict[str, float]] | None:
    if event["type"] != "metrics":
        return None
    return int(event["data"]["step"]), {k: float(v) for k, v in event["data"]["metrics"].items()}


class TrackerMissing(RuntimeError):
    """trainer.logger lists a tracker whose package is not installed (a setup error, not a crash)."""


def _require(module: str, sink: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise TrackerMissing(f"trainer.logger lists {sink!r} but {module.split('.')[0]!r} is not installed "
                           f"(pip install {sink}); remove it from trainer.logger or install it") from exc


def path_part(name: Any) -> str:
    """A name made safe as one folder name: letters, digits, '.', '_' and '-' kept, anything else
    (separators included) as '_', no leading dots, at most 64 characters, never empty."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", str(name))[:64].lstrip(".")
    return safe or "_"


@register_sink("tensorboard")
class TensorBoardSink(Sink):
    """Scalars under $TENSORBOARD_DIR or <out_dir>/tensorboard_log/<project>/<experiment>."""

    def __init__(self, *, out_dir: Path, config: Any = None):
        _require("tensorboard", "tensorboard")
        tb = _require("torch.utils.tensorboard", "tensorboard")
        project = path_part(getattr(getattr(config, "trainer", None), "project_name", "rlstudio"))
        exp = path_part(getattr(getattr(config, "trainer", None), "experiment_name", "run"))
        log_dir = os.environ.get("TENSORBOARD_DIR") or str(out_dir / "tensorboard_log" / project / exp)
        self.writer = tb.SummaryWriter(log_dir=log_dir)

    def write(self, event: dict[str, Any]) -> None:
        got = _scalars(event)
        if got:
            step, metrics = got
            for k, v in metrics.items():
                self.writer.add_scalar(k, v, step)

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def _secret_from_file(variable: str) -> str:
    """A secret the platform handed over in a file (the environment holds only its path; '' when the
    variable is unset). An unreadable file is an error: the run would report nowhere."""
    path = os.environ.get(variable, "")
    if not path:
        return ""
    try:
        return Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise RuntimeError(f"{variable}: cannot read {path!r}: {exc.strerror or exc}") from None


_LINEAGE = re.compile(r"[A-Za-z0-9_-]{1,128}")


def tracker_run(config: Any) -> dict[str, Any]:
    """What a tracker run is called and given: project, name, config, tags and a stable id.

    By hand: `trainer.project_name`, `trainer.experiment_name` and the whole config. A platform run (its
    job's environment, runs.trackers): the id of its resume chain (RLSTUDIO_TRACKER_RUN_ID: a resume
    continues the same tracker run), the platform run's name when experiment_name is left at its
    default, its tags, the user's view of the config (RLSTUDIO_TRACKER_CONFIG_FILE: no server path), and
    for a fork the parent's tracker run id and the step it was forked at (RLSTUDIO_TRACKER_FORK_OF,
    RLSTUDIO_TRACKER_FORK_STEP: a fork is a tracker run of its own, which records them).
    """
    tr = getattr(config, "trainer", None)
    name = getattr(tr, "experiment_name", "run")
    run_id = os.environ.get("RLSTUDIO_TRACKER_RUN_ID", "")
    if run_id and not _LINEAGE.fullmatch(run_id):
        raise RuntimeError("RLSTUDIO_TRACKER_RUN_ID: letters, digits, '_' and '-' only")
    if run_id and name == "run":
        name = os.environ.get("RLSTUDIO_TRACKER_RUN_NAME") or name
    view = os.environ.get("RLSTUDIO_TRACKER_CONFIG_FILE", "")
    if view:
        data = json.loads(Path(view).read_text(encoding="utf-8"))
    else:
        data = config.to_dict() if config is not None else None
    tags = json.loads(os.environ.get("RLSTUDIO_TRACKER_TAGS") or "[]")
    fork_of = os.environ.get("RLSTUDIO_TRACKER_FORK_OF", "")
    if fork_of and not _LINEAGE.fullmatch(fork_of):
        raise RuntimeError("RLSTUDIO_TRACKER_FORK_OF: letters, digits, '_' and '-' only")
    fork_step = os.environ.get("RLSTUDIO_TRACKER_FORK_STEP", "")
    return {"project": getattr(tr, "project_name", "rlstudio"), "name": name, "config": data,
            "tags": [str(t) for t in tags] if isinstance(tags, list) else [], "id": run_id or None,
            "fork_of": fork_of or None, "fork_step": int(fork_step) if fork_step.isascii() and fork_step.isdigit() else None}


def fork_note(run: dict[str, Any]) -> str:
    """"fork of <parent's tracker run id> at step N" for a fork's tracker run, else ""."""
    if not run["fork_of"]:
        return ""
    return f"fork of {run['fork_of']}" + (f" at step {run['fork_step']}" if run["fork_step"] is not None else "")


@register_sink("wandb")
class WandbSink(Sink):
    """Scalar metrics to a W&B run (wandb.init): by hand, wandb's own login and settings; on the platform,
    the operator's key (RLSTUDIO_WANDB_API_KEY_FILE, given to wandb.Settings, never written to a
    .netrc), server (RLSTUDIO_WANDB_BASE_URL) and entity (RLSTUDIO_WANDB_ENTITY), with the run id
    of its resume chain (resume="allow": a resumed run continues it); a fork's run has the note "fork of
    <parent's run id> at step N" (W&B's own fork_from is a preview feature that a server may lack)."""

    def __init__(self, *, out_dir: Path, config: Any = None):
        self.wandb = _require("wandb", "wandb")
        run = tracker_run(config)
        kwargs: dict[str, Any] = {"project": run["project"], "name": run["name"], "dir": str(out_dir),
                                  "config": run["config"]}
        if run["tags"]:
            kwargs["tags"] = run["tags"]
        if run["id"]:
            kwargs.update(id=run["id"], resume="allow")
        if fork_note(run):
            kwargs["notes"] = fork_note(run)
        if os.environ.get("RLSTUDIO_WANDB_ENTITY"):
            kwargs["entity"] = os.environ["RLSTUDIO_WANDB_ENTITY"]
        chosen = {"api_key": _secret_from_file("RLSTUDIO_WANDB_API_KEY_FILE"),
                  "base_url": os.environ.get("RLSTUDIO_WANDB_BASE_URL", "")}
        chosen = {k: v for k, v in chosen.items() if v}
        if chosen:
            kwargs["settings"] = self.wandb.Settings(**chosen)
        self.run = self.wandb.init(**kwargs)

    def write(self, event: dict[str, Any]) -> None:
        got = _scalars(event)
        if got:
            self.run.log(got[1], step=got[0])

    def close(self) -> None:
        self.run.finish()


@register_sink("mlflow")
class MlflowSink(Sink):
    """Scalar metrics to an MLflow run ('@' in names as '_at_', as verl does); the config as the run's
    config.json artifact. By hand, MLflow's own environment; on the platform, the operator's tracking
    URI (RLSTUDIO_MLFLOW_TRACKING_URI), user name, and token or password read from their files into this
    process's MLFLOW_TRACKING_* variables (MLflow reads credentials only from there). A platform run is
    tagged `rlstudio.lineage` with its resume chain's id, and a resume continues the run so tagged; a
    fork's new run is tagged `rlstudio.fork_of` (the parent's lineage id) and `rlstudio.fork_step`."""

    def __init__(self, *, out_dir: Path, config: Any = None):
        self.mlflow = _require("mlflow", "mlflow")
        run = tracker_run(config)
        if os.environ.get("RLSTUDIO_MLFLOW_TRACKING_URI"):
            self.mlflow.set_tracking_uri(os.environ["RLSTUDIO_MLFLOW_TRACKING_URI"])
        for variable, value in (
                ("MLFLOW_TRACKING_USERNAME", os.environ.get("RLSTUDIO_MLFLOW_TRACKING_USERNAME", "")),
                ("MLFLOW_TRACKING_TOKEN", _secret_from_file("RLSTUDIO_MLFLOW_TRACKING_TOKEN_FILE")),
                ("MLFLOW_TRACKING_PASSWORD", _secret_from_file("RLSTUDIO_MLFLOW_TRACKING_PASSWORD_FILE"))):
            if value:
                os.environ[variable] = value
        experiment = self.mlflow.set_experiment(run["project"])
        earlier = None
        if run["id"]:
            found = self.mlflow.tracking.MlflowClient().search_runs(
                experiment_ids=[experiment.experiment_id], max_results=1,
                filter_string=f"tags.`rlstudio.lineage` = '{run['id']}'")
            earlier = found[0].info.run_id if found else None
        if earlier:
            self.run = self.mlflow.start_run(run_id=earlier)
        else:
            tags = {"rlstudio.lineage": run["id"]} if run["id"] else {}
            if run["tags"]:
                tags["rlstudio.tags"] = ",".join(run["tags"])
            if run["fork_of"]:
                tags["rlstudio.fork_of"] = run["fork_of"]
                if run["fork_step"] is not None:
                    tags["rlstudio.fork_step"] = str(run["fork_step"])
            self.run = self.mlflow.start_run(run_name=run["name"], tags=tags or None)
            if run["config"] is not None:
                self.mlflow.log_dict(run["config"], "config.json")

    def write(self, event: dict[str, Any]) -> None:
        got = _scalars(event)
        if got:
            self.mlflow.log_metrics({k.replace("@", "_at_"): v for k, v in got[1].items()}, step=got[0])

    def close(self) -> None:
        self.mlflow.end_run()


# The platform's HTTP sink registers itself as "http" (its own module: it owns a sender thread; it
# imports the registry, never this module).
from trainer import sinks_http as _sinks_http  # noqa: E402,F401
