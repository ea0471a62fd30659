"""Text on its way in: model text into PostgreSQL, whose text and JSON columns refuse the NUL character
(U+0000), which a model can generate like any other, so every NUL becomes U+FFFD (the replacement
character); users' input, where a NUL is refused (`nul_path`), as is a lone UTF-16 surrogate that
JSON or YAML escapes can spell (`surrogate_path`), and numbers given as text
(`ascii_uint`: only the ASCII digits 0-9, which `int()` reads, not every character `isdigit()` calls a
digit, such as "²"); yes/no words (`yes_no`: one reading for environment variables and query
parameters); and text on its way out to an operator's terminal (`terminal_safe`)."""
from __future__ import annotations

import re
import unicodedata
from typing import Any


YES_WORDS, NO_WORDS = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def yes_no(raw: str) -> bool | None:
    """True for a yes word, False for a no word (`YES_WORDS`, `NO_WORDS`, any case, spaces around
    ignored); None for anything else, empty included (the caller says what that means)."""
    word = raw.strip().lower()
    return True if word in YES_WORDS else False if word in NO_WORDS else None


# Control and format characters, surrogates and line / paragraph separators: what a terminal acts on
# (escape sequences, new lines, carriage returns) or draws out of order (bidirectional overrides).
_TERMINAL_UNSAFE = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def terminal_safe(text: str) -> str:
    """`text` for one line of a terminal: every control or format character written as its Python escape
    (`\\x1b`, `\\n`, `\\u202e`), so that text a user wrote (a run's name) can neither move the cursor,
    restyle, retitle or write the clipboard of the terminal it is printed on, nor forge a line of its own."""
    return "".join(ascii(c)[1:-1] if unicodedata.category(c) in _TERMINAL_UNSAFE else c for c in str(text))


def without_nul(value: Any) -> Any:
    """`value` with every NUL character in its strings (keys included, through lists and dicts) replaced
    by U+FFFD; anything else as it is."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, list):
        return [without_nul(v) for v in value]
    if isinstance(value, dict):
        return {without_nul(k): without_nul(v) for k, v in value.items()}
    return value


def nul_path(value: Any, path: str | None = None) -> str | None:
    """The field path (`a.b`, `a[2].c`) of the first string in `value` (keys included, through lists and
    dicts) that holds a NUL character, `path` itself for a string; None when there is none. A key with
    a NUL is named with its NULs shown as U+FFFD."""
    return _first_path(value, path, lambda text: "\x00" in text)


_SURROGATE = re.compile("[\ud800-\udfff]")


def without_surrogates(value: Any) -> Any:
    """`value` with every lone UTF-16 surrogate (U+D800-U+DFFF, which no UTF-8 encoder takes) in its
    strings (keys included, through lists and dicts) replaced by U+FFFD; anything else as it is."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [without_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {without_surrogates(k): without_surrogates(v) for k, v in value.items()}
    return value


def has_surrogate(text: str) -> bool:
    """Whether `text` holds a lone UTF-16 surrogate (U+D800-U+DFFF)."""
    return _SURROGATE.search(text) is not None


def surrogate_path(value: Any, path: str | None = None) -> str | None:
    """`nul_path` for lone UTF-16 surrogates: JSON may spell one (`"\\ud800"`, half of a pair), and
    Python reads it into a str that neither PostgreSQL nor a UTF-8 response can take. A key holding
    one is named with it shown as U+FFFD."""
    return _first_path(value, path, has_surrogate)


def _first_path(value: Any, path: str | None, bad) -> str | None:
    """The path of the first string of `value` (keys included) for which `bad(text)` holds."""
    stack: list[tuple[Any, str | None]] = [(value, path)]
    while stack:  # iterative: a deeply nested body cannot exhaust the recursion limit here
        item, where = stack.pop()
        if isinstance(item, str):
            if bad(item):
                return where
        elif isinstance(item, dict):
            for k, v in reversed(list(item.items())):
                key = without_surrogates(without_nul(k)) if isinstance(k, str) else str(k)
                sub = key if where is None else f"{where}.{key}"
                if isinstance(k, str) and bad(k):
                    return sub
                stack.append((v, sub))
        elif isinstance(item, (list, tuple)):
            for i in range(len(item) - 1, -1, -1):
                stack.append((item[i], f"{where or ''}[{i}]"))
    return None


def ascii_uint(raw: Any, *, max_digits: int = 18) -> int | None:
    """The non-negative integer `raw` spells with 1 to `max_digits` ASCII digits (nothing else, no sign,
    no spaces); None for anything else."""
    if not isinstance(raw, str) or not 0 < len(raw) <= max_digits or not (raw.isascii() and raw.isdigit()):
        return None
    return int(raw)
