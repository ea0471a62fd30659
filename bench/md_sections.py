"""The one way the benchmarks write their figures into docs/benchmarks.md: a section between its own
`<!-- bench:NAME:begin -->` / `<!-- bench:NAME:end -->` markers, replaced in place, or appended when the
file does not have it yet. Import it by file (`bench/` is not a package):
`sys.path.insert(0, str(Path(__file__).resolve().parent))` then `from md_sections import replace_section`.
"""
from __future__ import annotations

import platform
from pathlib import Path


def replace_section(path: Path, text: str, *, begin: str, end: str) -> None:
    """Put `text` (which starts with `begin` and ends with `end`) where the marked section of `path` is."""
    doc = path.read_text(encoding="utf-8") if path.exists() else ""
    if begin in doc and end in doc:
        a, b = doc.index(begin), doc.index(end) + len(end)
        doc = doc[:a] + text.rstrip("\n") + doc[b:]
    else:
        doc = doc.rstrip("\n") + "\n\n" + text.rstrip("\n") + "\n"
    path.write_text(doc, encoding="utf-8")


def cpu_name() -> str:
    """The machine's CPU model as /proc/cpuinfo names it (the processor string where there is none)."""
    try:
        return next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor()
