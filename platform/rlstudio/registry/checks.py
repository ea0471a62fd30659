"""The registration checks, each run by the trainer's own code in a process of its own, killed after
RLSTUDIO_REGISTRY_CHECK_TIMEOUT_S: a reward function scoring rows (`python -m trainer.rewards.check`)
and a tool set's tools being built (`python -m trainer.tools.check`).

The child gets a fresh temporary folder as its working directory and a small environment (PATH,
locale, PYTHONPATH = the checkout, one thread): none of the web process's secrets or database
settings. It runs in a session of its own, so on timeout the whole process group (anything the
operator's code started) is killed. No Django models here: the services call these.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlstudio.config.env import REPO_ROOT

MAX_RESULT_BYTES = 4 << 20
LOG_TAIL_CHARS = 2000


@dataclass(frozen=True)
class CheckResult:
    """What a check process reported. `ok` False: `stage` says where it stopped (load, function,
    timeout, crash) and `error` why; `data` is the process's whole result object."""

    ok: bool
    stage: str = ""
    error: str = ""
    data: dict[str, Any] = field(default_factory=dict)


def _child_env(tmp: Path) -> dict[str, str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp), "TMPDIR": str(tmp),
           "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONPATH": str(REPO_ROOT), "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONNOUSERSITE": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    return env


def _kill_group(proc: subprocess.Popen) -> None:
    # The child leads its own session (start_new_session), so its pid is the group id.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _tail(path: Path) -> str:
    try:
        with path.open("rb") as f:
            f.seek(max(0, path.stat().st_size - LOG_TAIL_CHARS))
            return f.read().decode("utf-8", "replace").strip()
    except OSError:
        return ""


def run_check(entry: str, input_name: str, input_text: str, *, timeout_s: float) -> CheckResult:
    """Run `python -m <entry> <input> <result>` with `input_text` as the input file; its result."""
    with tempfile.TemporaryDirectory(prefix="rlstudio-check-") as tmp_name:
        tmp = Path(tmp_name)
        source, result, log = tmp / input_name, tmp / "result.json", tmp / "output.log"
        source.write_text(input_text, encoding="utf-8")
        with log.open("wb") as log_file:
            proc = subprocess.Popen([sys.executable, "-m", entry, str(source), str(result)], cwd=tmp,
                                    env=_child_env(tmp), stdin=subprocess.DEVNULL, stdout=log_file,
                                    stderr=subprocess.STDOUT, start_new_session=True)
            try:
                code = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                proc.wait()
                return CheckResult(False, "timeout", f"the check did not finish within {timeout_s:g} s and was "
                                                     "killed (RLSTUDIO_REGISTRY_CHECK_TIMEOUT_S)")
            finally:
                _kill_group(proc)  # whatever the code left running in its session
        if not result.is_file():
            tail = _tail(log)
            return CheckResult(False, "crash", f"the check process exited with status {code} without a result"
                                               + (f":\n{tail}" if tail else ""))
        if result.stat().st_size > MAX_RESULT_BYTES:
            return CheckResult(False, "crash", f"the check's result is over {MAX_RESULT_BYTES} bytes")
        try:
            data = json.loads(result.read_text(encoding="utf-8"))
        except ValueError as exc:
            return CheckResult(False, "crash", f"the check's result is not JSON: {exc}")
    if not isinstance(data, dict):
        return CheckResult(False, "crash", "the check's result is not a JSON object")
    return CheckResult(bool(data.get("ok")), str(data.get("stage") or ""), str(data.get("error") or ""), data)


def check_reward_rows(*, path: str = "", module: str = "", function: str, rows: list[dict[str, Any]],
                      timeout_s: float) -> CheckResult:
    """Load the reward function (a file `path`, or a dotted `module`) and score `rows` with it; on
    success `data["results"]` holds one {"score", "extra"} or {"error"} per row, `data["path"]` the file."""
    request = {"path": path, "module": module, "function": function, "rows": rows}
    return run_check("trainer.rewards.check", "request.json", json.dumps(request), timeout_s=timeout_s)


def check_tool_config(*, config_yaml: str, timeout_s: float) -> CheckResult:
    """Build the tools of a tool_config YAML as the trainer does; on success `data["tools"]` lists them."""
    return run_check("trainer.tools.check", "tool_config.yaml", config_yaml, timeout_s=timeout_s)
