"""Typed records that move between the trainer's phases (standard library only).

    data      -> PromptItem        one prompt row, templated and tokenized, with its reward inputs
    rollout   -> Trajectory        one sampled (multi-turn) response to a PromptItem
    loop      -> (tensors)         built from Trajectories by trainer.loop / trainer.workers

Token ids in a Trajectory are exactly what the engine generated (assistant tokens) or what the chat
template produced (prompt, tool replies, generation prompts): never re-encoded from decoded text.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any


def prompt_hash(prompt_ids: list[int]) -> str:
    """The content hash of a rendered prompt: 32 hex digits (BLAKE2b-128) of its chat-templated token
    ids, so the same prompt text (same template, tools and tokenizer) has the same hash in any epoch,
    after a resume or a reshuffle, whatever its batch uid."""
    return hashlib.blake2b(",".join(map(str, prompt_ids)).encode("ascii"), digest_size=16).hexdigest()


@dataclass
class PromptItem:
    """One dataset row as the rollout sees it."""

    uid: str  # unique per prompt per batch draw (verl's uid: GRPO groups samples by it)
    index: int  # row index in the dataset (verl's index; stable across epochs: used to follow a prompt)
    messages: list[dict[str, Any]]  # the prompt as chat messages (system / user ...)
    prompt_ids: list[int]  # chat-templated prompt with the tool schemas and the generation prompt
    data_source: str = ""  # selects the reward function (verl's data.reward_fn_key)
    ground_truth: Any = None
    tools: list[dict[str, Any]] = field(default_factory=list)  # OpenAI function schemas offered
    tools_kwargs: dict[str, Any] = field(default_factory=dict)  # verl extra_info.tools_kwargs
    extra_info: dict[str, Any] = field(default_factory=dict)
    split: str = "train"  # "train" | "val": data.train_files or data.val_files (index counts within it)


@dataclass
class Trajectory:
    """One sample of one prompt after rollout (and, later, scoring)."""

    uid: str
    index: int  # index of this sample within its group (0..n-1)
    prompt: PromptItem
    prompt_ids: list[int]
    response_ids: list[int]  # everything after the prompt: assistant, tool and template tokens
    loss_mask: list[int]  # same length as response_ids: 1 on tokens the engine generated
    rollout_logprobs: list[float] | None = None  # engine log-probs on response tokens (0 where mask 0)
    messages: list[dict[str, Any]] = field(default_factory=list)  # full transcript incl. tool calls
    num_turns: int = 0  # assistant turns (engine calls)
    tool_calls: int = 0  # tool calls executed (valid ones)
    tool_errors: int = 0  # malformed / failed tool calls
    finish_reason: str = "stop"  # stop | length | tool_calls (ended while calling) | error
    response_text: str = ""  # decoded response (assistant + tool text), what the reward reads
    tool_rewards: dict[str, float] = field(default_factory=dict)  # tool.calc_reward() per tool
    user_turns: int = 0  # the interaction's replies (multi_turn.interaction)
    turn_scores: list[float] = field(default_factory=list)  # the interaction's score of each turn
    interaction_errors: int = 0  # the interaction raised or timed out (multi_turn.interaction_timeout_s)
    reward: float = 0.0  # the scalar reward (filled by the reward phase): score + overlong penalty
    score: float = 0.0  # the reward function's score, before overlong shaping (reward_model.overlong_buffer)
    reward_extra: dict[str, Any] = field(default_factory=dict)  # parts of a dict-valued score
    advantage: float = 0.0  # filled after the advantage phase (sequence-level value)
    reward_baseline: float | None = None  # remax: the reward of the greedy response to this prompt
