"""What the vllm backend uses of vLLM, read from its source, and the checks against a release.

`backend_usage` parses trainer/rollout/vllm.py with `ast` (so a call added to the backend is checked
without editing the test): the keywords of `vllm.LLM(...)` (and the string values given to them),
every `self.llm.<method>(...)` call (keywords, positional count, the keys of a request dict passed
to it and of the dict inside), the keys of the SamplingParams keywords and of the prompt dict, the
attribute paths read from what `LLM.generate` returns (followed into the function that reads each
result: `outputs[].token_ids`, ...), the finish reasons compared, the sleep tags and the
weight-transfer backend. `stand_in` reads the test file's FakeLLM and its result classes the same way.

`check` compares both with a `PackageSource` of the pinned release and returns one line per problem,
naming the class, the method and the argument (an empty list: conformant).
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from tests.fixtures.source_types import ITEM, attribute_annotation, classes_in, has_attribute, literal_values, walk_path
from tests.fixtures.wheel_source import ClassRef, PackageSource, signature
from tests.trainer.rollout.sglang_conformance import (
    _first_difference,
    _forward_targets,
    _returned_keys,
    dict_keys,
    result_consumers,
)

REPO = Path(__file__).resolve().parents[3]
BACKEND = REPO / "trainer" / "rollout" / "vllm.py"
STAND_IN = REPO / "tests" / "trainer" / "rollout" / "test_vllm_engine.py"
STAND_IN_CLASS = "FakeLLM"
STAND_IN_RESULTS = ("RequestOutput", "CompletionOutput", "Logprob", "SamplingParams")  # named as vLLM's
SLEEP_TAGS = ("vllm.v1.executor.abstract", "SLEEP_TAGS")
FINISH_REASONS = ("vllm.v1.engine", "FINISH_REASON_STRINGS")
FACTORY = ("vllm.distributed.weight_transfer.factory", "WeightTransferEngineFactory")
# The request dataclasses LLM.init_weight_transfer_engine / update_weights read their dict as.
REQUESTS = {"init_weight_transfer_engine": ("WeightTransferInitRequest", "init_info_cls"),
            "update_weights": ("WeightTransferUpdateRequest", "update_info_cls")}
REQUEST_MODULE = "vllm.distributed.weight_transfer.base"
BACKEND_TAGS = "VLLM_SLEEP_TAGS"
BACKEND_TRANSFER = "WEIGHT_TRANSFER_BACKEND"


@dataclass
class LLMCall:
    method: str
    keywords: tuple[str, ...]
    n_positional: int
    line: int
    request: dict[str, dict[str, int]] = field(default_factory=dict)  # {"update_info": {key: line}}


@dataclass
class BackendUsage:
    constructor: dict[str, int] = field(default_factory=dict)  # keyword -> line
    constructor_strings: dict[str, str] = field(default_factory=dict)  # keyword -> a string constant given
    transfer_config: dict[str, int] = field(default_factory=dict)  # keys of weight_transfer_config={...}
    transfer_backend: str | None = None
    calls: list[LLMCall] = field(default_factory=list)
    attributes: dict[str, int] = field(default_factory=dict)  # self.llm.X read, not called
    sampling_keys: dict[str, int] = field(default_factory=dict)
    prompt_keys: dict[str, int] = field(default_factory=dict)
    result_paths: dict[tuple[str, ...], int] = field(default_factory=dict)
    finish_reasons: dict[str, int] = field(default_factory=dict)
    sleep_tags: tuple[str, ...] | None = None


def _is_llm(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "llm" and ast.unparse(node.value) == "self"


def _local_call_keys(expr: ast.AST, functions: dict) -> dict[str, int]:
    """Keys of the dict a local function returns, for `f(...)` or `[f(x) for x in ...]`."""
    if isinstance(expr, ast.ListComp):
        expr = expr.elt
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in functions:
        return _returned_keys(functions[expr.func.id])
    return {}


def _constant(tree: ast.Module, name: str) -> object:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    return None


def backend_usage(source: str | None = None) -> BackendUsage:
    tree = ast.parse(source if source is not None else BACKEND.read_text())
    usage = BackendUsage()
    functions = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    parents = {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}
    tags = _constant(tree, BACKEND_TAGS)
    usage.sleep_tags = tuple(tags) if tags is not None else None
    backend = _constant(tree, BACKEND_TRANSFER)
    usage.transfer_backend = backend if isinstance(backend, str) else None

    def enclosing(node: ast.AST) -> ast.AST:
        while node in parents and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node = parents[node]
        return node

    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "LLM":
            _read_constructor(usage, node, enclosing(node))
        elif isinstance(func, ast.Attribute) and func.attr == "SamplingParams":
            for kw in node.keywords:
                if kw.arg is None:
                    usage.sampling_keys.update(_local_call_keys(kw.value, functions))
                else:
                    usage.sampling_keys[kw.arg] = node.lineno
        elif isinstance(func, ast.Attribute) and _is_llm(func.value):
            call = LLMCall(func.attr, tuple(k.arg for k in node.keywords if k.arg), len(node.args), node.lineno)
            if node.args and isinstance(node.args[0], ast.Dict):
                for key, value in zip(node.args[0].keys, node.args[0].values):
                    if isinstance(key, ast.Constant):
                        inner = ({k.value: k.lineno for k in value.keys if isinstance(k, ast.Constant)}
                                 if isinstance(value, ast.Dict) else _local_call_keys(value, functions))
                        call.request[key.value] = inner
            usage.calls.append(call)
            if func.attr == "generate":
                if node.args:
                    usage.prompt_keys.update(_local_call_keys(node.args[0], functions))
                outer = parents.get(node)
                if isinstance(outer, ast.Assign) and isinstance(outer.targets[0], ast.Name):
                    _follow_results(usage, tree, functions, outer.targets[0].id)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_llm(node.value) and not isinstance(parents.get(node), ast.Call):
            usage.attributes[node.attr] = node.lineno
    return usage


def _read_constructor(usage: BackendUsage, node: ast.Call, fn: ast.AST) -> None:
    values: dict[str, ast.expr] = {}
    for kw in node.keywords:
        if kw.arg is not None:
            usage.constructor[kw.arg] = node.lineno
            values[kw.arg] = kw.value
        elif isinstance(kw.value, ast.Name):
            usage.constructor.update(dict_keys(fn, kw.value.id))
            for sub in ast.walk(fn):
                targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target] \
                    if isinstance(sub, ast.AnnAssign) else []
                if any(isinstance(t, ast.Name) and t.id == kw.value.id for t in targets) \
                        and isinstance(sub.value, ast.Dict):
                    values.update({k.value: v for k, v in zip(sub.value.keys, sub.value.values)
                                   if isinstance(k, ast.Constant)})
    for key, value in values.items():
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            usage.constructor_strings[key] = value.value
        if key == "weight_transfer_config" and isinstance(value, ast.Dict):
            usage.transfer_config = {k.value: k.lineno for k in value.keys if isinstance(k, ast.Constant)}


def _path(expr: ast.AST, env: dict[str, tuple[str, ...]]) -> tuple[str, ...] | None:
    """The attribute path of an expression rooted at a tracked name (`x or []`, `list(x)` see through)."""
    if isinstance(expr, ast.BoolOp):
        return _path(expr.values[0], env)
    if isinstance(expr, ast.Name):
        return env.get(expr.id)
    if isinstance(expr, ast.Attribute):
        base = _path(expr.value, env)
        return None if base is None else base + (expr.attr,)
    if isinstance(expr, ast.Subscript):
        base = _path(expr.value, env)
        return None if base is None else base + (ITEM,)
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in ("list", "tuple") \
            and len(expr.args) == 1:
        return _path(expr.args[0], env)
    return None


def _reads_from(fn: ast.FunctionDef, root: str) -> tuple[dict[tuple[str, ...], int], dict[str, int]]:
    """Attribute paths read from the object bound to `root` in `fn`, and the strings compared with a
    value read from a `finish_reason`."""
    env: dict[str, tuple[str, ...]] = {root: ()}
    reads: dict[tuple[str, ...], int] = {}
    nodes = sorted((n for n in ast.walk(fn) if hasattr(n, "lineno")), key=lambda n: (n.lineno, n.col_offset))
    for node in nodes:  # bind names first: assignments and comprehension targets, in source order
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            path = _path(node.value, env)
            if path is not None:
                env[node.targets[0].id] = path
        if isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.SetComp)):
            for gen in node.generators:
                it, target = gen.iter, gen.target
                pairs = (list(zip(it.args, target.elts)) if isinstance(it, ast.Call) and ast.unparse(it.func) == "zip"
                         and isinstance(target, ast.Tuple) else [(it, target)])
                for source, name in pairs:
                    path = _path(source, env)
                    if path is not None and isinstance(name, ast.Name):
                        env[name.id] = path + (ITEM,)
    for node in nodes:
        if isinstance(node, ast.Attribute):
            path = _path(node, env)
            if path is not None:
                reads.setdefault(path, node.lineno)
    compared: dict[str, int] = {}
    for node in nodes:
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) \
                and (env.get(node.left.id) or ("",))[-1] == "finish_reason":
            for comp in node.comparators:
                for c in (comp.elts if isinstance(comp, (ast.Tuple, ast.List, ast.Set)) else [comp]):
                    if isinstance(c, ast.Constant) and isinstance(c.value, str):
                        compared[c.value] = node.lineno
    return reads, compared


def _follow_results(usage: BackendUsage, tree: ast.Module, functions: dict, target: str) -> None:
    """From `results = self.llm.generate(...)` to the function each result is passed to."""
    for fn, root in result_consumers(tree, functions, target):
        reads, compared = _reads_from(fn, root)
        usage.result_paths.update(reads)
        usage.finish_reasons.update(compared)


# ------------------------------------------------------------------------------------ the stand-in
@dataclass
class StandIn:
    methods: dict[str, ast.FunctionDef]
    results: dict[str, set[str]]  # stand-in result class -> attributes it sets or declares


def stand_in(source: str | None = None) -> StandIn:
    tree = ast.parse(source if source is not None else STAND_IN.read_text())
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    cls = classes[STAND_IN_CLASS]
    methods = {n.name: n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    results: dict[str, set[str]] = {}
    for name in STAND_IN_RESULTS:
        node = classes.get(name)
        if node is None:
            continue
        attrs = {s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
        attrs |= {t.attr for n in ast.walk(node) if isinstance(n, ast.Assign) for t in n.targets
                  if isinstance(t, ast.Attribute) and ast.unparse(t.value) == "self"}
        results[name] = attrs
    return StandIn(methods, results)


def _sleep_tags(src: PackageSource) -> tuple[str, ...]:
    ref = src.resolve(*SLEEP_TAGS)
    if not isinstance(ref, tuple):
        raise KeyError(f"{SLEEP_TAGS[1]} is not a module-level value of {SLEEP_TAGS[0]}")
    value = ref[1]
    if isinstance(value, ast.Call) and value.args:  # frozenset(("weights", "kv_cache"))
        value = value.args[0]
    return tuple(ast.literal_eval(value))


def _transfer_engine(src: PackageSource, backend: str) -> ClassRef | None:
    """The worker-side engine class the weight-transfer factory registers under `backend`."""
    module, name = FACTORY
    for node in ast.walk(src.tree(module)):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == f"{name}.register_engine" and len(node.args) == 3 \
                and all(isinstance(a, ast.Constant) for a in node.args) and node.args[0].value == backend:
            ref = src.resolve(node.args[1].value, node.args[2].value)
            return ref if isinstance(ref, ClassRef) else None
    return None


# ------------------------------------------------------------------------------------ the checks
def check(src: PackageSource, usage: BackendUsage, fake: StandIn, version: str = "") -> list[str]:
    """Every problem found, one line each, naming the class, the method and the argument."""
    tag = f"vllm{version}"
    llm = src.resolve("vllm", "LLM")
    if not isinstance(llm, ClassRef):
        return [f"{tag}: `vllm.LLM` does not resolve to a class in the package"]
    problems: list[str] = []
    bases = ", ".join(c.name for c in src.mro(llm))

    def real_method(name: str):
        found = src.method(llm, name)
        if found is None:
            problems.append(f"{tag}: vllm.LLM.{name} does not exist (no implementation in {bases})")
        return found

    # The constructor: LLM(model, *, ..., **kwargs) forwards kwargs to EngineArgs.
    init = real_method("__init__")
    if init is not None:
        owner, fn = init
        sig = signature(fn)
        targets = _forward_targets(src, owner, fn, sig.var_keyword) if sig.var_keyword else []
        fields = {name: (t, where) for t in targets for name, where in src.fields(t).items()}
        for kw, line in usage.constructor.items():
            if kw not in sig.names and kw not in fields:
                problems.append(f"{tag}: vllm.LLM(...) keyword {kw!r} (backend line {line}) is not a parameter of "
                                f"LLM.__init__ nor a field of {', '.join(t.name for t in targets) or 'its **kwargs'}")
                continue
            value = usage.constructor_strings.get(kw)
            annotation = _init_annotation(owner.module, fn, kw) or _field_annotation(src, fields.get(kw, (None,))[0], kw)
            allowed = literal_values(src, *annotation) if annotation else set()
            if value is not None and allowed and value not in allowed:
                problems.append(f"{tag}: vllm.LLM(...) {kw}={value!r} (backend line {line}) is not one of "
                                f"{sorted(allowed)}")
        _check_transfer_config(src, usage, fields, problems, tag)

    # Methods called on the LLM.
    called = {}
    for call in usage.calls:
        found = real_method(call.method)
        if found is None:
            continue
        owner, fn = found
        sig = signature(fn)
        called[call.method] = sig
        name = f"vllm.LLM.{call.method}"
        if sig.is_async:
            problems.append(f"{tag}: {name} is async; the backend calls it without await (line {call.line})")
        n_pos = sum(p.kind == "positional" for p in sig.params)
        if call.n_positional > n_pos and not any(p.kind == "var_positional" for p in sig.params):
            problems.append(f"{tag}: {name} takes {n_pos} positional arguments, the backend passes "
                            f"{call.n_positional} (line {call.line})")
        for kw in call.keywords:
            if kw not in sig.names:
                problems.append(f"{tag}: {name} has no parameter {kw!r} (backend line {call.line}); "
                                f"its signature: {sig.render()}")
        if call.request:
            _check_request(src, usage, call, problems, tag)
    for attr, line in usage.attributes.items():
        if not has_attribute(src, llm, attr):
            problems.append(f"{tag}: the backend reads vllm.LLM.{attr} (line {line}); LLM has no such attribute")

    # SamplingParams, the prompt, the results, finish reasons, sleep tags.
    sp = src.resolve("vllm", "SamplingParams")
    sp_fields = src.fields(sp) if isinstance(sp, ClassRef) else {}
    if not sp_fields:
        problems.append(f"{tag}: vllm.SamplingParams not found")
    for key, line in usage.sampling_keys.items():
        if sp_fields and key not in sp_fields:
            problems.append(f"{tag}: vllm.SamplingParams keyword {key!r} (backend line {line}) is not a field of "
                            f"SamplingParams")
    prompt = src.resolve("vllm", "TokensPrompt")
    prompt_fields = src.fields(prompt) if isinstance(prompt, ClassRef) else {}
    for key, line in usage.prompt_keys.items():
        if key not in prompt_fields:
            problems.append(f"{tag}: prompt key {key!r} (backend line {line}) is not a key of vllm.TokensPrompt")
    generate = src.method(llm, "generate")
    results = classes_in(src, generate[0].module, generate[1].returns) if generate and generate[1].returns else []
    for path, line in usage.result_paths.items():
        missing = walk_path(src, results, path)
        if missing:
            problems.append(f"{tag}: vllm.LLM.generate result {missing} (read at backend line {line})")
    try:
        reasons = src.constant(*FINISH_REASONS)
    except (KeyError, ValueError) as exc:
        problems.append(f"{tag}: {'.'.join(FINISH_REASONS)} not readable: {exc}")
    else:
        for reason, line in usage.finish_reasons.items():
            if reason not in reasons:
                problems.append(f"{tag}: finish_reason {reason!r} (compared at backend line {line}) is not one of "
                                f"vLLM's {FINISH_REASONS[1]} {tuple(reasons)}")
    try:
        real_tags = _sleep_tags(src)
    except (KeyError, ValueError) as exc:
        problems.append(f"{tag}: sleep tags {'.'.join(SLEEP_TAGS)} not readable: {exc}")
    else:
        if usage.sleep_tags is None or set(usage.sleep_tags) != set(real_tags):
            problems.append(f"{tag}: vllm.LLM.sleep / wake_up tags: the backend's {BACKEND_TAGS} = {usage.sleep_tags}, "
                            f"vLLM's {SLEEP_TAGS[1]} = {tuple(sorted(real_tags))}")

    # The stand-in: the same signatures, only real methods, result classes with real attributes.
    for method, real_sig in called.items():
        fake_fn = fake.methods.get(method)
        if fake_fn is None:
            problems.append(f"stand-in: {STAND_IN_CLASS}.{method} is missing (the backend calls vllm.LLM.{method})")
            continue
        diff = _first_difference(signature(fake_fn), real_sig)
        if diff:
            problems.append(f"stand-in: {STAND_IN_CLASS}.{method}{signature(fake_fn).render()} differs from "
                            f"vllm.LLM.{method}{real_sig.render()}: {diff}")
    for method in fake.methods:
        if not method.startswith("_") and src.method(llm, method) is None:
            problems.append(f"stand-in: {STAND_IN_CLASS}.{method} is not a method of vllm.LLM")
    for name, attrs in fake.results.items():
        real = src.resolve("vllm.logprobs" if name == "Logprob" else "vllm", name)
        if not isinstance(real, ClassRef):
            problems.append(f"stand-in: {name} is not a class of vLLM")
            continue
        for attr in sorted(attrs):
            if not has_attribute(src, real, attr):
                problems.append(f"stand-in: {name}.{attr} is not an attribute of vLLM's {name}")
    return problems


def _init_annotation(module: str, fn: ast.FunctionDef, name: str) -> tuple[str, ast.expr] | None:
    arg = next((a for a in [*fn.args.args, *fn.args.kwonlyargs] if a.arg == name and a.annotation is not None), None)
    return (module, arg.annotation) if arg is not None else None


def _field_annotation(src: PackageSource, cls: ClassRef | None, name: str) -> tuple[str, ast.expr] | None:
    return attribute_annotation(src, cls, name) if cls is not None else None


def _check_transfer_config(src: PackageSource, usage: BackendUsage, fields: dict, problems: list[str], tag: str) -> None:
    """weight_transfer_config={"backend": ...}: WeightTransferConfig's fields, and a registered backend."""
    if "weight_transfer_config" not in usage.constructor:
        return
    owner = fields.get("weight_transfer_config", (None,))[0]
    annotation = _field_annotation(src, owner, "weight_transfer_config")
    config = next(iter(classes_in(src, *annotation)), None) if annotation else None
    if config is None:
        problems.append(f"{tag}: EngineArgs.weight_transfer_config names no config class this check can resolve")
        return
    for key, line in usage.transfer_config.items():
        if key not in src.fields(config):
            problems.append(f"{tag}: weight_transfer_config key {key!r} (backend line {line}) is not a field of "
                            f"{config.name}")
    if usage.transfer_backend is None or _transfer_engine(src, usage.transfer_backend) is None:
        problems.append(f"{tag}: weight-transfer backend {usage.transfer_backend!r} ({BACKEND_TRANSFER}) is not "
                        f"registered with {FACTORY[1]}")


def _check_request(src: PackageSource, usage: BackendUsage, call: LLMCall, problems: list[str], tag: str) -> None:
    """`llm.update_weights({"update_info": {...}})`: the request dataclass's field, and the keys of the
    backend's update/init info class (the ipc engine's `update_info_cls` / `init_info_cls`)."""
    request_cls, info_attr = REQUESTS.get(call.method, (None, None))
    request = src.resolve(REQUEST_MODULE, request_cls) if request_cls else None
    if not isinstance(request, ClassRef):
        problems.append(f"{tag}: vllm.LLM.{call.method} gets a request dict (line {call.line}) this check has no "
                        f"request class for")
        return
    engine = _transfer_engine(src, usage.transfer_backend or "")
    info_expr = src.class_attribute(engine, info_attr) if engine is not None else None
    info_cls = src.resolve_class(info_expr[0].module, info_expr[1]) if info_expr else None
    for key, inner in call.request.items():
        if key not in src.fields(request):
            problems.append(f"{tag}: vllm.LLM.{call.method} request key {key!r} (line {call.line}) is not a field of "
                            f"{request.name}")
            continue
        if info_cls is None:
            problems.append(f"{tag}: the {usage.transfer_backend!r} weight-transfer engine has no {info_attr}")
            continue
        known = src.fields(info_cls)
        for sub, line in inner.items():
            if sub not in known:
                problems.append(f"{tag}: vllm.LLM.{call.method} {key} key {sub!r} (backend line {line}) is not a field "
                                f"of {info_cls.name}")
