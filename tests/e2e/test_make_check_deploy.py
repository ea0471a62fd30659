"""`make check-deploy` (Makefile): Django's deployment checks on the production settings with the
deployment's SECRET_KEY and ALLOWED_HOSTS; without them it says what to set (exit 2), not a traceback.

Run: .venv/bin/python -m pytest tests/e2e/test_make_check_deploy.py -q
"""
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(sys.executable).parent.parent

pytestmark = pytest.mark.skipif(not shutil.which("make"), reason="make not installed")


def _make(**env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items()
            if k not in {"SECRET_KEY", "ALLOWED_HOSTS", "DJANGO_SETTINGS_MODULE", "DEBUG"}}
    # -o: the installed marker counts as up to date (this checkout's venv is what runs the tests).
    return subprocess.run(["make", "-s", "-o", f"{VENV}/.installed", f"VENV={VENV}", "check-deploy"],
                          cwd=ROOT, env={**base, **env}, capture_output=True, text=True, timeout=120)


def test_without_secret_key_or_allowed_hosts_it_says_what_to_set():
    for env in ({}, {"SECRET_KEY": secrets.token_urlsafe(60)}, {"ALLOWED_HOSTS": "studio.example.com"}):
        out = _make(**env)
        assert out.returncode != 0, env
        assert "set SECRET_KEY" in out.stderr and "ALLOWED_HOSTS" in out.stderr, out.stderr
        assert "Traceback" not in out.stderr, out.stderr


def test_with_them_the_production_settings_pass():
    out = _make(SECRET_KEY=secrets.token_urlsafe(60), ALLOWED_HOSTS="studio.example.com")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "System check identified no issues" in out.stdout


def test_a_weak_secret_key_fails_the_check():
    out = _make(SECRET_KEY="short", ALLOWED_HOSTS="studio.example.com")
    assert out.returncode != 0 and "security.W009" in out.stdout + out.stderr
