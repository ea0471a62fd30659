"""MATH-style answer scoring: the last \\boxed{...} of a response against the ground truth.

The reward `math_boxed` (trainer.rewards) for competition-maths data in the style of Hendrycks' MATH,
MATH-500, AIME or DAPO-Math: the model ends its solution with its answer in \\boxed{...} (or \\fbox),
the ground truth is that answer (a full reference solution with a \\boxed{} in it works too; a list
of acceptable answers matches any).

- extraction (`last_boxed`): the last \\boxed{...} / \\fbox{...} whose braces balance (escaped \\{ \\}
  do not count; a box inside a box gives the inner one), or `\\boxed 5`; when the response has no box,
  the text after its last "Answer:" (DAPO's answer line). Linear in the response's length: one scan
  matches every brace, and the regular expressions used on whole responses cannot backtrack.
- normalisation (`normalize`): drops $, \\left/\\right, LaTeX spacing (\\! \\, \\; \\: ~), degrees,
  percent and dollar signs, a trailing ".", a leading "x =", a unit in \\text{} after a number (or a
  plain word after it, "10 cm"), unwraps \\text{}/\\mathrm{}/\\textbf{}/\\mbox{}, turns \\dfrac and
  \\tfrac into \\frac, braces \\frac12 and \\sqrt2, removes thousands separators (1,000 and 1{,}000)
  and all whitespace.
- comparison (`is_equiv`): equal normalised strings, or equal exact values (fractions.Fraction) when
  both sides are a plain number: an integer, a decimal, a/b or \\frac{a}{b}, so 0.5, .5, 1/2,
  \\frac{1}{2}, \\dfrac12 and 0.50 are one answer. No computer algebra: \\sqrt{8} and 2\\sqrt{2} differ.

Answers longer than MAX_ANSWER_CHARS are compared as stripped text only (no normalisation), which
bounds the work a hostile response can cause.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

MAX_ANSWER_CHARS = 1000

_BOX = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_ANSWER_LINE = re.compile(r"answer\s{0,8}:", re.IGNORECASE)
_BARE_TOKEN = re.compile(r"[^\s$]+")


def _closing_braces(text: str) -> dict[int, int]:
    """Each unescaped "{" of `text` that is closed, by position -> the position of its "}"."""
    closes: dict[int, int] = {}
    stack: list[int] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2  # \{ \} \\ : an escaped character never groups
            continue
        if c == "{":
            stack.append(i)
        elif c == "}" and stack:
            closes[stack.pop()] = i
        i += 1
    return closes


def _group_after(text: str, start: int, closes: dict[int, int]) -> str | None:
    """The content of the brace group at `start` (after optional spaces), or of `\\cmd 5`'s bare
    token; None when there is neither or the group never closes."""
    i = start
    while i < len(text) and text[i] in " \t":
        i += 1
    if i < len(text) and text[i] == "{":
        end = closes.get(i)
        return None if end is None else text[i + 1 : end]
    if i > start:  # "\boxed 5": the token up to a space or "$"
        m = _BARE_TOKEN.match(text, i)
        return m.group(0) if m else None
    return None


def last_boxed(text: str) -> str | None:
    """The content of the last \\boxed{...} or \\fbox{...} of `text` that closes; None when none does."""
    starts = [m.end() for m in _BOX.finditer(text)]
    if not starts:
        return None
    closes = _closing_braces(text)
    for start in reversed(starts):
        content = _group_after(text, start, closes)
        if content is not None:
            return content
    return None


def extract_answer(text: str) -> str | None:
    """The answer of a response: its last box, else the rest of the line after its last "Answer:"."""
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
    last = None
    for last in _ANSWER_LINE.finditer(text):
        pass
    if last is None:
        return None
    line = text[last.end() :].split("\n", 1)[0].strip()
    return line or None


def unwrap(text: str, commands: tuple[str, ...]) -> str:
    """`text` with each `\\cmd{X}` of `commands` replaced by X (nested ones too)."""
    pattern = re.compile(r"\\(?:" + "|".join(commands) + r")(?![A-Za-z])\s*\{")
    for _ in range(8):  # nesting depth handled; answers are short (MAX_ANSWER_CHARS)
        m = pattern.search(text)
        if m is None:
            return text
        closes = _closing_braces(text)
        out, pos = [], 0
        for m in pattern.finditer(text):
            if m.start() < pos:
                continue
            end = closes.get(m.end() - 1)
            if end is None:
                continue
            out.append(text[pos : m.start()] + text[m.end() : end])
            pos = end + 1
        out.append(text[pos:])
        new = "".join(out)
        if new == text:
            return text
        text = new
    return text


_TEXT_COMMANDS = ("text", "textbf", "textit", "textrm", "mathrm", "mathbf", "mbox", "operatorname")
_UNIT_COMMANDS = ("\\text", "\\mbox", "\\mathrm")
_UNIT = re.compile(r"\\(?:text|mbox|mathrm)\s*\{\s*[A-Za-z][A-Za-z .]*\}(\^\{?\d\}?)?")
_PLAIN_UNIT = re.compile(r"^([-+]?[\d.,/]+)\s+[A-Za-z]+(\^\d)?\.?$")
_LEADING_VAR = re.compile(r"^[A-Za-z](?:_\{?[A-Za-z0-9]+\}?)?\s*=\s*")
_REMOVE = (
    "\\left",
    "\\right",
    "\\!",
    "\\,",
    "\\;",
    "\\:",
    "\\ ",
    "~",
    "\\displaystyle",
    "^{\\circ}",
    "^\\circ",
    "\\circ",
    "\\degree",
    "°",
    "\\%",
    "%",
    "\\$",
    "$",
)
_THOUSANDS = re.compile(r"^[-+]?\d{1,3}(,\d{3})+(\.\d+)?$")


def _drop_unit(s: str) -> str:
    """`s` without a last \\text{unit} (letters, spaces and dots; a ^2 after it) that follows a number."""
    at = max(s.rfind(command) for command in _UNIT_COMMANDS)
    if at > 0 and _UNIT.fullmatch(s, at) and any(c.isdigit() for c in s[:at]):
        return s[:at].rstrip()
    return s


def normalize(answer: str) -> str:
    """A canonical form of a MATH-style answer (see the module docstring)."""
    s = answer.strip()
    if len(s) > MAX_ANSWER_CHARS:
        return s
    s = s.replace("\n", " ").replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = _drop_unit(s)
    for token in _REMOVE:
        s = s.replace(token, "")
    s = unwrap(s, _TEXT_COMMANDS).strip()
    m = _PLAIN_UNIT.match(s)
    if m:
        s = m.group(1)
    s = s.rstrip(".").strip()
    if s.count("=") == 1:
        s = _LEADING_VAR.sub("", s)
    s = "".join(s.split()).replace("{,}", ",")
    if _THOUSANDS.match(s):
        s = s.replace(",", "")
    s = re.sub(r"\\frac(\d)(\d)", r"\\frac{\1}{\2}", s)
    s = re.sub(r"\\frac(\d)\{", r"\\frac{\1}{", s)
    s = re.sub(r"\\frac\{([^{}]*)\}(\d)", r"\\frac{\1}{\2}", s)
    s = re.sub(r"\\sqrt(\w)", r"\\sqrt{\1}", s)
    if s.startswith("."):
        s = "0" + s
    elif s.startswith("-."):
        s = "-0" + s[1:]
    return s


_INT_OR_DECIMAL = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)")
_SLASH = re.compile(r"([-+]?)(\d+(?:\.\d+)?)/(\d+(?:\.\d+)?)")
_FRAC = re.compile(r"([-+]?)\\frac\{([-+]?\d+(?:\.\d+)?)\}\{([-+]?\d+(?:\.\d+)?)\}")


def number_value(s: str) -> Fraction | None:
    """The exact value of a normalised plain number (integer, decimal, a/b, \\frac{a}{b}); else None."""
    try:
        if _INT_OR_DECIMAL.fullmatch(s):
            return Fraction(s.rstrip(".") or "0")
        m = _SLASH.fullmatch(s) or _FRAC.fullmatch(s)
        if m:
            sign, num, den = m.groups()
            if Fraction(den) == 0:
                return None
            value = Fraction(num) / Fraction(den)
            return -value if sign == "-" else value
    except (ValueError, ZeroDivisionError):  # e.g. past Python's digit limit for int()
        return None
    return None


def is_equiv(prediction: str, truth: str) -> bool:
    """Whether two answers are the same after normalisation, or the same plain number."""
    a, b = normalize(prediction), normalize(truth)
    if a == b:
        return True
    if len(a) > MAX_ANSWER_CHARS or len(b) > MAX_ANSWER_CHARS:
        return False
    va, vb = number_value(a), number_value(b)
    return va is not None and va == vb


def truth_answers(ground_truth: Any) -> list[str]:
    """The acceptable answers of a ground truth: each of a list, and a reference solution's box."""
    items = list(ground_truth) if isinstance(ground_truth, (list, tuple)) else [ground_truth]
    out = []
    for item in items:
        if item is None:
            continue
        text = str(item)
        boxed = last_boxed(text) if "\\boxed" in text or "\\fbox" in text else None
        out.append(boxed if boxed is not None else text)
    return out


def compute_score(
    solution_str: str, ground_truth: Any, format_score: float = 0.0, score: float = 1.0
) -> float:
    """`score` when the response's answer equals a ground truth's; `format_score` when it gave an
    answer that does not; 0.0 when it gave none."""
    answer = extract_answer(solution_str or "")
    if answer is None:
        return 0.0
    if any(is_equiv(answer, truth) for truth in truth_answers(ground_truth)):
        return float(score)
    return float(format_score)
