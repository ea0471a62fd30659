"""The body of a session's Celery task: find the targets' folders again, generate on a thread of its
own (`trainer.playground.run_chat`), and pump what it emits to the session's websockets.

The pump (one asyncio loop for the session, on the task's thread) wakes every PUMP_INTERVAL_S: it takes
what the generation emitted, merges consecutive deltas of the same turn, numbers the events (seq),
appends them to the session's event log and sends them to its group as one message; it reads the
stop flag (set by Stop, or by the last websocket that leaves) and watches the time limit
(RLSTUDIO_PLAYGROUND_MAX_S): either tells the generation to stop, which it hears between two chunks.
At the end the session is stored with each target's answer, then an "end" event is sent.

Paths: a model target is its catalog record's folder; a checkpoint target is the run's base model
(the path the platform wrote into the run's config) with the step folder found in the run's own
folder (`selectors.checkpoint_steps`). Tools, when on: a run's own tools (its config's tools.names and
its operator-registered tool set), else the trainer's built-in `calculator`; they come only from the
trainer's registry (`trainer.tools`).
"""
from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings

from . import streams
from .models import PlaygroundSession, SessionStatus
from .selectors import checkpoint_steps
from .services import session_finish, session_start

log = logging.getLogger(__name__)
S = SessionStatus
PUMP_INTERVAL_S = 0.1
JOIN_GRACE_S = 30.0  # after a stop, how long the generation may take to hear it before the task gives up
BUILTIN_TOOLS = ("calculator",)


class TargetGone(RuntimeError):
    """A target's model or checkpoint is no longer there."""


def _tool_set_config(name: str) -> dict[str, Any] | None:
    import yaml

    from rlstudio.registry.models import ToolSet
    from rlstudio.registry.models import RegistryStatus

    ts = ToolSet.objects.filter(name=name, status=RegistryStatus.READY).first()
    if ts is None:
        return None
    doc = yaml.safe_load(ts.config_yaml)
    return doc if isinstance(doc, dict) else None


def build_target(t: dict[str, Any], *, tools: bool):
    """The trainer's Target for one stored target (TargetGone when its model or step folder is gone)."""
    from rlstudio.catalog.models import ModelAsset
    from rlstudio.runs.models import Run
    from trainer.playground import Target

    if t["kind"] == "model":
        m = ModelAsset.objects.filter(pk=t["model"]).first()
        if m is None:
            raise TargetGone(f"model {t['model']} is no longer in the catalog")
        return Target(key=t["key"], model_path=str(m.path), trust_remote_code=bool(m.trust_remote_code),
                      tool_format=m.tool_parser or "hermes", tool_names=BUILTIN_TOOLS if tools else ())
    run = Run.objects.filter(pk=t["run"]).first()
    if run is None:
        raise TargetGone(f"run {t['run']} no longer exists")
    step_path = checkpoint_steps(run).get(int(t["step"]))
    if step_path is None:
        raise TargetGone(f"the checkpoint of step {t['step']} is no longer in run {run.pk}'s folder")
    cfg = run.config or {}
    arr = cfg.get("actor_rollout_ref") or {}
    model = arr.get("model") or {}
    mt = ((arr.get("rollout") or {}).get("multi_turn")) or {}
    names: tuple[str, ...] = ()
    tool_config = None
    if tools:
        names = tuple((cfg.get("tools") or {}).get("names") or ())
        tool_config = _tool_set_config(run.tool_set) if run.tool_set else None
        if not names and tool_config is None:
            names = BUILTIN_TOOLS
    return Target(key=t["key"], model_path=str(model.get("path") or ""), step_path=str(step_path),
                  tokenizer_path=model.get("tokenizer_path") or None,
                  trust_remote_code=bool(model.get("trust_remote_code")),
                  tool_format=str(mt.get("format") or "hermes"),
                  template_kwargs=dict((cfg.get("data") or {}).get("apply_chat_template_kwargs") or {}),
                  run_config=cfg, tool_config=tool_config, tool_names=names,
                  max_tool_response_length=int(mt.get("max_tool_response_length") or 1024),
                  tool_timeout_s=float(mt.get("tool_timeout_s") or 10.0))


def merge(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive deltas of the same target and turn as one (fewer, larger frames)."""
    out: list[dict[str, Any]] = []
    for e in events:
        last = out[-1] if out else None
        if (last is not None and e.get("type") == "delta" and last.get("type") == "delta"
                and last.get("target") == e.get("target") and last.get("turn") == e.get("turn")):
            out[-1] = {**last, "text": last["text"] + e["text"]}
        else:
            out.append(dict(e))
    return out


class Pump:
    """Numbers, logs and sends a session's events; see the module docstring."""

    def __init__(self, session_id: int) -> None:
        self.session_id = session_id
        self.seq = 0
        self.group = streams.group(session_id)

    async def send(self, events: list[dict[str, Any]]) -> None:
        if not events:
            return
        for e in events:
            self.seq += 1
            e["seq"] = self.seq
        streams.append(self.session_id, events)
        try:
            await get_channel_layer().group_send(self.group, {"type": "playground.events", "events": events})
        except Exception as exc:  # the log still has them: a websocket that reconnects replays them
            log.warning("playground %s: could not send to the group: %r", self.session_id, exc)

    async def run(self, inbox: queue.Queue, stop: threading.Event, worker: threading.Thread,
                  deadline: float) -> str:
        """Until the generation ends: returns why it was stopped ('' when it was not)."""
        reason = ""
        while True:
            alive = worker.is_alive()
            batch = []
            while True:
                try:
                    batch.append(inbox.get_nowait())
                except queue.Empty:
                    break
            await self.send(merge(batch))
            if not alive:
                return reason
            if not stop.is_set():
                flag = streams.stop_reason(self.session_id)
                if flag or time.monotonic() > deadline:
                    reason = flag or "time limit"
                    stop.set()
                    deadline = time.monotonic() + JOIN_GRACE_S
            elif time.monotonic() > deadline:
                return reason  # the generation did not hear the stop in time: give up on it
            await asyncio.sleep(PUMP_INTERVAL_S)


def _status(results: dict[str, dict[str, Any]], reason: str) -> tuple[str, str]:
    kinds = {r.get("type") for r in results.values()}
    if reason or "stopped" in kinds:
        return S.STOPPED, ""
    if kinds == {"error"}:
        return S.FAILED, "; ".join(str(r.get("error")) for r in results.values())[:4000]
    return S.SUCCEEDED, ""


def session_execute(*, session_id: int) -> str:
    """Run one session end to end (the task's one call). Returns its final status."""
    from trainer.playground import ChatSettings, run_chat

    session = session_start(session_id=session_id)
    if session is None:
        return "skipped"
    pump = Pump(session_id)
    st = session.settings
    try:
        targets = [build_target(t, tools=bool(st.get("tools"))) for t in session.targets]
    except TargetGone as exc:
        session_finish(session_id=session_id, status=S.FAILED, error=str(exc))
        async_to_sync(pump.send)([{"type": "end", "status": S.FAILED, "error": str(exc)}])
        return S.FAILED
    chat = ChatSettings(temperature=float(st["temperature"]), top_p=float(st["top_p"]), top_k=int(st["top_k"]),
                        max_new_tokens=int(st["max_new_tokens"]), seed=st.get("seed"), tools=bool(st["tools"]),
                        max_turns=int(st["max_turns"]))
    inbox: queue.Queue = queue.Queue()
    stop = threading.Event()
    box: dict[str, Any] = {}

    def generate() -> None:
        threads = settings.RLSTUDIO_RUN_TORCH_THREADS
        if threads:
            import torch

            torch.set_num_threads(int(threads))
        try:
            box["results"] = run_chat(targets, session.messages, chat, emit=inbox.put, should_stop=stop.is_set)
        except Exception as exc:  # run_chat reports per target; this is anything around it
            box["error"] = f"{type(exc).__name__}: {exc}"

    worker = threading.Thread(target=generate, name=f"playground-session-{session_id}", daemon=True)
    worker.start()
    reason = async_to_sync(pump.run)(inbox, stop, worker, time.monotonic() + float(settings.RLSTUDIO_PLAYGROUND_MAX_S))
    results = {k: _stored(v) for k, v in (box.get("results") or {}).items()}
    if "error" in box:
        status, error = S.FAILED, box["error"]
    elif worker.is_alive():
        status, error = S.STOPPED, ""
    else:
        status, error = _status(results, reason)
    session_finish(session_id=session_id, status=status, results=results, error=error, stop_reason=reason)
    end = PlaygroundSession.objects.get(pk=session_id)
    async_to_sync(pump.send)([{"type": "end", "status": end.status, "reason": end.stop_reason, "error": end.error}])
    return end.status


def _stored(event: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in event.items() if k != "seq"}
