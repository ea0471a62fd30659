"""What the client prints: server text made safe for a terminal, aligned tables and JSON.

Names, notes, errors and log lines come from users and from models' output: text an escape sequence in
it could use to move the cursor, rewrite what was printed, set the window title or (on some terminals)
more. Every server-provided string goes through `clean` before it is printed as text; `--json` output
escapes the same characters as JSON escapes (`to_json`), so the data stays exact.
"""
from __future__ import annotations

import json
import math
import re
import sys
from typing import Any, Iterable, Sequence

# C0 controls, DEL, C1 controls (U+0080-U+009F: 8-bit CSI and OSC on some terminals), and the Unicode
# bidirectional overrides and isolates, which reorder what a reader sees ("Trojan source").
_BIDI_AND_C1 = "\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_CONTROL = re.compile(f"[\x00-\x1f{_BIDI_AND_C1}]")
_CONTROL_KEEP_LINES = re.compile(f"[\x00-\x08\x0b-\x1f{_BIDI_AND_C1}]")  # keeps \t and \n
_JSON_UNSAFE = re.compile(f"[{_BIDI_AND_C1}]")  # json.dumps escapes C0 controls in strings itself
_ESC_SEQUENCE = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)?|[@-Z\\-_])")


def clean(value: Any, *, lines: bool = False) -> str:
    """`value` as text without control characters: whole escape sequences are dropped (so `ESC[31m`
    leaves nothing behind), other controls too. With `lines`, newlines and tabs are kept (a log
    message); without, a newline or tab becomes a space (a table cell, one line)."""
    text = "" if value is None else str(value)
    text = _ESC_SEQUENCE.sub("", text)
    if lines:
        return _CONTROL_KEEP_LINES.sub("", text)
    return _CONTROL.sub("", re.sub(r"[\t\n\r\v\f]", " ", text))


def _escape_unsafe(match: re.Match) -> str:
    return f"\\u{ord(match.group()):04x}"


def to_json(data: Any) -> str:
    """JSON for machines: exactly the data, with every character `clean` drops written as a \\u escape
    (json.dumps escapes C0 controls itself; DEL, C1 and the bidi controls are escaped here)."""
    text = json.dumps(data, indent=2, ensure_ascii=False, allow_nan=True)
    return _JSON_UNSAFE.sub(_escape_unsafe, text)


def fmt_number(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        return f"{value:.4g}" if abs(value) < 1e5 else f"{value:.6g}"
    return clean(value)


def cell(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, (int, float, bool)):
        return fmt_number(value)
    if isinstance(value, (list, tuple)):
        return ",".join(clean(v) for v in value) or "-"
    if isinstance(value, dict):
        return clean(value.get("name") or value.get("id") or json.dumps(value))
    return clean(value)


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *, out=None, max_width: int = 60) -> None:
    """An aligned table: a header line, then a line per row, columns two spaces apart; cells longer
    than `max_width` are cut with an ellipsis (`--json` gives them whole)."""
    out = out or sys.stdout
    texts = []
    for row in rows:
        cells = [cell(v) for v in row]
        texts.append([c if len(c) <= max_width else c[: max_width - 1] + "…" for c in cells])
    widths = [max([len(h)] + [len(r[i]) for r in texts]) for i, h in enumerate(headers)]
    for line in [list(headers)] + texts:
        out.write("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() + "\n")


def pairs(items: Sequence[tuple[str, Any]], *, out=None) -> None:
    """`key: value` lines, keys aligned (a detail view)."""
    out = out or sys.stdout
    width = max((len(k) for k, _ in items), default=0)
    for key, value in items:
        out.write(f"{key + ':':<{width + 1}} {cell(value)}\n")
