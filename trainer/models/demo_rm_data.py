"""The demo reward model's data and its agreement with the rule: transcripts of the arithmetic demo
in the shapes its policy produces, each labelled by the rule reward, matched pairs of them, and how
often a reward model agrees with the rule (`accuracy`, `agreement_by_kind`, `ranking_by_way`).
trainer.models.demo_rm trains on them.

Data (`labelled_conversations`): transcripts of train-split problems only (held-out operand pairs
never appear) in the shapes the demo policy produces, each labelled by the rule itself
(trainer.rewards.arith on the assistant text against the true result):
  - the calculator called on the problem, its reply, the reply as the answer (label 1);
  - the calculator called on a miscopied expression (an operand digit, the operator, or the operands
    swapped), its reply, that reply as the answer (label by the rule: 0 unless it happens to be right);
  - the calculator called right but another number answered (`wrong_answer`, 0): the reply with a
    digit changed, dropped, added or two swapped, its sign flipped, off by 1 or 10, an operand, or
    the result of another operator on the operands (`near_answer`); or no answer line (0);
  - a direct answer without the tool, right for about a quarter of them (label by the rule);
  - a tool call the agent could not parse (its "Error: malformed tool call ..." reply), then a guess
    (label by the rule). Without these the policy found them: a first reward model trained without
    them scored such transcripts like right ones, and GRPO on it drifted to malformed calls.
So the model must compare the answer with the tool's reply and the expression with the question:
copy checks a tiny transformer learns, not arithmetic.

Matched pairs (`matched_pair`): a right transcript and the same transcript with only the answer
changed (`wrong_answer`) or only the call miscopied (`miscopy`, its reply and answer following).
A first reward model trained on the mix alone agreed with the rule on only 0.68 of held-out
transcripts and scored an answer that differs from the tool's reply nearly like the right one, and
GRPO on it drifted there; a pair differs in nothing else, so only the comparison separates it.
"""
from __future__ import annotations

import random
from typing import Any

from trainer.tasks import arith

KINDS = ("right_tool", "miscopy", "wrong_answer", "no_answer", "direct", "tool_error")
WEIGHTS = (0.35, 0.20, 0.15, 0.05, 0.10, 0.15)
# How `near_answer` makes a wrong answer from the tool's reply, and their odds: the same-length
# changes (a digit, two swapped, off by 1 or 10) are the ones a reward model learns last (a model
# trained on equal odds told 94-100% of the drops, additions, sign flips and other operators' results
# from the right answer, and 69-74% of these), so they come more often.
NEAR_WAYS = ("digit", "drop", "add", "swap", "sign", "off", "operand", "other_op")
NEAR_WEIGHTS = (3, 1, 1, 2, 1, 2, 1, 1)
# The kinds a matched pair's wrong transcript can be, and their odds (miscopied calls at 0.4
# stayed at chance and GRPO drifted to them; at 0.5 the second operand's reached 0.70).
PAIR_KINDS = ("wrong_answer", "miscopy")
PAIR_WEIGHTS = (0.5, 0.5)
# The error replies the multi-turn agent gives a call it cannot parse (trainer.rollout.agent).
TOOL_ERRORS = ("Error: malformed tool call (unclosed_tag): <tool_call> without a closing </tool_call>",
               "Error: malformed tool call (bad_json): tool call is not valid JSON (Expecting ':' delimiter at char 56)",
               "Error: malformed tool call (bad_json): tool call is not valid JSON (Extra data at char 13)")


def _change_digit(value: int, rng: random.Random) -> int:
    digits = list(str(abs(value)))
    pos = rng.randrange(len(digits))
    digits[pos] = rng.choice([d for d in "0123456789" if d != digits[pos] and not (pos == 0 and d == "0"
                                                                                   and len(digits) > 1)])
    return (-1 if value < 0 else 1) * int("".join(digits))


def _tool_turns(expr_a: int, expr_b: int, op: str, answer_text: str | None) -> list[dict[str, Any]]:
    value = arith.answer(expr_a, expr_b, op)
    turns = [arith.tool_call_message(expr_a, expr_b, op),
             {"role": "tool", "name": "calculator", "content": str(value)}]
    if answer_text is not None:
        turns.append({"role": "assistant", "content": answer_text})
    return turns


def near_answer(a: int, b: int, op: str, rng: random.Random, *, ways: tuple[str, ...] | None = None) -> int:
    """A wrong number close to the result of (a, b, op), as a policy might answer after the tool's
    reply: one digit changed, dropped, added or two swapped, the sign flipped, off by 1 or 10, an
    operand, or another operator's result on the operands (`ways`: only these; default all, with
    NEAR_WEIGHTS' odds). Never the result itself."""
    value = arith.answer(a, b, op)
    digits = str(abs(value))
    sign = -1 if value < 0 else 1
    for _ in range(20):
        how = rng.choices(NEAR_WAYS, NEAR_WEIGHTS)[0] if ways is None else rng.choice(ways)
        if how == "digit":
            got = _change_digit(value, rng)
        elif how == "drop":
            if len(digits) < 2:
                continue
            pos = rng.randrange(len(digits))
            got = sign * int(digits[:pos] + digits[pos + 1:])
        elif how == "add":
            pos = rng.randrange(len(digits) + 1)
            got = sign * int(digits[:pos] + rng.choice("0123456789" if pos else "123456789") + digits[pos:])
        elif how == "swap":
            if len(digits) < 2:
                continue
            pos = rng.randrange(len(digits) - 1)
            got = sign * int(digits[:pos] + digits[pos + 1] + digits[pos] + digits[pos + 2:])
        elif how == "sign":
            got = -value
        elif how == "off":
            got = value + rng.choice((-10, -1, 1, 10))
        elif how == "operand":
            got = rng.choice((a, b))
        else:  # "other_op"
            got = arith.answer(a, b, rng.choice([o for o in arith.OPS if o != op]))
        if got != value:
            return got
    return value + 1


def _changed_operand(x: int, rng: random.Random) -> int:
    """An operand with one digit changed, kept in the task's range (so never x itself)."""
    for _ in range(20):
        got = _change_digit(x, rng)
        if arith.LOW <= got <= arith.HIGH:
            return got
    return x + 1 if x < arith.HIGH else x - 1


def _miscopy(a: int, b: int, op: str, rng: random.Random) -> tuple[int, int, str]:
    """The problem as a careless call copies it: an operand digit (the likeliest: a model learns these
    last), the operator, or the operands swapped."""
    how = rng.choices(("a", "b", "op", "swap"), (2, 2, 1, 1))[0]
    if how == "a":
        return _changed_operand(a, rng), b, op
    if how == "b":
        return a, _changed_operand(b, rng), op
    if how == "op":
        return a, b, rng.choice([o for o in arith.OPS if o != op])
    return b, a, op


def conversation(a: int, b: int, op: str, kind: str, rng: random.Random) -> list[dict[str, Any]]:
    """One transcript of the problem (a, b, op) of the given kind."""
    msgs: list[dict[str, Any]] = arith.prompt_messages(a, b, op)
    truth = arith.answer(a, b, op)
    if kind == "right_tool":
        return msgs + _tool_turns(a, b, op, arith.final_answer(truth))
    if kind == "miscopy":
        ea, eb, eop = _miscopy(a, b, op, rng)
        return msgs + _tool_turns(ea, eb, eop, arith.final_answer(arith.answer(ea, eb, eop)))
    if kind == "wrong_answer":
        return msgs + _tool_turns(a, b, op, arith.final_answer(near_answer(a, b, op, rng)))
    if kind == "no_answer":
        return msgs + _tool_turns(a, b, op, rng.choice(["", str(truth), "The answer is above."]))
    if kind == "tool_error":
        guess = truth if rng.random() < 0.1 else _change_digit(truth, rng)
        return msgs + [{"role": "assistant", "content": ""},
                       {"role": "tool", "content": rng.choice(TOOL_ERRORS)},
                       {"role": "assistant", "content": arith.final_answer(guess)}]
    if kind == "direct":
        guess = truth if rng.random() < 0.25 else _change_digit(truth, rng)
        return msgs + [{"role": "assistant", "content": arith.final_answer(guess)}]
    raise ValueError(f"unknown kind {kind!r}; allowed: {KINDS}")


Labelled = tuple[list[dict[str, Any]], float]


def label(messages: list[dict[str, Any]], truth: int) -> float:
    """The rule reward of a transcript: the arith reward on its assistant and tool text."""
    from trainer.rewards.arith import compute_score

    text = "\n".join(m.get("content") or "" for m in messages[2:])
    return compute_score(text, truth)


def labelled_conversations(n: int, *, split: str = "train", seed: int = 0) -> list[tuple[list[dict[str, Any]], float]]:
    """`n` (transcript, rule reward) pairs on problems of `split`."""
    rng = random.Random(seed)
    pool = arith.problems(split)
    out = []
    for _ in range(n):
        a, b, op = rng.choice(pool)
        msgs = conversation(a, b, op, rng.choices(KINDS, WEIGHTS)[0], rng)
        out.append((msgs, label(msgs, arith.answer(a, b, op))))
    return out


def matched_pair(a: int, b: int, op: str, rng: random.Random) -> tuple[Labelled, Labelled]:
    """A right transcript of (a, b, op) and the same transcript with only the answer changed
    (`wrong_answer`) or only the call miscopied (`miscopy`), each with its rule reward."""
    truth = arith.answer(a, b, op)
    right = conversation(a, b, op, "right_tool", rng)
    wrong = conversation(a, b, op, rng.choices(PAIR_KINDS, PAIR_WEIGHTS)[0], rng)
    return (right, label(right, truth)), (wrong, label(wrong, truth))


def matched_pairs(n: int, *, split: str = "train", seed: int = 0) -> list[tuple[Labelled, Labelled]]:
    """`n` matched pairs on problems of `split`."""
    rng = random.Random(seed)
    pool = arith.problems(split)
    return [matched_pair(*rng.choice(pool), rng) for _ in range(n)]


def accuracy(worker: Any, data: list[tuple[list[dict[str, Any]], float]]) -> float:
    """Share of transcripts whose score has the label's sign (logit > 0 for reward 1)."""
    scores = worker.score([m for m, _ in data])
    return sum((s > 0) == (y > 0.5) for s, (_, y) in zip(scores, data)) / max(1, len(data))


def agreement_by_kind(worker: Any, *, n: int = 128, split: str = "test", seed: int = 1) -> dict[str, float]:
    """Accuracy (as `accuracy`) on `n` transcripts of each kind on problems of `split`, and
    "pair_ranking": the share of `n` matched pairs with different labels whose right transcript
    scores above the wrong one."""
    pool = arith.problems(split)
    out = {}
    for i, kind in enumerate(KINDS):
        rng = random.Random(seed * 1000 + i)
        data = []
        for _ in range(n):
            a, b, op = rng.choice(pool)
            msgs = conversation(a, b, op, kind, rng)
            data.append((msgs, label(msgs, arith.answer(a, b, op))))
        out[kind] = accuracy(worker, data)
    pairs = [(p, q) for p, q in matched_pairs(n, split=split, seed=seed * 1000 + len(KINDS)) if p[1] != q[1]]
    scores = worker.score([m for pair in pairs for m, _ in pair])
    out["pair_ranking"] = sum(scores[2 * i] > scores[2 * i + 1] for i in range(len(pairs))) / max(1, len(pairs))
    return out


def ranking_by_way(worker: Any, *, n: int = 128, split: str = "test", seed: int = 1) -> dict[str, float]:
    """For each way of making a wrong transcript from a right one (`NEAR_WAYS` for the answer,
    "miscopy_a" / "miscopy_b" / "miscopy_op" for the call; a swap of the operands is left out, right for
    + and *), the share of `n` problems of `split` whose right transcript scores above the wrong one."""
    pool = arith.problems(split)
    rng = random.Random(seed)
    problems = [rng.choice(pool) for _ in range(n)]
    right = worker.score([conversation(a, b, op, "right_tool", rng) for a, b, op in problems])
    out = {}
    for way in (*NEAR_WAYS, "miscopy_a", "miscopy_b", "miscopy_op"):
        wrong = []
        for a, b, op in problems:
            msgs = arith.prompt_messages(a, b, op)
            if way.startswith("miscopy_"):
                ea, eb, eop = a, b, op
                if way == "miscopy_a":
                    ea = _changed_operand(a, rng)
                elif way == "miscopy_b":
                    eb = _changed_operand(b, rng)
                else:
                    eop = rng.choice([o for o in arith.OPS if o != op])
                msgs += _tool_turns(ea, eb, eop, arith.final_answer(arith.answer(ea, eb, eop)))
            else:
                msgs += _tool_turns(a, b, op, arith.final_answer(near_answer(a, b, op, rng, ways=(way,))))
            wrong.append(msgs)
        scores = worker.score(wrong)
        out[way] = sum(r > w for r, w in zip(right, scores)) / max(1, n)
    return out
