"""What every command shares: printing to stdout and stderr (`out`, `err`, `emit_json`, the
`error: <field>: <message>` line), walking a paginated list (`paged`, `footer`), the id argument
type, a time as `YYYY-MM-DD HH:MM`, and the one wait (`sleep`) that `runs watch` and
`datasets upload --wait` poll with, and the question a deletion (or a sweep's stop) asks first (`confirmed`). The
commands themselves live in `runs`, `runs_actions`, `catalog`, `projects`, `evaluations`, `exports`,
`sweeps` and `login`.
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Callable

from .client import Client, ClientError
from .output import clean, to_json


def out(text: str = "") -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def err(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def emit_json(data: Any) -> None:
    out(to_json(data))


def error_line(field: str | None, message: str) -> str:
    message = clean(message)
    field = clean(field) if field else ""
    if field and not message.startswith(f"{field}:"):
        return f"error: {field}: {message}"
    return f"error: {message}"


def sleep(seconds: float) -> None:
    """The commands' one wait between polls. Callers look it up as `common.sleep` when they wait, so a
    test replaces it here once for every command (the server thread keeps time.sleep)."""
    time.sleep(seconds)


def paged(client: Client, path: str, args, **filters: Any) -> tuple[list[dict], int]:
    """A paginated list's rows (`--limit`/`--offset`, or every page with `--all`) and its count."""
    offset, rows = args.offset, []
    while True:
        page = client.get(path, limit=500 if args.all else args.limit, offset=offset, **filters)
        results, count = page.get("results") or [], int(page.get("count") or 0)
        rows += results
        offset += len(results)
        if not args.all or not results or offset >= count:
            return rows, count


def footer(shown: int, count: int, args) -> None:
    if shown < count and not args.json:
        err(f"({shown} of {count}; --all for every one, or --limit/--offset)")


def id_arg(value: str) -> int:
    """argparse's type for an object's id: a whole number, 1 or more."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"an id is a whole number, got {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"an id is 1 or more, got {value}")
    return number


def when(value: Any) -> str:
    """An ISO time as `YYYY-MM-DD HH:MM` (the API gives it with a zone; shown as it is)."""
    if not value:
        return "-"
    text = clean(value)
    return text[:16].replace("T", " ") if len(text) >= 16 and text[10:11] == "T" else text


def confirmed(args, question: Callable[[], str], *, what: str = "", refusal: str | None = None,
              final: bool = True) -> bool:
    """Whether to go on with a deletion that cannot be undone (or, with `final` false, another action
    worth a question: stopping a sweep's runs): yes with `--yes`; else asked on the terminal
    (`question()` on stderr, the answer from stdin; only `y` or `yes` goes on). When stdin is not a
    terminal (a script, CI) nobody can answer: refused naming `--yes` (exit 2) before `question` is
    called. `what` ("a run") is what the refusal says is deleted; `refusal` replaces its whole text."""
    if args.yes:
        return True
    if not sys.stdin.isatty():
        raise ClientError(refusal or f"deleting {what} cannot be undone: pass --yes to delete it without being "
                          "asked", field="--yes", exit_code=2)
    sys.stderr.write(f"{question()}{' This cannot be undone.' if final else ''} [y/N] ")
    sys.stderr.flush()
    return sys.stdin.readline().strip().lower() in ("y", "yes")
