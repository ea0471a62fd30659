"""The one parser for YAML a user typed (a whole run config): safe_load without anchors and aliases, bounded.

PyYAML's `safe_load` keeps an alias as a second reference to the anchored node, so a few hundred bytes
of nested aliases (a "billion laughs" document) load into a tree that every later walk (Config.from_dict,
to_dict, the config gate) visits as if it were written out: 7 levels of 8 aliases took 12 s and an 8th
level GBs of memory. A run config has no use for them, so `UserYamlLoader` refuses the first anchor
(`&name`) or alias (`*name`) it meets, before anything is built. It also bounds the document while it is
composed: MAX_YAML_BYTES of text, MAX_YAML_NODES nodes and MAX_YAML_DEPTH levels of nesting (deeper
nesting would otherwise end in a RecursionError inside the composer). A scalar holding a lone UTF-16
surrogate (a double-quoted `"\\ud800"` escape without its pair, which no UTF-8 encoder takes, so
PostgreSQL refused the stored config) is refused at its line. It reads `1e-6` as a float, as
OmegaConf does for verl's configs. Operator files (the repo's presets, a tool set staff register) are
not user input and keep plain safe_load.
"""
from __future__ import annotations

import re
from typing import Any

import yaml

from rlstudio.text import has_surrogate

MAX_YAML_BYTES = 256 * 1024  # a whole default config is about 4 KiB of YAML
MAX_YAML_NODES = 20_000  # scalars, sequences and mappings; the default config has about 400
MAX_YAML_DEPTH = 32  # the default config nests 5 deep


class YamlRefused(yaml.YAMLError):
    """Valid YAML the platform does not accept from a user (an anchor or alias, or past a bound)."""

    def __init__(self, message: str, mark=None):
        super().__init__(message)
        self.problem = message
        self.problem_mark = mark


class UserYamlLoader(yaml.SafeLoader):
    """SafeLoader that refuses anchors, aliases and lone surrogates, and stops past MAX_YAML_NODES or
    MAX_YAML_DEPTH."""

    def __init__(self, stream):
        super().__init__(stream)
        self._nodes = 0
        self._depth = 0

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            raise YamlRefused(f"YAML aliases (*{event.anchor}) are not accepted: write the value out",
                              event.start_mark)
        if getattr(event, "anchor", None) is not None:
            raise YamlRefused(f"YAML anchors (&{event.anchor}) and aliases are not accepted: write the value out",
                              event.start_mark)
        if isinstance(event, yaml.ScalarEvent) and has_surrogate(event.value):
            raise YamlRefused("a lone surrogate (a UTF-16 \\ud800-\\udfff escape without its pair) is not "
                              "text: write the character itself", event.start_mark)
        self._nodes += 1
        if self._nodes > MAX_YAML_NODES:
            raise YamlRefused(f"more than {MAX_YAML_NODES} YAML nodes", event.start_mark)
        if self._depth >= MAX_YAML_DEPTH:
            raise YamlRefused(f"nested more than {MAX_YAML_DEPTH} levels deep", event.start_mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


# Floats as OmegaConf (verl's configs) reads them: YAML 1.1's resolver wants a dot, so PyYAML reads
# verl's `lr: 1e-6` as the string '1e-6' (refused as "expected a number"). The same pattern as
# OmegaConf's loader: a dot is optional before an exponent. On this loader's own copy of the table.
_FLOAT = "tag:yaml.org,2002:float"
_FLOAT_RE = re.compile(r"""^(?:
     [-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+][0-9]+)?
    |[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""", re.X)
UserYamlLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _FLOAT]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
UserYamlLoader.add_implicit_resolver(_FLOAT, _FLOAT_RE, list("-+0123456789."))


def load_user_yaml(text: str) -> Any:
    """The document in `text`, as safe_load reads it; YamlRefused for an anchor, an alias, text over
    MAX_YAML_BYTES or a document past the node / depth bounds, yaml.YAMLError for invalid YAML."""
    size = len(text.encode("utf-8"))
    if size > MAX_YAML_BYTES:
        raise YamlRefused(f"{size} bytes of YAML, at most {MAX_YAML_BYTES}")
    loader = UserYamlLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def shape_problem(value: Any) -> str | None:
    """Why a config that came as JSON (the API's `config`, an override's value) is past the same bounds
    as YAML (MAX_YAML_NODES nodes, MAX_YAML_DEPTH levels), or None. Walked without recursion, and it
    stops at the first node past a bound, so even a tree that shares its branches costs no more."""
    stack = [(value, 1)]
    nodes = 0
    while stack:
        item, depth = stack.pop()
        nodes += 1
        if nodes > MAX_YAML_NODES:
            return f"more than {MAX_YAML_NODES} values"
        if depth > MAX_YAML_DEPTH:
            return f"nested more than {MAX_YAML_DEPTH} levels deep"
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
            nodes += len(item)  # the keys
        elif isinstance(item, (list, tuple)):
            stack.extend((v, depth + 1) for v in item)
    return None
