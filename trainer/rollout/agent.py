"""Multi-turn rollout: the request state machine between the engine, the chat template and the tools.

    MultiTurnRollout(engine, tokenizer, tools_registry, rollout_cfg, data_cfg).run(prompts, n=, sampling=)

Every (prompt, sample) is one request moving PENDING -> GENERATING -> TOOL_CALLING -> GENERATING ...
-> DONE (and, with an interaction, GENERATING -> INTERACTING -> GENERATING ...). Turns are synchronous across requests: all GENERATING requests go to the engine in ONE
`generate` call, then the tool calls of every TOOL_CALLING request run concurrently (asyncio, each
under `multi_turn.tool_timeout_s`). Single-turn rollout is the same code with max_turns=1, tools off.

Token bookkeeping (token in, token out; never re-encoded from text):
- prompt: PromptItem.prompt_ids as given (templated with tools and the generation prompt);
- assistant: the engine's output ids appended verbatim, loss_mask 1, with the engine's log-probs;
- after a tool-calling turn: the rest of the assistant turn end (e.g. `<|im_end|>\n`, only the part
  the engine did not emit itself), the tool messages and the next generation prompt, as template
  deltas with loss_mask 0 (trainer.chat.deltas: rendered after a fixed base conversation, so the
  template need not be prefix-stable; Qwen3's is not). The trajectory is exactly the ids the engine
  saw, turn after turn.
Tool calls are read by the parser `multi_turn.format` names (trainer.rollout.parser: hermes / qwen25 /
llama3), from the text after a leading `<think>...</think>` block; a transcript's tool-call arguments
are objects. Generation stops on the chat family's end-of-turn tokens (trainer.chat.families). The
deltas use `data.apply_chat_template_kwargs` (e.g. Qwen3's enable_thinking), as the prompts do.
Limits: `multi_turn.max_turns` assistant turns; the response (everything after the prompt) at most
`rollout.response_length` (or `data.max_response_length`) tokens and prompt+response at most
`rollout.max_model_len` when set: a turn gets at most the remaining budget, and a delta that does not
fit is truncated (finish_reason "length"). Tool replies longer than
`multi_turn.max_tool_response_length` characters are cut as verl cuts them (`tool_response_truncate_side`: the part kept).
Finish reasons: stop (turn ended without a tool call), length (a budget ran out), tool_calls (the
turn budget, or max_user_turns, ended while the model was calling a tool; those calls are not executed).
Bad calls never crash the rollout: malformed blocks, unknown tools, wrong arguments, a raising or
timing-out tool each become a `tool` message starting "Error:" and count in `tool_errors`. An
assistant message with a block that could not be parsed also keeps the turn's text as the model wrote
it (`raw`) and why each block failed (`tool_call_errors`: [{reason, message}]).
Only the first `multi_turn.max_parallel_calls` valid calls of a turn run (verl's truncation); with
max_parallel_calls == 1, the parser's call-closing token (`</tool_call>`) is also a stop token, so a
turn holds one call.
Tool lifecycle per request: create(**create_kwargs) for each offered tool, execute(**execute_kwargs),
then calc_reward(**calc_reward_kwargs) -> Trajectory.tool_rewards and release(**release_kwargs), the
kwargs from PromptItem.tools_kwargs[tool_name] (verl's extra_info.tools_kwargs).
Interaction (`multi_turn.interaction`, verl's interaction system; trainer.interactions): after an
assistant turn that calls no tool, the interaction (started per request with the row's
`extra_info.interaction_kwargs`, its ground truth defaulting to the row's) replies as the user:
the reply is a `user` message of the transcript and its score one of the trajectory's `turn_scores`.
If it continues the conversation, the reply enters the token sequence as a template delta (loss mask
0) and the model answers it; if it ends it (or the length budget ran out), the sample ends there, the
reply in the transcript only (no token of it would ever be read). `multi_turn.max_user_turns` counts
as verl's does: each round of tool replies and each interaction reply is a user turn, and the
assistant turn after the max_user_turns-th is the sample's last (finish_reason "tool_calls" when it
calls a tool, which is not run), with or without an interaction. Like the tools, every interacting request of a turn is asked at once.
Each call to the interaction gets `multi_turn.interaction_timeout_s`: one that times out or raises
ends that request's conversation at the model's turn (a failed start: it goes on without one), is
counted in `Trajectory.interaction_errors` and logged; the other requests go on.
Seeds: with sampling.seed set, each request's turn t samples with seed + crc32(row index,
sample, t), so the same inputs reproduce (pass a different sampling.seed per step to vary samples).
Note: a tool or an interaction that blocks without awaiting cannot be interrupted by its timeout
(asyncio limitation).
"""
from __future__ import annotations

import asyncio
import enum
import logging
import threading
import time
import zlib
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Mapping

from trainer.chat.deltas import ChatDeltas
from trainer.chat.families import closing_token_ids, detect_family, stop_token_ids
from trainer.rollout.base import GenerationOutput, GenerationRequest, RolloutEngine, SamplingParams
from trainer.rollout.parser import ToolCall, ToolCallError, get_parser, split_reasoning
from trainer.types import PromptItem, Trajectory

log = logging.getLogger(__name__)

def _cfg(obj: Any, key: str, default: Any = None) -> Any:
    """Read a config field from a dataclass section or a dict (None falls back to the default)."""
    if obj is None:
        return default
    value = obj.get(key, default) if isinstance(obj, Mapping) else getattr(obj, key, default)
    return default if value is None else value


class RequestState(enum.Enum):
    PENDING = "pending"
    GENERATING = "generating"
    TOOL_CALLING = "tool_calling"
    INTERACTING = "interacting"
    DONE = "done"


@dataclass
class _Request:
    request_id: str
    prompt: PromptItem
    position: int  # order of the prompt in the batch
    sample: int  # sample index within the prompt's group
    tools: dict[str, Any]  # offered tool name -> tool instance
    state: RequestState = RequestState.PENDING
    response_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    num_turns: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    finish_reason: str = "stop"
    pending_calls: list[ToolCall] = field(default_factory=list)
    pending_errors: list[ToolCallError] = field(default_factory=list)
    tool_rewards: dict[str, float] = field(default_factory=dict)
    step_rewards: list[float] = field(default_factory=list)
    created: list[str] = field(default_factory=list)
    last_output: list[int] = field(default_factory=list)  # the ids the engine generated last turn
    interaction_kwargs: dict[str, Any] | None = None  # None: no interaction for this request
    interaction_started: bool = False
    user_turns: int = 0  # interaction replies received
    rounds: int = 0  # verl's user_turns: rounds of tool replies and interaction replies (max_user_turns)
    turn_scores: list[float] = field(default_factory=list)  # the interaction's score of each turn
    interaction_errors: int = 0  # calls to the interaction that timed out or raised

    def finish(self, reason: str) -> None:
        self.state = RequestState.DONE
        self.finish_reason = reason

    def append(self, ids: list[int], *, generated: bool, logprobs: list[float] | None = None) -> None:
        self.response_ids.extend(ids)
        self.loss_mask.extend([1 if generated else 0] * len(ids))
        self.logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))

    def truncate(self, length: int) -> None:
        del self.response_ids[length:], self.loss_mask[length:], self.logprobs[length:]


def truncate_text(text: str, limit: int, side: str = "middle") -> str:
    """Cut `text` to `limit` characters, as verl cuts a tool reply (max_tool_response_length counts
    characters, not tokens) and with verl's meaning of `side`, the part kept: "left" keeps the start,
    "right" the end, "middle" both ends; a marker says where text went. limit <= 0 = no cut."""
    if limit <= 0 or len(text) <= limit:
        return text
    if side == "left":
        return text[:limit] + "...(truncated)"
    if side == "right":
        return "(truncated)..." + text[-limit:]
    if side != "middle":
        raise ValueError(f"tool_response_truncate_side must be left|middle|right, got {side!r}")
    half = limit // 2
    return text[:half] + "\n...(truncated)...\n" + text[len(text) - (limit - half):]


class MultiTurnRollout:
    """Runs prompts through the engine and tools; see the module docstring."""

    def __init__(self, engine: RolloutEngine, tokenizer: Any, tools_registry: Mapping[str, Any] | None,
                 rollout_cfg: Any, data_cfg: Any) -> None:
        self.engine = engine
        self.tokenizer = tokenizer
        mt = _cfg(rollout_cfg, "multi_turn", None)
        self.multi_turn = bool(_cfg(mt, "enable", False))
        # Kept by reference: the loop may register a tool that a data row names after building us.
        self.tools: Mapping[str, Any] = (tools_registry if tools_registry is not None else {}) if self.multi_turn else {}
        self.max_turns = int(_cfg(mt, "max_turns", 5)) if self.multi_turn else 1
        if self.max_turns < 1:
            raise ValueError("multi_turn.max_turns must be >= 1")
        self.max_tool_response_length = int(_cfg(mt, "max_tool_response_length", 256))
        self.truncate_side = str(_cfg(mt, "tool_response_truncate_side", "middle"))
        self.max_parallel_calls = max(1, int(_cfg(mt, "max_parallel_calls", 1)))
        self.tool_timeout_s = float(_cfg(mt, "tool_timeout_s", 10.0))
        self.interaction = None
        self.interaction_timeout_s = float(_cfg(mt, "interaction_timeout_s", 30.0))
        if self.multi_turn and _cfg(mt, "interaction", None):
            from trainer.interactions import get_interaction

            self.interaction = get_interaction(str(_cfg(mt, "interaction")))
        max_user_turns = _cfg(mt, "max_user_turns", None)
        self.max_user_turns = int(max_user_turns) if max_user_turns is not None else None
        self.response_budget = int(_cfg(rollout_cfg, "response_length", None)
                                   or _cfg(data_cfg, "max_response_length", 512))
        self.max_model_len = _cfg(rollout_cfg, "max_model_len", None)
        self.family = detect_family(tokenizer)
        self.parser = get_parser(str(_cfg(mt, "format", "hermes")))
        self.template_kwargs = dict(_cfg(data_cfg, "apply_chat_template_kwargs", None) or {})
        self.deltas = ChatDeltas(tokenizer, closing_ids=closing_token_ids(tokenizer, self.family),
                                 template_kwargs=self.template_kwargs)
        if self.multi_turn:
            self._check_parser()
        self.close_id = self._token_id(self.parser.close_token) if self.parser.close_token else None
        self.stop_ids = self._stop_ids()
        self.last_stats: dict[str, float] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def close(self) -> None:
        """Close the private event loop (a later run() opens a new one)."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.close()
        self._loop = None

    def _token_id(self, token: str) -> int | None:
        tid = self.tokenizer.convert_tokens_to_ids(token)
        unk = getattr(self.tokenizer, "unk_token_id", None)
        return None if tid is None or (unk is not None and tid == unk and token != self.tokenizer.unk_token) else int(tid)

    def _check_parser(self) -> None:
        """Refuse a parser that cannot read the tool calls this chat template renders (the model
        was trained on its template: no call would ever be parsed)."""
        from trainer.chat.check import check_template

        report = check_template(self.tokenizer, parser=self.parser.name, template_kwargs=self.template_kwargs)
        if report.supports_tools and report.parser_ok is False:
            want = f" (the template is {report.family}'s: set actor_rollout_ref.rollout.multi_turn.format=" \
                   f"{self.family.parser})" if self.family and self.family.parser else ""
            raise ValueError(f"multi_turn.format={self.parser.name!r} cannot read the tool calls of this chat "
                             f"template{want}: " + "; ".join(p for p in report.problems if "parser" in p))

    def _stop_ids(self) -> list[int]:
        """EOS, the family's end-of-turn tokens and the template's own; with one call per turn, also
        the parser's call-closing token."""
        ids = set(stop_token_ids(self.tokenizer, self.family, extra=self.deltas.closing_ids))
        if self.multi_turn and self.max_parallel_calls == 1 and self.close_id is not None:
            ids.add(self.close_id)
        return sorted(ids)

    # ------------------------------------------------------------------ public API
    def run(self, prompts: list[PromptItem], *, n: int, sampling: SamplingParams) -> list[Trajectory]:
        """n samples of every prompt, sorted by (prompt order, sample index)."""
        if n < 1:
            raise ValueError("n must be >= 1")
        coro = self._run(prompts, n, sampling)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            # An engine with a loop of its own (sglang: its Engine's) runs there; else one persistent
            # loop per rollout object: async engines bind to the loop they first ran on, so a fresh
            # asyncio.run() per step would break them.
            engine_loop = getattr(self.engine, "event_loop", None)
            if engine_loop is not None and not engine_loop.is_closed():
                return engine_loop.run_until_complete(coro)
            if self._loop is None or self._loop.is_closed():
                self._loop = asyncio.new_event_loop()
            return self._loop.run_until_complete(coro)
        # Called from inside an event loop (e.g. a notebook): run ours on a private thread.
        box: dict[str, Any] = {}

        def target() -> None:
            try:
                box["value"] = asyncio.run(coro)
            except BaseException as exc:  # re-raised in the caller's thread
                box["error"] = exc

        thread = threading.Thread(target=target, name="multi-turn-rollout")
        thread.start()
        thread.join()
        if "error" in box:
            raise box["error"]
        return box["value"]

    # ------------------------------------------------------------------ the state machine
    async def _run(self, prompts: list[PromptItem], n: int, sampling: SamplingParams) -> list[Trajectory]:
        reqs = [self._new_request(p, pos, s) for pos, p in enumerate(prompts) for s in range(n)]
        stats = {"engine_calls": 0.0, "gen_s": 0.0, "tool_s": 0.0, "interaction_s": 0.0}
        try:
            await asyncio.gather(*(self._create_tools(r) for r in reqs))
            await asyncio.gather(*(self._start_interaction(r) for r in reqs))
            for r in reqs:
                r.state = RequestState.GENERATING
            turn = 0
            while True:
                batch: list[tuple[_Request, GenerationRequest]] = []
                for r in reqs:
                    if r.state is not RequestState.GENERATING:
                        continue
                    remaining = self._remaining(r)
                    if remaining <= 0:
                        r.finish("length")
                        continue
                    stops = [] if sampling.ignore_eos else sorted(set(sampling.stop_token_ids) | set(self.stop_ids))
                    sp = sampling.replace(max_new_tokens=min(int(sampling.max_new_tokens), remaining),
                                          stop_token_ids=stops,
                                          seed=self._seed(sampling.seed, r, turn))
                    batch.append((r, GenerationRequest(r.request_id, r.prompt.prompt_ids + r.response_ids, sp)))
                if not batch:
                    break
                t0 = time.perf_counter()
                outputs = await self.engine.agenerate([g for _, g in batch])  # ONE engine call per turn
                stats["gen_s"] += time.perf_counter() - t0
                stats["engine_calls"] += 1
                if len(outputs) != len(batch):
                    raise RuntimeError(f"engine returned {len(outputs)} outputs for {len(batch)} requests")
                for (r, g), out in zip(batch, outputs):
                    if out.request_id != g.request_id:
                        raise RuntimeError(f"engine output {out.request_id!r} out of order (expected {g.request_id!r})")
                    self._absorb(r, out)
                t0 = time.perf_counter()
                await asyncio.gather(*(self._run_tools(r) for r in reqs if r.state is RequestState.TOOL_CALLING))
                stats["tool_s"] += time.perf_counter() - t0
                t0 = time.perf_counter()
                await asyncio.gather(*(self._interact(r) for r in reqs if r.state is RequestState.INTERACTING))
                stats["interaction_s"] += time.perf_counter() - t0
                turn += 1
        finally:
            await asyncio.gather(*(self._finish_tools(r) for r in reqs), return_exceptions=True)
            await asyncio.gather(*(self._finish_interaction(r) for r in reqs), return_exceptions=True)
        self.last_stats = stats
        return [self._trajectory(r) for r in reqs]

    def _new_request(self, prompt: PromptItem, position: int, sample: int) -> _Request:
        if self.multi_turn:
            names = [s["function"]["name"] for s in prompt.tools] if prompt.tools else list(self.tools)
            missing = [name for name in names if name not in self.tools]
            if missing:
                raise KeyError(f"prompt {prompt.uid!r} offers tools {missing} that are not in the tools "
                               f"registry {sorted(self.tools)}")
            tools = {name: self.tools[name] for name in names}
        else:
            tools = {}
        return _Request(request_id=f"{prompt.uid}-{position}-{sample}", prompt=prompt, position=position,
                        sample=sample, tools=tools, messages=[dict(m) for m in prompt.messages],
                        interaction_kwargs=self._interaction_kwargs(prompt))

    def _interaction_kwargs(self, prompt: PromptItem) -> dict[str, Any] | None:
        """The row's `extra_info.interaction_kwargs` for the run's interaction (its ground truth
        defaulting to the row's); None without an interaction. A row naming another one is refused."""
        if self.interaction is None:
            return None
        given = prompt.extra_info.get("interaction_kwargs") if isinstance(prompt.extra_info, Mapping) else None
        if given is not None and not isinstance(given, Mapping):
            raise ValueError(f"prompt {prompt.uid!r}: extra_info.interaction_kwargs must be an object, "
                             f"got {type(given).__name__}")
        kwargs = dict(given or {})
        for key in ("instance_id", "messages"):  # the calls' own arguments, beside which kwargs are passed
            if key in kwargs:
                raise ValueError(f"prompt {prompt.uid!r}: extra_info.interaction_kwargs may not hold {key!r} "
                                 f"(the rollout passes it itself)")
        name = kwargs.get("name", self.interaction.name)
        if name != self.interaction.name:
            raise ValueError(f"prompt {prompt.uid!r} asks for the interaction {name!r}, but the run's "
                             f"multi_turn.interaction is {self.interaction.name!r}")
        kwargs["name"] = name
        if kwargs.get("ground_truth") is None:
            kwargs["ground_truth"] = prompt.ground_truth
        return kwargs

    def _remaining(self, r: _Request) -> int:
        budget = self.response_budget
        if self.max_model_len:
            budget = min(budget, int(self.max_model_len) - len(r.prompt.prompt_ids))
        return budget - len(r.response_ids)

    @staticmethod
    def _seed(base: int | None, r: _Request, turn: int) -> int | None:
        if base is None:
            return None
        # No batch position in the key: a row appears once per batch (the sampler draws without
        # replacement), and leaving the position out makes sampling identical whichever worker, or
        # however many workers, a prompt lands on.
        key = f"{r.prompt.index}:{r.sample}:{turn}".encode()
        return (int(base) + zlib.crc32(key)) % (1 << 62)

    def _kwargs(self, r: _Request, tool: str, phase: str) -> dict[str, Any]:
        spec = r.prompt.tools_kwargs.get(tool) or {}
        return dict(spec.get(phase) or {}) if isinstance(spec, Mapping) else {}

    async def _create_tools(self, r: _Request) -> None:
        for name, tool in r.tools.items():
            await tool.create(r.request_id, **self._kwargs(r, name, "create_kwargs"))
            r.created.append(name)

    def _absorb(self, r: _Request, out: GenerationOutput) -> None:
        """Append one assistant turn and decide what comes next."""
        r.num_turns += 1
        r.append(list(out.output_ids), generated=True, logprobs=list(out.logprobs))
        r.last_output = list(out.output_ids)
        ids = list(out.output_ids)
        while ids and ids[-1] in self.stop_ids and ids[-1] != self.close_id:
            ids.pop()  # end-of-turn / eos are not message content
        text = self.tokenizer.decode(ids, skip_special_tokens=False)
        reasoning, visible = split_reasoning(text)
        parsed = self.parser.parse(visible) if self.multi_turn else None
        if out.finish_reason == "length" or parsed is None or not parsed.has_tool_call:
            r.messages.append({"role": "assistant", "content": text.strip()})
            if out.finish_reason == "length":
                r.finish("length")
            elif r.interaction_kwargs is None or r.num_turns >= self.max_turns or self._user_turns_spent(r):
                r.finish("stop")
            else:
                r.state = RequestState.INTERACTING
            return
        calls = parsed.calls[: self.max_parallel_calls]
        content = (reasoning + ("\n\n" if reasoning and parsed.content else "") + parsed.content).strip()
        message: dict[str, Any] = {"role": "assistant", "content": content}
        # Arguments stay an object: templates render them with tojson (a JSON string would be encoded twice).
        message["tool_calls"] = [
            {"id": f"call_{r.num_turns}_{i}", "type": "function",
             "function": {"name": c.name, "arguments": dict(c.arguments)}}
            for i, c in enumerate(calls)]
        if parsed.errors:
            # The content holds only the text outside the blocks (often nothing): keep what the model
            # wrote, so the transcript can show the call that could not be parsed (trainer.events).
            message["raw"] = text
            message["tool_call_errors"] = [{"reason": e.reason, "message": e.message} for e in parsed.errors]
        r.messages.append(message)
        if r.num_turns >= self.max_turns or self._user_turns_spent(r):
            r.finish("tool_calls")
            return
        r.pending_calls, r.pending_errors = calls, list(parsed.errors)
        r.state = RequestState.TOOL_CALLING

    def _user_turns_spent(self, r: _Request) -> bool:
        """Whether `multi_turn.max_user_turns` user turns came before this assistant turn: verl counts
        each round of tool replies and each interaction reply, and ends the sample at the next turn."""
        return self.max_user_turns is not None and r.rounds >= self.max_user_turns

    async def _call_tool(self, r: _Request, call: ToolCall) -> tuple[str, bool]:
        from trainer.tools.base import ToolArgumentError

        tool = r.tools.get(call.name)
        if tool is None:
            return f"Error: unknown tool {call.name!r}; available: {sorted(r.tools)}", False
        try:
            result = await asyncio.wait_for(
                tool.execute(r.request_id, call.arguments, **self._kwargs(r, call.name, "execute_kwargs")),
                timeout=self.tool_timeout_s)
        except asyncio.TimeoutError:
            return f"Error: tool {call.name!r} timed out after {self.tool_timeout_s:g}s", False
        except ToolArgumentError as exc:
            return f"Error: invalid arguments for {call.name!r}: {exc}", False
        except TypeError as exc:  # e.g. an unexpected keyword reaching the tool
            return f"Error: invalid arguments for {call.name!r}: {exc}", False
        except Exception as exc:
            return f"Error: tool {call.name!r} failed: {type(exc).__name__}: {exc}", False
        r.step_rewards.append(float(result.step_reward))
        return str(result.text), True

    async def _run_tools(self, r: _Request) -> None:
        results = await asyncio.gather(*(self._call_tool(r, c) for c in r.pending_calls))
        tool_messages: list[dict[str, Any]] = []
        for i, (call, (text, ok)) in enumerate(zip(r.pending_calls, results)):
            r.tool_calls += int(ok)
            r.tool_errors += int(not ok)
            tool_messages.append({"role": "tool", "tool_call_id": f"call_{r.num_turns}_{i}", "name": call.name,
                                  "content": truncate_text(text, self.max_tool_response_length, self.truncate_side)})
        for err in r.pending_errors:
            r.tool_errors += 1
            tool_messages.append({"role": "tool", "content": f"Error: malformed tool call ({err.reason}): "
                                                              f"{err.message}"})
        r.pending_calls, r.pending_errors = [], []
        r.messages.extend(tool_messages)
        if self._continue_after(r, tool_messages):
            r.rounds += 1

    def _continue_after(self, r: _Request, messages: list[dict[str, Any]]) -> bool:
        """Append `messages` (tool replies, an interaction's reply) as the template delta after the
        turn just generated, and go back to generating; False (finish "length", the delta cut at the
        budget) when not even one generated token would fit after it."""
        added = self.deltas.after_turn(r.last_output, messages, tools=r.prompt.tools or None)
        room = self._remaining(r)
        if len(added) >= room:
            r.append(added[: max(room, 0)], generated=False)
            r.finish("length")
            return False
        r.append(added, generated=False)
        r.state = RequestState.GENERATING
        return True

    async def _ask_interaction(self, r: _Request, what: str, call: Callable[[], Awaitable[Any]]) -> tuple[bool, Any]:
        """(True, result) of one call to the interaction (`call()`) within `interaction_timeout_s`;
        (False, None) when it timed out or raised: counted on the request and logged (the run goes on)."""
        try:
            return True, await asyncio.wait_for(call(), timeout=self.interaction_timeout_s)
        except asyncio.TimeoutError:
            problem = f"timed out after {self.interaction_timeout_s:g}s"
        except Exception as exc:
            problem = f"failed: {type(exc).__name__}: {exc}"
        r.interaction_errors += 1
        log.warning("interaction %r %s for request %s %s", self.interaction.name, what, r.request_id, problem)
        return False, None

    async def _start_interaction(self, r: _Request) -> None:
        if self.interaction is not None and r.interaction_kwargs is not None:
            ok, _ = await self._ask_interaction(
                r, "start", lambda: self.interaction.start_interaction(r.request_id, **r.interaction_kwargs))
            if ok:
                r.interaction_started = True
                return
            try:  # a start cut short may have kept state for the request: let it go (best effort)
                await asyncio.wait_for(self.interaction.finalize_interaction(r.request_id, **r.interaction_kwargs),
                                       timeout=self.interaction_timeout_s)
            except Exception:  # noqa: BLE001 - counted already; the run goes on
                pass
            r.interaction_kwargs = None  # the conversation goes on without it

    async def _interact(self, r: _Request) -> None:
        """The interaction's reply to the turn just generated: a user message, then go on or end. A
        reply that does not come (timeout, error) ends the conversation at the model's turn."""
        ok, reply = await self._ask_interaction(
            r, "reply", lambda: self.interaction.generate_response(r.request_id, list(r.messages), **r.interaction_kwargs))
        if not ok:
            r.finish("stop")
            return
        r.user_turns += 1
        r.rounds += 1
        if reply.score is not None:
            r.turn_scores.append(float(reply.score))
        message = {"role": "user", "content": str(reply.content)}
        r.messages.append(message)
        if reply.should_terminate_sequence:
            r.finish("stop")
            return
        self._continue_after(r, [message])

    async def _finish_interaction(self, r: _Request) -> None:
        if r.interaction_started:
            r.interaction_started = False
            await self._ask_interaction(
                r, "finalize", lambda: self.interaction.finalize_interaction(r.request_id, **(r.interaction_kwargs or {})))

    async def _finish_tools(self, r: _Request) -> None:
        for name in r.created:
            tool = r.tools[name]
            try:
                r.tool_rewards[name] = float(await tool.calc_reward(
                    r.request_id, **self._kwargs(r, name, "calc_reward_kwargs")))
            except Exception:
                r.tool_errors += 1
            finally:
                await tool.release(r.request_id, **self._kwargs(r, name, "release_kwargs"))
        r.created = []

    def _trajectory(self, r: _Request) -> Trajectory:
        logprobs = [lp if m else 0.0 for lp, m in zip(r.logprobs, r.loss_mask)]
        return Trajectory(
            uid=r.prompt.uid, index=r.sample, prompt=r.prompt, prompt_ids=list(r.prompt.prompt_ids),
            response_ids=list(r.response_ids), loss_mask=list(r.loss_mask), rollout_logprobs=logprobs,
            messages=r.messages, num_turns=r.num_turns, tool_calls=r.tool_calls, tool_errors=r.tool_errors,
            finish_reason=r.finish_reason,
            response_text=self.tokenizer.decode(r.response_ids, skip_special_tokens=True),
            tool_rewards=dict(r.tool_rewards), user_turns=r.user_turns, turn_scores=list(r.turn_scores),
            interaction_errors=r.interaction_errors)
