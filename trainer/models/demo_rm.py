"""The demo's reward model: a tiny sequence-classification model trained here to predict the arithmetic
demo's rule reward from a whole transcript, so that GRPO can learn the demo with it as the only reward.

Run: ``python -m trainer make-demo-reward-model OUT [--init WARM_START] [--steps 600] [--seed 0] [--threads 1]``

Data (`labelled_conversations`): transcripts of train-split problems only (held-out operand pairs
never appear) in the shapes the demo policy produces, each labelled by the rule itself
(trainer.rewards.arith on the assistant text against the true result):
  - the calculator called on the problem, its reply, the reply as the answer (label 1);
  - the calculator called on a miscopied expression (an operand digit, the operator, or the operands
    swapped), its reply, that reply as the answer (label by the rule: 0 unless it happens to be right);
  - the calculator called right but another number answered, or no answer line (0);
  - a direct answer without the tool, right for about a quarter of them (label by the rule);
  - a tool call the agent could not parse (its "Error: malformed tool call ..." reply), then a guess
    (label by the rule). Without these the policy found them: a first reward model trained without
    them scored such transcripts like right ones, and GRPO on it drifted to malformed calls.
So the model must compare the answer with the tool's reply and the expression with the question:
copy checks a tiny transformer learns, not arithmetic.

Initialisation: with ``--init`` a causal LM folder (the demo's warm start, trainer.models.demo), the
reward model is that model's body with a fresh one-label head, its tokenizer and its chat template
(the usual RLHF recipe: the reward model starts from the supervised policy, which already reads this
format and copies operands and replies); without it, a random tiny reward model
(trainer.models.tiny_rm, preset demo, its own tokenizer and template).

Training: binary cross-entropy on the head's output (a logit) at the last token of the reward model's
own rendering (trainer.workers.reward_model), AdamW with warmup and cosine decay, batches of
`--batch` conversations; bounded by steps, so the same seed gives the same model on the same
machine. The folder is a plain Hugging Face sequence-classification checkpoint (config, weights,
tokenizer, chat template) that the catalog registers as a reward model.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import time
from pathlib import Path
from typing import Any

from trainer.tasks import arith

KINDS = ("right_tool", "miscopy", "wrong_answer", "no_answer", "direct", "tool_error")
WEIGHTS = (0.35, 0.20, 0.15, 0.05, 0.10, 0.15)
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


def conversation(a: int, b: int, op: str, kind: str, rng: random.Random) -> list[dict[str, Any]]:
    """One transcript of the problem (a, b, op) of the given kind."""
    msgs: list[dict[str, Any]] = arith.prompt_messages(a, b, op)
    truth = arith.answer(a, b, op)
    if kind == "right_tool":
        return msgs + _tool_turns(a, b, op, arith.final_answer(truth))
    if kind == "miscopy":
        how = rng.choice(("a", "b", "op", "swap"))
        ea, eb, eop = a, b, op
        if how == "a":
            ea = max(arith.LOW, min(arith.HIGH, _change_digit(a, rng)))
        elif how == "b":
            eb = max(arith.LOW, min(arith.HIGH, _change_digit(b, rng)))
        elif how == "op":
            eop = rng.choice([o for o in arith.OPS if o != op])
        else:
            ea, eb = b, a
        return msgs + _tool_turns(ea, eb, eop, arith.final_answer(arith.answer(ea, eb, eop)))
    if kind == "wrong_answer":
        return msgs + _tool_turns(a, b, op, arith.final_answer(_change_digit(truth, rng)))
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


def accuracy(worker: Any, data: list[tuple[list[dict[str, Any]], float]]) -> float:
    """Share of transcripts whose score has the label's sign (logit > 0 for reward 1)."""
    scores = worker.score([m for m, _ in data])
    return sum((s > 0) == (y > 0.5) for s, (_, y) in zip(scores, data)) / max(1, len(data))


def init_from_policy(out_dir: str | Path, init: str | Path) -> Path:
    """A one-label sequence-classification model from the causal LM folder `init`: its body, a fresh
    head, its tokenizer and chat template, written to `out_dir`."""
    import torch
    from transformers import AutoModelForSequenceClassification

    from trainer.models.hf_folder import load_tokenizer

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = load_tokenizer(init)
    tok.save_pretrained(out)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = AutoModelForSequenceClassification.from_pretrained(
            str(init), num_labels=1, dtype=torch.float32, pad_token_id=tok.pad_token_id)
    model.config.architectures = [type(model).__name__]
    model.save_pretrained(out, safe_serialization=True)
    return out


def make_demo_reward_model(out_dir: str | Path, *, init: str | Path | None = None, steps: int = 600,
                           batch: int = 32, lr: float = 1e-3, seed: int = 0, log: Any = print) -> dict[str, Any]:
    """Build the reward model (from the policy folder `init`, else a random tiny one), train it on
    `labelled_conversations`, save it to `out_dir`; returns {steps, seconds, loss, train_accuracy,
    held_out_accuracy}."""
    import torch

    from trainer.models.tiny_rm import make_tiny_reward_model
    from trainer.workers.reward_model import RewardModelWorker

    out = Path(out_dir)
    if init is not None:
        init_from_policy(out, init)
    else:
        make_tiny_reward_model(out, preset="demo", seed=seed)
    w = RewardModelWorker(str(out), device=torch.device("cpu"), micro_batch=batch)
    model = w.model
    for p in model.parameters():
        p.requires_grad_(True)
    model.train()
    data = labelled_conversations(steps * batch // 4 + 1000, seed=seed)
    enc = [(w.encode(m), y) for m, y in data]
    held = labelled_conversations(512, split="test", seed=seed + 1)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    warm = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / warm if s < warm else 0.5 * (1 + math.cos(math.pi * (s - warm) / max(1, steps - warm))))
    rng = random.Random(seed)
    torch.manual_seed(seed)
    t0, loss_ema = time.perf_counter(), None
    for step in range(steps):
        rows = rng.sample(enc, batch)
        width = max(len(ids) for ids, _ in rows)
        ids = torch.full((batch, width), w.pad_id, dtype=torch.long)
        mask = torch.zeros((batch, width), dtype=torch.long)
        for r, (seq, _) in enumerate(rows):
            ids[r, : len(seq)] = torch.as_tensor(seq)
            mask[r, : len(seq)] = 1
        y = torch.tensor([lab for _, lab in rows], dtype=torch.float32)
        with torch.enable_grad():
            logits = w.forward_scores(ids, mask)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
        value = float(loss.detach())
        loss_ema = value if loss_ema is None else 0.95 * loss_ema + 0.05 * value
        if (step + 1) % 25 == 0 or step + 1 == steps:
            log(f"step {step + 1}/{steps} loss {loss_ema:.4f} ({time.perf_counter() - t0:.0f} s)")
    seconds = time.perf_counter() - t0
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    result = {"steps": steps, "seconds": seconds, "loss": loss_ema,
              "train_accuracy": accuracy(w, data[:512]), "held_out_accuracy": accuracy(w, held)}
    model.save_pretrained(out, safe_serialization=True)
    (out / "demo_rm_train.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m trainer make-demo-reward-model",
                                 description="Train the demo's tiny reward model on rule-labelled transcripts.")
    ap.add_argument("out", help="output folder (HF format)")
    ap.add_argument("--init", default=None, help="a causal LM folder to start from (the demo's warm start)")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    res = make_demo_reward_model(args.out, init=args.init, steps=args.steps, batch=args.batch, lr=args.lr, seed=args.seed)
    print(json.dumps(res, indent=2))
    return 0
