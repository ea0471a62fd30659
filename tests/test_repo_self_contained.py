"""The repository stands on its own: no file in it points outside it.

While the project was built, design notes and data lay beside the checkout (`../shared/design/*.md`,
`../shared/data/gsm8k/`). A reader of a fresh clone has neither, so every file git holds (tracked, or
new and not ignored) is scanned for

- a path out of the repository into them: `../shared`, `shared/design`, `shared/data`, or the same
  built with pathlib (`"shared" / "data"`);
- a Markdown file it names that the repository does not hold (`verl-notes.md`, `stack-notes.md`, a
  brief's `COMMON.md`, ...): every `<name>.md` mentioned must be the name of a file in the repository,
  except the few that programs write at run time (OUTPUT_MARKDOWN).

What a reader needs is in docs/ (docs/design.md, docs/api.md, docs/contributing.md, ...), the data the
tests need in tests/fixtures/. This file is the only one allowed to spell the forbidden names.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
THIS = Path(__file__).resolve().relative_to(REPO).as_posix()
OUTSIDE = [
    (re.compile(r"\.\./shared\b"), "a path to ../shared"),
    (re.compile(r"\bshared/(design|data)\b"), "a path into shared/design or shared/data"),
    (re.compile(r"""["']shared["']\s*/\s*["'](design|data)["']"""), "a pathlib path into shared/"),
]
MARKDOWN_NAME = re.compile(r"(?<![\w.-])([\w.-]*\w)\.md\b")
# Markdown files programs write as output (named in their docs), never files a reader looks for.
OUTPUT_MARKDOWN = {"results.md"}  # bench/gpu_check.py's table


def repo_files() -> list[str]:
    """The files git holds or would add (tracked, plus untracked ones not ignored), as posix paths."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         cwd=REPO, capture_output=True, check=True).stdout
    return sorted({p for p in out.decode("utf-8").split("\0") if p})


def offences(text: str, *, known_markdown: set[str]) -> list[tuple[int, str]]:
    """(line number, why) for each place in `text` that points outside the repository."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for pattern, why in OUTSIDE:
            if pattern.search(line):
                found.append((number, why))
        for match in MARKDOWN_NAME.finditer(line):
            name = match.group(1) + ".md"
            if name not in known_markdown and name not in OUTPUT_MARKDOWN:
                found.append((number, f"names {name}, which is not in the repository"))
    return found


def _text(path: Path) -> str | None:
    try:
        data = path.read_bytes()
    except (FileNotFoundError, IsADirectoryError):  # deleted in the working tree, or a submodule
        return None
    if b"\0" in data[:8192]:
        return None  # binary (screenshots)
    return data.decode("utf-8", errors="replace")


def test_the_scanner_finds_what_points_outside():
    known = {"api.md", "design.md"}
    assert offences("contract in ../shared/design/api.md", known_markdown=known)
    assert offences("see verl-notes.md section 5", known_markdown=known)
    assert offences('ROOT.parent / "shared" / "data" / "gsm8k"', known_markdown=known)
    assert offences("# The test machine has 2 cores (COMMON.md)", known_markdown=known)
    assert not offences("contract in docs/api.md and [design](design.md)", known_markdown=known)
    assert not offences("datasets shared with everyone; shared-prompt forward", known_markdown=known)
    assert not offences("results go to $OUT as results.json + results.md", known_markdown=known)


def test_no_file_points_outside_the_repository():
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout: nothing to list")
    files = repo_files()
    known_markdown = {Path(p).name for p in files if p.endswith(".md")}
    problems = []
    for rel in files:
        if rel == THIS:
            continue
        text = _text(REPO / rel)
        if text is None:
            continue
        problems += [f"{rel}:{number}: {why}" for number, why in offences(text, known_markdown=known_markdown)]
    assert not problems, ("files that point outside the repository (write it into docs/ or "
                          "tests/fixtures/ and point there):\n" + "\n".join(problems))
