"""Build the tools of a tool_config in a process of their own and say what came out: the check the
platform runs before it accepts an operator's tool set.

    python -m trainer.tools.check CONFIG.yaml RESULT.json

CONFIG is read exactly as a run's trainer reads `tools.config_path` (`load_tool_config`: registered
tools only). RESULT gets one JSON object:
    {"ok": true,  "tools": [{"name", "class_name", "description"}, ...]}
    {"ok": false, "error": "<why>"}
The exit status is 0 either way once RESULT is written; anything else (no RESULT) is a crash.
"""
from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path
from typing import Any


def describe(config_path: str | Path) -> dict[str, Any]:
    """The check's result for one tool_config file (never raises for a bad config)."""
    from trainer.tools import ToolConfigError, load_tool_config

    try:
        tools = load_tool_config(config_path)
        if not tools:
            return {"ok": False, "error": "the tool_config lists no tools"}
        out = []
        for name, tool in tools.items():
            json.dumps(tool.schema)  # the schema is sent to the model's chat template as JSON
            out.append({"name": name, "class_name": type(tool).name,
                        "description": str(tool.schema["function"].get("description", ""))[:500]})
        return {"ok": True, "tools": out}
    except ToolConfigError as exc:
        return {"ok": False, "error": str(exc)}
    except Exception as exc:  # a tool's constructor refusing its config, a schema that is not JSON
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(limit=-4)}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m trainer.tools.check CONFIG.yaml RESULT.json", file=sys.stderr)
        return 2
    result = describe(args[0])
    Path(args[1]).write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
