"""The launcher's host names and warnings for an instance other machines reach (launcher/exposure.py):
an operator's ALLOWED_HOSTS keeps the loopback names (else `make run` never came up: its own health
probe to 127.0.0.1 answered 400), and the banner says what to set when bound beyond loopback.

The end-to-end half: a real Daphne serving the development settings with the children's ALLOWED_HOSTS
answers /healthz on 127.0.0.1 and on the operator's name, and refuses any other name.

Run: .venv/bin/python -m pytest tests/rlstudio/launcher/test_exposure.py -q
"""
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from rlstudio.launcher.cli import Launcher, parse_args
from rlstudio.launcher.exposure import (allowed_hosts_for_children, binds_beyond_loopback,
                                        exposure_warnings)

REPO = Path(__file__).resolve().parents[3]


def test_the_operators_names_keep_the_loopback_ones():
    assert allowed_hosts_for_children({}) is None
    assert allowed_hosts_for_children({"ALLOWED_HOSTS": " , "}) is None
    assert allowed_hosts_for_children({"ALLOWED_HOSTS": "studio.lab"}) == "studio.lab,localhost,127.0.0.1,[::1]"
    assert allowed_hosts_for_children({"ALLOWED_HOSTS": " 127.0.0.1 , studio.lab "}) == \
        "127.0.0.1,studio.lab,localhost,[::1]"


def test_the_childrens_environment_carries_them(tmp_path):
    environ = {"ALLOWED_HOSTS": "studio.lab", "RLSTUDIO_STATE_DIR": str(tmp_path), "PATH": os.environ["PATH"]}
    env = Launcher(parse_args([], environ), environ)._child_env({})
    assert env["ALLOWED_HOSTS"] == "studio.lab,localhost,127.0.0.1,[::1]"
    environ.pop("ALLOWED_HOSTS")
    assert "ALLOWED_HOSTS" not in Launcher(parse_args([], environ), environ)._child_env({})


@pytest.mark.parametrize("host,beyond", [("127.0.0.1", False), ("localhost", False), ("::1", False),
                                         ("127.0.0.2", False), ("0.0.0.0", True), ("::", True),
                                         ("10.1.2.3", True), ("studio.lab", True)])
def test_which_binds_other_machines_reach(host, beyond):
    assert binds_beyond_loopback(host) is beyond


def test_warnings_only_beyond_loopback_and_each_names_what_to_set():
    assert exposure_warnings("127.0.0.1", 8000, {}, "gpu-box") == []
    both = exposure_warnings("0.0.0.0", 8000, {}, "gpu-box")
    assert len(both) == 2
    assert "ALLOWED_HOSTS=gpu-box" in both[0] and "http://gpu-box:8000/" in both[0] and "400" in both[0]
    assert "SECRET_KEY" in both[1] and "checkout path" in both[1]
    assert exposure_warnings("0.0.0.0", 8000, {"ALLOWED_HOSTS": "gpu-box", "SECRET_KEY": "k" * 60}, "x") == []
    (only,) = exposure_warnings("::", 8000, {"ALLOWED_HOSTS": "gpu-box"}, "x")
    assert "SECRET_KEY" in only


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _status(port: int, host_header: str) -> int:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/healthz", headers={"Host": host_header})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.django_db(transaction=True)
def test_a_real_daphne_with_the_childrens_hosts_answers_loopback_and_the_operators_name(settings):
    """The development settings (what make run serves) under the children's ALLOWED_HOSTS: the probe's
    127.0.0.1 and the operator's name are answered (/healthz may be 200 or 503 by the services' state,
    never the 400 of a refused host); another name is refused with 400."""
    port = _free_port()
    db = settings.DATABASES["default"]
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "rlstudio.config.settings.local", "DEBUG": "0",
           "ALLOWED_HOSTS": allowed_hosts_for_children({"ALLOWED_HOSTS": "studio.lab"}),
           "DATABASE_URL": f"postgresql://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
           "PYTHONPATH": os.pathsep.join([str(REPO / "platform"), str(REPO)])}
    proc = subprocess.Popen([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                             "rlstudio.config.asgi:application"], env=env, cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                first = _status(port, f"127.0.0.1:{port}")
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "daphne did not start"
                time.sleep(0.3)
        assert first != 400
        assert _status(port, f"studio.lab:{port}") != 400
        assert _status(port, f"localhost:{port}") != 400
        assert _status(port, f"evil.example:{port}") == 400
    finally:
        proc.terminate()
        proc.wait(timeout=20)
