"""How `make test` splits the suite (tests/conftest.py `shard`, tests/shards.py): which shard a test
lands in, each shard's own test database, and the exit status from the shards' outcomes."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import band, shard

HERE = Path(__file__).resolve().parent


def _shards_module():
    spec = importlib.util.spec_from_file_location("rls_shards", HERE / "shards.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up while it is made
    spec.loader.exec_module(module)
    return module


def _item(nodeid: str, *fixtures: str, marks: tuple[str, ...] = ()):
    return SimpleNamespace(nodeid=nodeid, fixturenames=list(fixtures),
                           get_closest_marker=lambda name: name if name in marks else None)


@pytest.mark.parametrize("item,expected", [
    (_item("tests/e2e/test_launcher.py::test_x", marks=("own_ray",)), "cluster"),
    (_item("tests/trainer/parallel/test_p.py::test_x", "local_ray"), "cluster"),
    (_item("tests/e2e/test_fork.py::test_x", "celery_worker", "ray_head"), "services"),
    (_item("tests/browser/test_journey_x.py::test_x", "page"), "services"),
    (_item("tests/trainer/test_evaluate_demo.py::test_x", "demo_eval_run"), "services"),
    (_item("tests/rlstudio/runs/test_fork.py::test_x", "db", "alice"), "plain"),
    (_item("tests/trainer/test_sft.py::test_x", "tmp_path"), "plain"),
])
def test_each_test_has_one_shard(item, expected):
    assert shard(item) == expected


def test_bands_order_the_session_head_after_own_clusters_and_browsers_last():
    assert band(_item("tests/e2e/test_launcher.py::t", marks=("own_ray",))) == 0
    assert band(_item("tests/e2e/test_fork.py::t", "ray_head")) == 1
    # the demo evaluation run's users after the Ray-head tests its background build runs beside
    assert band(_item("tests/trainer/test_evaluate_demo.py::t", "demo_eval_run")) == 2
    assert band(_item("tests/browser/test_journey_evaluation.py::t", "demo_eval_run", "ray_head")) == 3
    assert band(_item("tests/browser/test_csp.py::t", "ray_head")) == 3


def test_each_shard_has_a_test_database_of_its_own():
    shards = _shards_module()
    names = {shards.database_name(s, {}) for phase in shards.PHASES for s in phase}
    assert names == {"test_rlstudio_cluster", "test_rlstudio_services", "test_rlstudio_plain"}
    assert shards.database_name("plain", {"RLSTUDIO_TEST_DATABASE_NAME": "test_me"}) == "test_me_plain"


def _finished(shards, name: str, code: int, tmp_path: Path, text: str):
    log = tmp_path / f"{name}.log"
    log.write_text(text)
    s = shards.Shard(name, log)
    s.proc = subprocess.Popen(["sh", "-c", f"exit {code}"])
    s.proc.wait()
    s.ended = s.started + 1
    return s


def test_the_exit_status_passes_only_when_every_shard_passes_and_a_failed_log_comes_last(tmp_path, capsys):
    shards = _shards_module()
    ok = _finished(shards, "plain", 0, tmp_path, "plain log [100%]\n")
    empty = _finished(shards, "cluster", shards.NO_TESTS, tmp_path, "no tests ran\n")
    assert shards.report([ok, empty]) == 0  # a shard the arguments left empty counts as passed
    failed = _finished(shards, "services", 1, tmp_path, "1 failed [ 40%]\n")
    assert shards.report([failed, ok]) == 1
    out = capsys.readouterr().out
    assert out.rindex("1 failed") > out.rindex("plain log") and "[shards] services: FAILED (exit 1)" in out
    assert failed.progress() == "40%"
    assert shards.report([empty]) == shards.NO_TESTS


def test_an_interrupted_run_fails_and_names_the_shards_it_never_started(tmp_path, capsys):
    shards = _shards_module()
    ok = _finished(shards, "cluster", 0, tmp_path, "cluster log\n")
    assert shards.report([ok], not_run=("services", "plain"), interrupted=True) == shards.INTERRUPTED
    out = capsys.readouterr().out
    assert "[shards] services: not run" in out and "[shards] plain: not run" in out
    assert shards.report([], interrupted=True) == shards.INTERRUPTED


def test_a_shard_option_is_refused_rather_than_run_three_times(capsys):
    shards = _shards_module()
    assert shards.main(["--shard=plain", "tests/test_shards.py"]) == shards.USAGE
    assert shards.main(["--shard", "plain"]) == shards.USAGE
    assert "--shard picks one shard" in capsys.readouterr().err


def test_a_shard_takes_its_priority_and_dies_with_the_runner(tmp_path):
    import psutil

    shards = _shards_module()
    probe = subprocess.run(
        [sys.executable, "-c", "import os; print(os.nice(0))"], preexec_fn=shards._child_setup(7),
        capture_output=True, text=True, check=True)
    assert int(probe.stdout) == min(os.nice(0) + 7, 19)  # 19 is the lowest priority (the plain shard's own)
    # A runner that starts a shard (a sleeper here) and is gone without stopping it: the shard goes too.
    runner = (f"import importlib.util, subprocess, sys\n"
              f"spec = importlib.util.spec_from_file_location('s', {str(HERE / 'shards.py')!r})\n"
              f"m = importlib.util.module_from_spec(spec); sys.modules['s'] = m; spec.loader.exec_module(m)\n"
              f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], "
              f"preexec_fn=m._child_setup(0), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, "
              f"stderr=subprocess.DEVNULL)\n"
              f"print(p.pid, flush=True)\n")
    out = subprocess.run([sys.executable, "-c", runner], capture_output=True, text=True, check=True, timeout=60)
    shard = int(out.stdout.strip())
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            if psutil.Process(shard).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.2)
    else:
        psutil.Process(shard).kill()
        pytest.fail("the shard outlived its runner")
