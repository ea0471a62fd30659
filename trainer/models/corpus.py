"""The built-in tokenizer training corpus: arithmetic tool conversations and GSM8K-like English.

Generated from a seed, never read from disk, so a tiny tokenizer is the same on every machine.
Texts are yielded with the special tokens already cut out (they are added to the vocabulary
separately and must never take part in merges).
"""
from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator

from trainer.models.chat_template import TOOLS_POSTAMBLE, TOOLS_PREAMBLE
from trainer.tasks import arith

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
]
_SPECIAL_RE = re.compile("|".join(re.escape(t) for t in SPECIAL_TOKENS))

_NAMES = ["Natalia", "Weng", "Betty", "Julie", "James", "Albert", "Ken", "Alexis", "Tina", "Mark",
          "Maria", "John", "Sarah", "Tom", "Lisa", "Carlos", "Emma", "Noah", "Olivia", "Liam"]
_ITEMS = ["apples", "clips", "books", "cookies", "pencils", "marbles", "stickers", "eggs", "cards",
          "flowers", "candies", "shirts", "toys", "boxes", "pages", "tickets", "cupcakes", "bottles"]
_PLACES = ["store", "market", "school", "park", "library", "bakery", "farm", "zoo", "office"]
_TEMPLATES = [
    "{n} has {a} {item}. {p} gives {n} {b} more {item}. How many {item} does {n} have now?",
    "{n} bought {a} {item} at the {place} and sold {b} of them. How many {item} are left?",
    "A {place} sells {item} for ${a} each. {n} buys {b} of them. How much does {n} pay in total?",
    "{n} earns ${a} an hour. Yesterday {n} worked {b} hours. How much did {n} earn?",
    "There are {a} {item} in each box and {b} boxes. How many {item} are there altogether?",
    "{n} read {a} pages on Monday and twice as many on Tuesday. How many pages did {n} read?",
    "{n} had ${a}. After spending ${b} at the {place}, how much money does {n} have left?",
]
_ENGLISH = (
    "The answer is the number of items after every step. First, find how many there are at the "
    "start. Then add what was bought and subtract what was sold or given away. Each week she saves "
    "some money, and at the end of the month she spends half of it. Let me think step by step. "
    "Please explain your reasoning, check the result, and write the final answer. I am not sure, "
    "so I will use the calculator. You are a helpful assistant. Hello! How can I help you today? "
    "What is the total cost? How much time does it take? Which one is larger, and why?"
)


def _op_symbol_words(rng: random.Random) -> str:
    a, b = rng.randint(1, 999), rng.randint(1, 99)
    op = rng.choice(["+", "-", "*", "/", "x"])
    return f"{a} {op} {b} = <<{a}{op}{b}>>"


def _gsm8k_like(rng: random.Random) -> str:
    n, p = rng.sample(_NAMES, 2)
    a, b = rng.randint(2, 120), rng.randint(2, 60)
    q = rng.choice(_TEMPLATES).format(n=n, p=p, a=a, b=b, item=rng.choice(_ITEMS),
                                      place=rng.choice(_PLACES))
    r = a + b
    return f"{q}\n{n} has {a} + {b} = <<{a}+{b}={r}>>{r} in total.\n{_op_symbol_words(rng)}\n#### {r}"


def _arith_conversation(rng: random.Random) -> str:
    """The text of one demo conversation as the chat template renders it (special tokens kept)."""
    a, b = rng.randint(arith.LOW, arith.HIGH), rng.randint(arith.LOW, arith.HIGH)
    op = rng.choice(arith.OPS)
    value = arith.answer(a, b, op)
    call = {"name": "calculator", "arguments": {"expression": f"{a}{op}{b}"}}
    schema = json.dumps(arith.CALCULATOR_SCHEMA, ensure_ascii=False)
    return (
        f"<|im_start|>system\n{arith.SYSTEM_PROMPT}\n\n{TOOLS_PREAMBLE}\n{schema}{TOOLS_POSTAMBLE}"
        f"<|im_end|>\n<|im_start|>user\n{arith.question(a, b, op)}<|im_end|>\n"
        f"<|im_start|>assistant\n<tool_call>\n{json.dumps(call)}\n</tool_call><|im_end|>\n"
        f"<|im_start|>user\n<tool_response>\n{value}\n</tool_response><|im_end|>\n"
        f"<|im_start|>assistant\n{arith.final_answer(value)}<|im_end|>\n"
    )


def corpus_texts(seed: int = 0, *, conversations: int = 600, stories: int = 1500) -> Iterator[str]:
    """Training texts with special tokens removed (each special token splits a text in two)."""
    rng = random.Random(seed)
    docs: list[str] = [_ENGLISH] * 20
    docs += [_arith_conversation(rng) for _ in range(conversations)]
    docs += [_gsm8k_like(rng) for _ in range(stories)]
    # Every printable ASCII character at least once, so all of them are single tokens early on.
    docs.append("".join(chr(c) for c in range(32, 127)))
    for doc in docs:
        for piece in _SPECIAL_RE.split(doc):
            if piece:
                yield piece
