"""README.md's configuration table against the settings: every environment variable that
`platform/rlstudio/config/` reads is named in it, so a new setting cannot go undocumented.

The names are read from the sources with `ast` (nothing is imported): an upper-case string that is one
of the first two arguments of a call there (`env_int("RLSTUDIO_X", 5)`, `environ.get("PORT")`,
`os.environ.setdefault(...)`). A table row may cover a family with a trailing `*`
(`RLSTUDIO_WEBHOOK_SECRET_*`).
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "platform" / "rlstudio" / "config"
ENV_NAME = re.compile(r"[A-Z][A-Z0-9_]{2,}")


def names_read_by_the_settings() -> dict[str, str]:
    """Each environment variable's name -> the file that reads it."""
    found: dict[str, str] = {}
    for path in sorted(CONFIG.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            for arg in node.args[:2]:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and ENV_NAME.fullmatch(arg.value):
                    found.setdefault(arg.value, str(path.relative_to(REPO)))
    return found


def configuration_table() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## Configuration", 1)[1]
    return section.split("\n## ", 1)[0]


def documented(name: str, table: str) -> bool:
    if f"`{name}`" in table:
        return True
    return any(name.startswith(prefix) for prefix in re.findall(r"`([A-Z][A-Z0-9_]*_)\*`", table))


def test_the_scan_finds_the_settings_variables():
    names = names_read_by_the_settings()
    # One of each kind of read: env.py's own, base.py's env_* helpers, its private _env_*, test.py's setdefault.
    assert {"DATABASE_URL", "RLSTUDIO_STATE_DIR", "RLSTUDIO_RUN_STARTUP_TIMEOUT_S", "RLSTUDIO_SOCKET_RECHECK_S",
            "RLSTUDIO_CELERY_QUEUE", "EMAIL_HOST"} <= set(names)


def test_every_variable_the_settings_read_is_in_the_readme_table():
    table = configuration_table()
    missing = {name: where for name, where in names_read_by_the_settings().items() if not documented(name, table)}
    assert not missing, f"add these to README.md's Configuration table: {missing}"


def test_the_table_names_no_variable_nobody_reads():
    """The other way: an `RLSTUDIO_*` name in the table is read somewhere in the platform (or, for the
    families, a variable with that prefix is)."""
    sources = "\n".join(p.read_text(encoding="utf-8") for p in (REPO / "platform" / "rlstudio").rglob("*.py"))
    table = configuration_table()
    for name in set(re.findall(r"`(RLSTUDIO_[A-Z0-9_]+)\*?`", table)):
        assert name in sources, name
