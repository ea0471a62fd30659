"""The playground's generation: one conversation answered by one or two policies (a model folder, or a
checkpoint's actor weights over its base model), streamed as it is generated, stoppable between chunks.

    run_chat(targets, messages, settings, emit=callback, should_stop=callback) -> {key: result}

Each target runs on a thread of its own (side by side: both columns stream at once) through the
trainer's own rollout: the `hf` engine and `MultiTurnRollout` (the model's chat family, stop tokens
and tool-call parser; tools from the trainer's registry only). The engine is wrapped in
`StreamingEngine`, which generates each assistant turn in chunks: after every chunk it decodes the
turn so far and emits what is new, then checks `should_stop` (the platform's stop flag: the page was
left, the user pressed Stop, the time limit came). Chunks double from MIN_CHUNK to MAX_CHUNK tokens
(2, 4, 8, 16, 32, 32, ...), so the first words arrive at once and a stop is heard within one chunk.
Each chunk is a fresh `generate` call over the prompt and the turn so far (the hf engine keeps no KV
cache between calls): the prefill is paid once per chunk, which is why chunks grow instead of being
one token each. The schedule is fixed (not timed) and each chunk's seed is derived from the turn's
seed and the chunk's number, so a seeded answer is the same every time.

Events (`emit(dict)`, called from the targets' threads; the platform publishes them):
    {"type": "delta", "target", "turn", "text"}   text appended to the assistant turn `turn`
    {"type": "reset", "target", "turn", "text"}   the turn's whole text (decoding was not prefix-stable)
    {"type": "tool", "target", "turn", "name", "arguments", "result"}   a tool call and its reply
    {"type": "done", "target", "finish_reason", "turns", "tokens", "seconds", "load_seconds"}
    {"type": "stopped", "target", "tokens"}        (tokens generated before the stop)
    {"type": "error", "target", "error"}
Model text is sent as it is: escaping is the page's business (it renders text, never markup).
"""
from __future__ import annotations

import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from trainer.rollout.base import GenerationOutput, GenerationRequest, RolloutEngine

MIN_CHUNK, MAX_CHUNK = 2, 32  # tokens per chunk: the first, and the most (the stop latency's bound)
MAX_TOOL_TEXT = 2000  # characters of a tool call's arguments / reply kept in an event
MAX_TURN_CHARS = 8000  # characters kept per turn of the answer (what a message of a conversation may hold)

Emit = Callable[[dict[str, Any]], None]
_LOAD_LOCK = threading.Lock()


class Stopped(Exception):
    """Raised inside the rollout when `should_stop` says so; ends the target's thread quietly."""


@dataclass(frozen=True)
class Target:
    """What one column answers with. Paths come from the platform's records, never from a user."""

    key: str  # "a" / "b": the column
    model_path: str
    step_path: str | None = None  # a checkpoint's step folder: its actor weights over model_path
    tokenizer_path: str | None = None
    trust_remote_code: bool = False
    tool_format: str = "hermes"  # multi_turn.format: the model's tool-call parser
    template_kwargs: dict[str, Any] = field(default_factory=dict)  # data.apply_chat_template_kwargs
    run_config: dict[str, Any] | None = None  # a checkpoint's run config: its model section (LoRA settings)
    tool_config: dict[str, Any] | None = None  # a parsed tool_config ({"tools": [...]}) when tools are on
    tool_names: tuple[str, ...] = ()  # registered tools offered when tools are on
    max_tool_response_length: int = 1024
    tool_timeout_s: float = 10.0


@dataclass(frozen=True)
class ChatSettings:
    temperature: float = 0.7
    top_p: float = 1.0
    top_k: int = -1
    max_new_tokens: int = 256  # per assistant turn and for the whole answer (tool replies count)
    seed: int | None = None
    tools: bool = False
    max_turns: int = 4  # assistant turns when tools are on


class StreamingEngine(RolloutEngine):
    """Wraps an engine: generates each request in chunks, emitting the decoded text as it grows and
    raising `Stopped` between chunks when told to. One request per call (the playground's)."""

    def __init__(self, inner: RolloutEngine, *, tokenizer: Any, on_text: Callable[[int, str, bool], None],
                 should_stop: Callable[[], bool], stop_ids: Iterable[int] = ()) -> None:
        self.inner = inner
        self.tokenizer = tokenizer
        self.on_text = on_text  # (turn, text, reset): reset=True when `text` replaces the turn's text
        self.should_stop = should_stop
        self.stop_ids = set(stop_ids)
        self.keep_ids: set[int] = set()  # stop ids that are text all the same (the parser's </tool_call>)
        self.turn = -1
        self.tokens = 0

    @classmethod
    def from_config(cls, *, model: Any, tokenizer: Any, config: Any, device: Any) -> "StreamingEngine":
        raise TypeError("build the inner engine first and wrap it: StreamingEngine(inner, ...)")

    def generate(self, requests: list[GenerationRequest]) -> list[GenerationOutput]:
        return [self._one(r) for r in requests]

    def _one(self, req: GenerationRequest) -> GenerationOutput:
        self.turn += 1
        ids: list[int] = []
        logprobs: list[float] = []
        sent = ""
        chunk = MIN_CHUNK
        budget = int(req.sampling.max_new_tokens)
        finish = "length"
        part = 0
        while len(ids) < budget:
            if self.should_stop():
                raise Stopped()
            n = min(chunk, budget - len(ids))
            seed = req.sampling.seed
            if seed is not None:  # a different draw per chunk, the same for the same inputs
                seed = (int(seed) + zlib.crc32(f"chunk:{part}".encode())) % (1 << 62)
            out = self.inner.generate([GenerationRequest(f"{req.request_id}-{part}", list(req.prompt_ids) + ids,
                                                         req.sampling.replace(max_new_tokens=n, seed=seed))])[0]
            part += 1
            ids += list(out.output_ids)
            logprobs += list(out.logprobs)
            self.tokens += len(out.output_ids)
            sent = self._emit_text(ids, sent, final=False)
            if out.finish_reason == "stop":
                finish = "stop"
                break
            if not out.output_ids:
                break
            chunk = min(MAX_CHUNK, 2 * chunk)
        self._emit_text(ids, sent, final=True)
        return GenerationOutput(req.request_id, ids, logprobs, finish)  # type: ignore[arg-type]

    def _emit_text(self, ids: list[int], sent: str, *, final: bool) -> str:
        """Emit what the turn's text gained since `sent`; returns the text sent so far. Until the turn
        ends, trailing U+FFFD are held back (a character cut between two tokens may complete)."""
        shown = list(ids)
        while shown and shown[-1] in self.stop_ids and shown[-1] not in self.keep_ids:
            shown.pop()  # end-of-turn / eos are not text (the call-closing token is: the agent's rule)
        text = self.tokenizer.decode(shown, skip_special_tokens=False)  # as the transcript decodes it
        if not final:
            text = text.rstrip("\ufffd")
        if text == sent:
            return sent
        if text.startswith(sent):
            if len(text) > len(sent):
                self.on_text(self.turn, text[len(sent):], False)
        else:
            self.on_text(self.turn, text, True)
        return text

    def update_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        raise NotImplementedError("the playground never trains")

    def release_memory(self) -> None:
        self.inner.release_memory()

    def resume_memory(self) -> None:
        self.inner.resume_memory()

    def flush_cache(self) -> None:
        self.inner.flush_cache()


class _ReportingTool:
    """A tool from the registry, reporting each call and its reply as an event (the agent sees the
    tool itself: every other attribute is the tool's)."""

    def __init__(self, tool: Any, report: Callable[[str, Any, str], None]) -> None:
        self._tool, self._report = tool, report

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tool, name)

    async def execute(self, instance_id: str, arguments: dict[str, Any], **kwargs: Any) -> Any:
        try:
            result = await self._tool.execute(instance_id, arguments, **kwargs)
        except Exception as exc:
            self._report(self._tool.name, arguments, f"Error: {type(exc).__name__}: {exc}")
            raise
        self._report(self._tool.name, arguments, str(getattr(result, "text", result)))
        return result


def _tools(target: Target) -> dict[str, Any]:
    from trainer.tools import build_tools, tools_from_config

    tools = dict(build_tools(list(target.tool_names), None)) if target.tool_names else {}
    if target.tool_config is not None:
        tools.update(tools_from_config(target.tool_config, source="tool set"))
    return tools


def _load(target: Target, device: str) -> Any:
    """The target's policy: a model folder as the trainer loads it, or a checkpoint's actor over its run's
    base model (with the run's config: a LoRA checkpoint's adapter merged, as an export makes it)."""
    from trainer.evaluate import load_policy

    if target.step_path is None or target.run_config is None:
        return load_policy(target.model_path, Path(target.step_path) if target.step_path else None,
                           trust_remote_code=target.trust_remote_code, device=device)
    from trainer.export import load_step_policy

    return load_step_policy(target.run_config, Path(target.step_path)).to(device).eval()


def answer(target: Target, messages: list[dict[str, Any]], settings: ChatSettings, *, emit: Emit,
           should_stop: Callable[[], bool], device: str = "cpu") -> dict[str, Any]:
    """Answer `messages` with one target; emits its events and returns its "done" event (or raises
    `Stopped`)."""
    from trainer.data.dataset import template_prompt
    from trainer.evaluate import transcript
    from trainer.models.hf_folder import load_tokenizer
    from trainer.rollout.agent import MultiTurnRollout
    from trainer.rollout.base import SamplingParams, build_engine
    from trainer.types import PromptItem

    t0 = time.perf_counter()
    with _LOAD_LOCK:  # transformers' loading (its meta-device init) is not safe on two threads at once
        if should_stop():
            raise Stopped()
        tokenizer = load_tokenizer(target.tokenizer_path or target.model_path, model_path=target.model_path,
                                   trust_remote_code=target.trust_remote_code)
        model = _load(target, device)
    load_seconds = time.perf_counter() - t0
    tools = _tools(target) if settings.tools else {}
    schemas = [t.schema for t in tools.values()]
    prompt_ids = template_prompt(tokenizer, messages, schemas, target.template_kwargs)
    max_len = int(getattr(model.config, "max_position_embeddings", 0) or 0) or None
    if max_len is not None and len(prompt_ids) >= max_len:
        raise ValueError(f"the conversation is {len(prompt_ids)} tokens; this model reads at most {max_len}")
    rollout_cfg = {"response_length": settings.max_new_tokens, "max_model_len": max_len,
                   "multi_turn": {"enable": settings.tools, "max_turns": settings.max_turns,
                                  "format": target.tool_format, "max_parallel_calls": 1,
                                  "max_tool_response_length": target.max_tool_response_length,
                                  "tool_timeout_s": target.tool_timeout_s}}
    data_cfg = {"max_response_length": settings.max_new_tokens,
                "apply_chat_template_kwargs": dict(target.template_kwargs)}
    inner = build_engine("hf", model=model, tokenizer=tokenizer, config=rollout_cfg, device=device)

    def on_text(turn: int, text: str, reset: bool) -> None:
        emit({"type": "reset" if reset else "delta", "target": target.key, "turn": turn, "text": text})

    engine = StreamingEngine(inner, tokenizer=tokenizer, on_text=on_text, should_stop=should_stop)

    def report(name: str, arguments: Any, result: str) -> None:
        args = arguments if isinstance(arguments, str) else repr(arguments)
        emit({"type": "tool", "target": target.key, "turn": engine.turn, "name": str(name)[:100],
              "arguments": args[:MAX_TOOL_TEXT], "result": result[:MAX_TOOL_TEXT]})

    rollout = MultiTurnRollout(engine, tokenizer, {n: _ReportingTool(t, report) for n, t in tools.items()},
                               rollout_cfg, data_cfg)
    engine.stop_ids = set(rollout.stop_ids)
    engine.keep_ids = {rollout.close_id} if rollout.close_id is not None else set()
    item = PromptItem(uid=f"playground-{target.key}", index=0, messages=[dict(m) for m in messages],
                      prompt_ids=prompt_ids, tools=schemas)
    sampling = SamplingParams(temperature=settings.temperature, top_p=settings.top_p, top_k=settings.top_k,
                              max_new_tokens=settings.max_new_tokens, seed=settings.seed)
    t1 = time.perf_counter()
    try:
        traj = rollout.run([item], n=1, sampling=sampling)[0]
    except Stopped as exc:
        exc.tokens = engine.tokens  # type: ignore[attr-defined]
        emit({"type": "stopped", "target": target.key, "tokens": engine.tokens})
        raise
    finally:
        rollout.close()
    done = {"type": "done", "target": target.key, "finish_reason": str(traj.finish_reason),
            "turns": transcript(traj, max_turns=2 * settings.max_turns, max_chars=MAX_TURN_CHARS), "tokens": engine.tokens, "seconds": round(time.perf_counter() - t1, 3),
            "load_seconds": round(load_seconds, 3)}
    emit(done)
    return done


def run_chat(targets: list[Target], messages: dict[str, list[dict[str, Any]]], settings: ChatSettings, *,
             emit: Emit, should_stop: Callable[[], bool], device: str = "cpu") -> dict[str, dict[str, Any]]:
    """Answer with every target at once (a thread each); `messages` by target key. Returns each
    target's last event ("done", "stopped" or "error"); an error of one target never stops the other."""
    results: dict[str, dict[str, Any]] = {}

    def work(t: Target) -> None:
        try:
            results[t.key] = answer(t, messages[t.key], settings, emit=emit, should_stop=should_stop, device=device)
        except Stopped as exc:
            results[t.key] = {"type": "stopped", "target": t.key, "tokens": int(getattr(exc, "tokens", 0))}
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # reported; the other column goes on (torch's DCP errors are BaseExceptions)
            results[t.key] = {"type": "error", "target": t.key, "error": f"{type(exc).__name__}: {exc}"[:2000]}
            emit(results[t.key])

    threads = [threading.Thread(target=work, args=(t,), name=f"playground-{t.key}", daemon=True) for t in targets]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return results
