"""No import circles: between the web apps, or between any two modules of the platform or the trainer.

Every `import` counts, the ones inside functions too (a lazy import hides a circle from Python, not
from a reader). The graph is read from the sources with `ast`, so nothing is imported here.
"""
from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOTS = {"rlstudio": REPO / "platform" / "rlstudio", "trainer": REPO / "trainer"}
# The web apps (Django apps with models or pages); the rest of rlstudio (config, api, launcher, ...)
# is the project around them.
APPS = ("accounts", "catalog", "runs", "telemetry", "quotas", "registry", "demo", "alerts", "evaluations",
        "playground", "exports", "projects", "sweeps")


def _modules() -> dict[str, Path]:
    mods = {}
    for root in ROOTS.values():
        for path in root.rglob("*.py"):
            if "migrations" in path.parts:
                continue
            parts = list(path.relative_to(root.parent).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join(parts)] = path
    return mods


def _targets(mods: dict[str, Path], module: str, node: ast.AST) -> list[str]:
    if isinstance(node, ast.ImportFrom):
        if node.level:
            base = module.split(".")
            if mods[module].name != "__init__.py":
                base = base[:-1]
            base = base[: len(base) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        names = [target] + [f"{target}.{alias.name}" for alias in node.names]
    else:
        names = [alias.name for alias in node.names]
    return [name for name in names if name in mods and name != module]


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    edges: dict[str, set[str]] = defaultdict(set)
    for module, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges[module].update(_targets(mods, module, node))
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(set(edges) | {w for ws in edges.values() for w in ws}):
        if v not in index:
            visit(v)
    return found


def _explain(edges: dict[str, set[str]], component: list[str]) -> str:
    inside = set(component)
    return "\n".join(f"  {a} -> {b}" for a in component for b in sorted(edges.get(a, set()) & inside))


def test_no_import_circle_between_modules():
    edges = import_graph()
    found = cycles(edges)
    assert not found, "import circles:\n" + "\n\n".join(_explain(edges, c) for c in found)


def test_no_import_circle_between_apps():
    app_of = {f"rlstudio.{app}": app for app in APPS}

    def app(module: str) -> str | None:
        parts = module.split(".")
        return app_of.get(".".join(parts[:2])) if len(parts) >= 2 else None

    apps: dict[str, set[str]] = defaultdict(set)
    for a, targets in import_graph().items():
        for b in targets:
            if app(a) and app(b) and app(a) != app(b):
                apps[app(a)].add(app(b))
    assert not cycles(apps), f"apps importing each other: {dict(apps)}"


def test_the_checker_finds_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# The command-line client (platform/rlstudio_cli/, docs/cli.md) runs wherever a script or a CI job does:
# the standard library only (PyYAML optional, imported where a .yaml config is read), never Django, DRF,
# the platform's web apps (`rlstudio.*`) or the trainer.
CLI_ROOT = REPO / "platform" / "rlstudio_cli"
CLI_OPTIONAL = {"yaml"}


def foreign_imports(source: str) -> list[str]:
    """The absolute imports of `source` that are neither the standard library, the client itself nor
    CLI_OPTIONAL (relative imports stay inside the client's package)."""
    import sys

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            names = [] if node.level else [node.module or ""]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top not in sys.stdlib_module_names and top != "rlstudio_cli" and top not in CLI_OPTIONAL:
                found.append(name)
    return found


def test_the_cli_imports_the_standard_library_only():
    paths = sorted(CLI_ROOT.rglob("*.py"))
    assert len(paths) >= 3, "platform/rlstudio_cli/ moved: update CLI_ROOT"
    bad = {str(p.relative_to(REPO)): foreign_imports(p.read_text(encoding="utf-8")) for p in paths}
    assert not {p: names for p, names in bad.items() if names}, bad


def test_the_cli_import_check_finds_django_and_the_web_apps():
    source = ("import json\nfrom . import output\nimport django.conf\nfrom rlstudio.runs import services\n"
              "def f():\n    from rest_framework import status\n    import trainer.cli\n")
    assert foreign_imports(source) == ["django.conf", "rlstudio.runs", "rest_framework", "trainer.cli"]


def test_importing_the_cli_loads_no_django():
    """At run time too (a transitive import the source check cannot see): a fresh interpreter that runs
    the client's --help has loaded neither Django nor any module of the platform or the trainer."""
    import subprocess
    import sys

    code = ("import sys, rlstudio_cli.main as m\n"
            "try:\n    m.main(['--help'])\nexcept SystemExit:\n    pass\n"
            "bad = [n for n in sys.modules if n.split('.')[0] in ('django', 'rest_framework', 'rlstudio', 'trainer')]\n"
            "print('LOADED', bad)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": str(REPO / "platform"), "PATH": "/usr/bin:/bin"}, check=True)
    assert "LOADED []" in out.stdout, out.stdout + out.stderr
