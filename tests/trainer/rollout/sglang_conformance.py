"""What the sglang backend uses of `sglang.Engine`, read from its source, and the checks against a release.

`backend_usage` parses trainer/rollout/sglang.py with `ast` (so a call added to the backend is
checked without editing the test): the keywords of `sglang.Engine(...)`, every `self.engine.<method>(...)`
call (keywords, positional count, awaited or not, a result unpacked), attributes read off the engine,
the keys of the sampling-params dict sent with `async_generate`, the result fields read from what
`async_generate` returns (followed into the function that reads them) and the finish-reason types
compared, and the memory tags. `stand_in` reads FakeSGLangEngine from its test file the same way.

`check` compares both with a `PackageSource` of the pinned release and returns one line per problem,
naming the method and the argument (an empty list: conformant).
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from tests.fixtures.wheel_source import ClassRef, PackageSource, Signature, signature

REPO = Path(__file__).resolve().parents[3]
BACKEND = REPO / "trainer" / "rollout" / "sglang.py"
STAND_IN = REPO / "tests" / "trainer" / "rollout" / "test_sglang_engine.py"
STAND_IN_CLASS = "FakeSGLangEngine"
# Where SGLang turns a request's sampling_params dicts into objects (SamplingParams(**d)), its
# memory tags, and the class behind Engine.tokenizer_manager.
SAMPLING_PARAMS = ("sglang.srt.sampling.sampling_params", "SamplingParams")
MEMORY_TAGS = ("sglang.srt.constants", "GPU_MEMORY_ALL_TYPES")
# Where the dicts Engine.async_generate returns are built: the TokenizerManager (result and
# meta_info) and the scheduler's finish reasons (to_json), both in the runtime's managers. Searching
# the whole package would also find the OpenAI-style API types, which spell the same keys.
RESULT_BUILDERS = "sglang/srt/managers/"
BACKEND_TAGS = "SGLANG_MEMORY_TAGS"
FINISH_TYPE = "type"


@dataclass
class EngineCall:
    method: str
    keywords: tuple[str, ...]
    n_positional: int
    awaited: bool
    unpacked: int | None  # `a, b = engine.m(...)`: 2
    line: int


@dataclass
class BackendUsage:
    constructor: dict[str, int] = field(default_factory=dict)  # keyword -> line
    calls: list[EngineCall] = field(default_factory=list)
    attributes: dict[str, int] = field(default_factory=dict)  # engine attributes read (not called)
    sampling_keys: dict[str, int] = field(default_factory=dict)
    result_paths: dict[tuple[str, ...], int] = field(default_factory=dict)
    finish_types: dict[str, int] = field(default_factory=dict)
    memory_tags: tuple[str, ...] | None = None


def _is_engine(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "engine"
            and isinstance(node.value, ast.Name) and node.value.id == "self")


def _strip(expr: ast.AST) -> ast.AST:
    """`x or {}`, `list(x)`, `a if c else b` -> the expression the value comes from."""
    while True:
        if isinstance(expr, ast.BoolOp):
            expr = expr.values[0]
        elif isinstance(expr, ast.IfExp):
            expr = expr.body
        elif isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in ("list", "dict") \
                and len(expr.args) == 1:
            expr = expr.args[0]
        else:
            return expr


def _key_read(expr: ast.AST) -> tuple[ast.AST, str] | None:
    """`x.get("k", ...)` or `x["k"]` (a load) -> (x, "k")."""
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "get" \
            and expr.args and isinstance(expr.args[0], ast.Constant) and isinstance(expr.args[0].value, str):
        return expr.func.value, expr.args[0].value
    if isinstance(expr, ast.Subscript) and isinstance(expr.ctx, ast.Load) and isinstance(expr.slice, ast.Constant) \
            and isinstance(expr.slice.value, str):
        return expr.value, expr.slice.value
    return None


def dict_keys(fn: ast.AST, var: str) -> dict[str, int]:
    """Keys a function puts in the dict `var`: its literal's keys and `var["k"] = ...` stores."""
    keys: dict[str, int] = {}
    for node in ast.walk(fn):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == var for t in targets) and isinstance(node.value, ast.Dict):
                keys.update({k.value: k.lineno for k in node.value.keys if isinstance(k, ast.Constant)})
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store) and isinstance(node.value, ast.Name) \
                and node.value.id == var and isinstance(node.slice, ast.Constant):
            keys[node.slice.value] = node.lineno
    return keys


def _returned_keys(fn: ast.FunctionDef) -> dict[str, int]:
    for node in ast.walk(fn):
        if isinstance(node, ast.Return) and node.value is not None:
            if isinstance(node.value, ast.Dict):
                return {k.value: k.lineno for k in node.value.keys if isinstance(k, ast.Constant)}
            if isinstance(node.value, ast.Name):
                return dict_keys(fn, node.value.id)
    return {}


def _reads_from(fn: ast.FunctionDef, root: str) -> tuple[dict[tuple[str, ...], int], dict[str, int]]:
    """Key paths read from the dict bound to `root` in `fn`, and the strings compared with a read
    ending in FINISH_TYPE (`kind == "abort"`)."""
    paths: dict[str, tuple[str, ...]] = {root: ()}
    reads: dict[tuple[str, ...], int] = {}
    typed: set[str] = set()
    for node in sorted((n for n in ast.walk(fn) if hasattr(n, "lineno")), key=lambda n: (n.lineno, n.col_offset)):
        read = _key_read(node)
        if read and isinstance(read[0], ast.Name) and read[0].id in paths:
            reads.setdefault(paths[read[0].id] + (read[1],), node.lineno)
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            read = _key_read(_strip(node.value))
            if read and isinstance(read[0], ast.Name) and read[0].id in paths:
                path = paths[read[0].id] + (read[1],)
                paths[node.targets[0].id] = path
                if path[-1] == FINISH_TYPE:
                    typed.add(node.targets[0].id)
    compared: dict[str, int] = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id in typed:
            for comp in node.comparators:
                for c in (comp.elts if isinstance(comp, (ast.Tuple, ast.List, ast.Set)) else [comp]):
                    if isinstance(c, ast.Constant) and isinstance(c.value, str):
                        compared[c.value] = node.lineno
    return reads, compared


def backend_usage(source: str | None = None) -> BackendUsage:
    tree = ast.parse(source if source is not None else BACKEND.read_text())
    usage = BackendUsage()
    functions = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    parents = {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}

    def enclosing(node: ast.AST) -> ast.AST:
        while node in parents and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node = parents[node]
        return node

    factories = {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign)
                 and ast.unparse(n.value) == "sglang.Engine" for t in n.targets if isinstance(t, ast.Name)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == BACKEND_TAGS for t in node.targets):
            usage.memory_tags = tuple(ast.literal_eval(node.value))
        if not isinstance(node, ast.Call):
            continue
        if (isinstance(node.func, ast.Name) and node.func.id in factories) or ast.unparse(node.func) == "sglang.Engine":
            for kw in node.keywords:
                if kw.arg is not None:
                    usage.constructor[kw.arg] = node.lineno
                elif isinstance(kw.value, ast.Name):
                    usage.constructor.update(dict_keys(enclosing(node), kw.value.id))
        elif isinstance(node.func, ast.Attribute) and _is_engine(node.func.value):
            parent = parents.get(node)
            outer = parents.get(parent) if isinstance(parent, ast.Await) else parent
            unpacked = (len(outer.targets[0].elts) if isinstance(outer, ast.Assign)
                        and isinstance(outer.targets[0], ast.Tuple) else None)
            call = EngineCall(node.func.attr, tuple(k.arg for k in node.keywords if k.arg), len(node.args),
                              isinstance(parent, ast.Await), unpacked, node.lineno)
            usage.calls.append(call)
            for kw in node.keywords:
                if kw.arg == "sampling_params":
                    value = kw.value.elt if isinstance(kw.value, ast.ListComp) else kw.value
                    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in functions:
                        usage.sampling_keys.update(_returned_keys(functions[value.func.id]))
            if node.func.attr == "async_generate" and isinstance(outer, ast.Assign):
                _follow_results(usage, tree, functions, outer.targets[0])
        elif isinstance(node.func, ast.Name) and node.func.id == "getattr" and node.args and _is_engine(node.args[0]) \
                and len(node.args) > 1 and isinstance(node.args[1], ast.Constant):
            usage.attributes[node.args[1].value] = node.lineno
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_engine(node.value) and not isinstance(parents.get(node), ast.Call):
            usage.attributes[node.attr] = node.lineno
    return usage


def result_consumers(tree: ast.Module, functions: dict, target: str):
    """(function, parameter) for each call `f(x)` inside a comprehension over the list `target` (or over
    `zip(..., target, ...)`) whose `f` is one of the module's `functions`: where each result goes."""
    for comp in ast.walk(tree):
        if not isinstance(comp, (ast.ListComp, ast.GeneratorExp)):
            continue
        for gen in comp.generators:
            it, element = gen.iter, None
            if isinstance(it, ast.Name) and it.id == target and isinstance(gen.target, ast.Name):
                element = gen.target.id
            elif isinstance(it, ast.Call) and ast.unparse(it.func) == "zip" and isinstance(gen.target, ast.Tuple):
                for arg, elt in zip(it.args, gen.target.elts):
                    if isinstance(arg, ast.Name) and arg.id == target and isinstance(elt, ast.Name):
                        element = elt.id
            if element is None:
                continue
            for call in ast.walk(comp.elt):
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in functions:
                    for pos, arg in enumerate(call.args):
                        if isinstance(arg, ast.Name) and arg.id == element:
                            fn = functions[call.func.id]
                            yield fn, fn.args.args[pos].arg


def _follow_results(usage: BackendUsage, tree: ast.Module, functions: dict, target: ast.expr) -> None:
    """From `results = await engine.async_generate(...)` to the function each result is passed to."""
    if not isinstance(target, ast.Name):
        return
    for fn, root in result_consumers(tree, functions, target.id):
        reads, compared = _reads_from(fn, root)
        usage.result_paths.update(reads)
        usage.finish_types.update(compared)


# ------------------------------------------------------------------------------------ the stand-in
@dataclass
class StandIn:
    methods: dict[str, ast.FunctionDef | ast.AsyncFunctionDef]
    attributes: set[str]  # self.X assigned in __init__
    result_keys: dict[str, int]  # keys of the dicts async_generate builds


def stand_in(source: str | None = None) -> StandIn:
    tree = ast.parse(source if source is not None else STAND_IN.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == STAND_IN_CLASS)
    methods = {n.name: n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    attrs = {t.attr for n in ast.walk(methods.get("__init__", cls)) if isinstance(n, ast.Assign)
             for t in n.targets if isinstance(t, ast.Attribute) and ast.unparse(t.value) == "self"}
    keys: dict[str, int] = {}
    gen = methods.get("async_generate")
    for node in ast.walk(gen) if gen else []:
        if isinstance(node, ast.Dict):
            keys.update({k.value: k.lineno for k in node.keys if isinstance(k, ast.Constant)})
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store) and isinstance(node.slice, ast.Constant):
            keys[node.slice.value] = node.lineno
    return StandIn(methods, attrs, keys)


# ------------------------------------------------------------------------------------ the checks
def _runs_on_own_loop(fn: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and ast.unparse(n.func) == "self.loop.run_until_complete" for n in ast.walk(fn))


def _sets_attribute(src: PackageSource, cls: ClassRef, name: str) -> bool:
    if src.class_attribute(cls, name) is not None:
        return True
    return any(isinstance(t, ast.Attribute) and t.attr == name and ast.unparse(t.value) == "self"
               for c in src.mro(cls) for n in ast.walk(c.node) if isinstance(n, (ast.Assign, ast.AnnAssign))
               for t in (n.targets if isinstance(n, ast.Assign) else [n.target]))


def _forward_targets(src: PackageSource, cls: ClassRef, fn: ast.AST, kwarg: str) -> list[ClassRef]:
    """Classes a method builds from its **kwarg (`Cls(**kwargs)` or `self.attr(**kwargs)`)."""
    out = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and any(k.arg is None and isinstance(k.value, ast.Name) and k.value.id == kwarg
                                              for k in node.keywords):
            func = node.func
            if isinstance(func, ast.Attribute) and ast.unparse(func.value) == "self":
                found = src.class_attribute(cls, func.attr)
                if found is None:
                    continue
                owner, func = found
                if isinstance(func, ast.Call) and func.args:  # staticmethod(f) and the like
                    func = func.args[0]
                ref = src.resolve_class(owner.module, func)
            else:
                ref = src.resolve_class(cls.module, func)
            if ref is not None:
                out.append(ref)
    return out


def _passed_on(src: PackageSource, cls: ClassRef, fn: ast.AST, param: str) -> list[tuple[ClassRef, str, int]]:
    """(class, keyword, line) for each `Cls(keyword=param)` in a method: where an argument goes next."""
    out = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg and isinstance(kw.value, ast.Name) and kw.value.id == param:
                    ref = src.resolve_class(cls.module, node.func)
                    if ref is not None:
                        out.append((ref, kw.arg, node.lineno))
    return out


def _first_difference(fake: Signature, real: Signature) -> str:
    if fake.is_async != real.is_async:
        return "one is async, the other not"
    for i in range(max(len(fake.params), len(real.params))):
        f = fake.params[i] if i < len(fake.params) else None
        r = real.params[i] if i < len(real.params) else None
        if f != r:
            return f"parameter {i + 1}: stand-in {f or 'none'}, sglang {r or 'none'}"
    return ""


def check(src: PackageSource, usage: BackendUsage, fake: StandIn, version: str = "") -> list[str]:
    """Every problem found, one line each, naming the method and the argument."""
    problems: list[str] = []
    engine = src.resolve("sglang", "Engine")
    if not isinstance(engine, ClassRef):
        return [f"sglang{version}: `sglang.Engine` does not resolve to a class in the package"]
    bases = ", ".join(c.name for c in src.mro(engine))
    tag = f"sglang{version}"

    def real_method(name: str):
        found = src.method(engine, name)
        if found is None:
            problems.append(f"{tag}: sglang.Engine.{name} does not exist (no implementation in {bases})")
        return found

    # The constructor: Engine(**kwargs) forwards to ServerArgs.
    init = real_method("__init__")
    if init is not None:
        owner, fn = init
        sig = signature(fn)
        targets = _forward_targets(src, owner, fn, sig.var_keyword) if sig.var_keyword else []
        fields = {name for t in targets for name in src.fields(t)}
        for kw, line in usage.constructor.items():
            if kw not in sig.names and kw not in fields:
                where = f"nor a field of {', '.join(t.name for t in targets)}" if targets else \
                    "and it forwards no **kwargs to a class this check can resolve"
                problems.append(f"{tag}: sglang.Engine(...) keyword {kw!r} (backend line {line}) is not a parameter "
                                f"of Engine.__init__ {where}")

    # Methods called on the engine.
    called = {}
    for call in usage.calls:
        found = real_method(call.method)
        if found is None:
            continue
        owner, fn = found
        sig = signature(fn)
        called[call.method] = (owner, fn, sig)
        name = f"sglang.Engine.{call.method}"
        if call.awaited != sig.is_async:
            problems.append(f"{tag}: {name} is {'async' if sig.is_async else 'not async'} but the backend "
                            f"{'awaits' if call.awaited else 'calls it without await'} (line {call.line})")
        n_pos = sum(p.kind == "positional" for p in sig.params)
        if call.n_positional > n_pos and not any(p.kind == "var_positional" for p in sig.params):
            problems.append(f"{tag}: {name} takes {n_pos} positional arguments, the backend passes "
                            f"{call.n_positional} (line {call.line})")
        targets = _forward_targets(src, owner, fn, sig.var_keyword) if sig.var_keyword else []
        fields = {f for t in targets for f in src.fields(t)}
        for kw in call.keywords:
            if kw not in sig.names and kw not in fields:
                problems.append(f"{tag}: {name} has no parameter {kw!r} (backend line {call.line}); "
                                f"its signature: {sig.render()}")
                continue
            for ref, arg, line in _passed_on(src, owner, fn, kw):
                if arg not in src.fields(ref):
                    problems.append(f"{tag}: {name} passes {kw!r} on as {ref.name}.{arg} "
                                    f"({src.path_of(owner.module)}:{line}), which {ref.name} does not have")
        if call.unpacked is not None:
            _check_unpacked(src, engine, call, problems, tag)
    for attr, line in usage.attributes.items():
        if not _sets_attribute(src, engine, attr):
            problems.append(f"{tag}: the backend reads sglang.Engine.{attr} (line {line}); Engine never sets it")

    # Sampling params, result fields, finish types, memory tags.
    sp = src.resolve(*SAMPLING_PARAMS)
    sp_fields = src.fields(sp) if isinstance(sp, ClassRef) else {}
    if not sp_fields:
        problems.append(f"{tag}: {'.'.join(SAMPLING_PARAMS)} not found (the class sampling_params dicts become)")
    for key, line in usage.sampling_keys.items():
        if sp_fields and key not in sp_fields:
            problems.append(f"{tag}: sglang.Engine.async_generate sampling_params key {key!r} (backend line {line}) "
                            f"is not a field of SamplingParams")
    for path, line in usage.result_paths.items():
        if src.key_built(path[-1], RESULT_BUILDERS) is None:
            problems.append(f"{tag}: sglang.Engine.async_generate result field {'.'.join(path)} (read at backend line "
                            f"{line}): no {path[-1]!r} entry is built in {RESULT_BUILDERS}")
    for kind, line in usage.finish_types.items():
        if src.value_built(FINISH_TYPE, kind, RESULT_BUILDERS) is None:
            problems.append(f"{tag}: sglang.Engine.async_generate finish_reason type {kind!r} (compared at backend "
                            f"line {line}): no {{{FINISH_TYPE!r}: {kind!r}}} is built in {RESULT_BUILDERS}")
    try:
        real_tags = src.constant(*MEMORY_TAGS)
    except (KeyError, ValueError) as exc:
        problems.append(f"{tag}: memory tags {'.'.join(MEMORY_TAGS)} not readable: {exc}")
    else:
        if usage.memory_tags is None or set(usage.memory_tags) != set(real_tags):
            problems.append(f"{tag}: sglang.Engine.release_memory_occupation / resume_memory_occupation tags: the "
                            f"backend's {BACKEND_TAGS} = {usage.memory_tags}, sglang's {MEMORY_TAGS[1]} = {real_tags}")

    # The stand-in: same signatures, same loop discipline, only real methods, real result keys.
    for method in ["__init__", *called]:
        real = called.get(method) or (init and (init[0], init[1], signature(init[1])))
        if not real:
            continue
        fake_fn = fake.methods.get(method)
        if fake_fn is None:
            problems.append(f"stand-in: {STAND_IN_CLASS}.{method} is missing (the backend calls sglang.Engine.{method})")
            continue
        diff = _first_difference(signature(fake_fn), real[2])
        if diff:
            problems.append(f"stand-in: {STAND_IN_CLASS}.{method}{signature(fake_fn).render()} differs from "
                            f"sglang.Engine.{method}{real[2].render()}: {diff}")
        if method != "__init__" and _runs_on_own_loop(real[1]) != _runs_on_own_loop(fake_fn):
            problems.append(f"stand-in: sglang.Engine.{method} {'runs' if _runs_on_own_loop(real[1]) else 'does not run'}"
                            f" its work with self.loop.run_until_complete; {STAND_IN_CLASS}.{method} must too")
    for method in fake.methods:
        if not method.startswith("_") and src.method(engine, method) is None:
            problems.append(f"stand-in: {STAND_IN_CLASS}.{method} is not a method of sglang.Engine")
    for attr in usage.attributes:
        if attr not in fake.attributes:
            problems.append(f"stand-in: {STAND_IN_CLASS}.__init__ does not set {attr!r} (the backend reads it)")
    for key, line in fake.result_keys.items():
        if src.key_built(key, RESULT_BUILDERS) is None:
            problems.append(f"stand-in: {STAND_IN_CLASS}.async_generate builds result key {key!r} (line {line}), "
                            f"which sglang does not build in {RESULT_BUILDERS}")
    return problems


def _check_unpacked(src: PackageSource, engine: ClassRef, call: EngineCall, problems: list[str], tag: str) -> None:
    """`a, b = engine.m(...)`: Engine.m returns its TokenizerManager's m; that must be annotated a tuple of
    as many items."""
    manager = src.resolve(engine.module, "TokenizerManager")
    found = src.method(manager, call.method) if isinstance(manager, ClassRef) else None
    returns = ast.unparse(found[1].returns) if found and found[1].returns is not None else ""
    inner = returns.partition("[")[2].rstrip("]")
    if not returns.lower().startswith("tuple[") or len([p for p in inner.split(",") if p.strip()]) != call.unpacked:
        problems.append(f"{tag}: sglang.Engine.{call.method}: the backend unpacks {call.unpacked} values (line "
                        f"{call.line}); TokenizerManager.{call.method} returns {returns or 'no annotation'}")
