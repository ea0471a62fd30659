"""The settings' LOGGING as a real process writes it: a request with a disallowed Host header logs one
line naming the host (Django logs it at ERROR with a traceback by default)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import _service_env

REPO = Path(__file__).resolve().parents[3]
SCRIPT = """
import django
django.setup()
from django.test import Client
print("status", Client().get("/healthz", HTTP_HOST="scanner.invalid").status_code)
"""


def test_a_disallowed_host_is_one_line_without_a_traceback(test_database_url):
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO, capture_output=True, text=True, timeout=120,
                         env=_service_env(DATABASE_URL=test_database_url))
    assert out.returncode == 0, out.stderr[-2000:]
    assert "status 400" in out.stdout
    lines = [line for line in out.stderr.splitlines() if "scanner.invalid" in line]
    assert lines == ["Invalid HTTP_HOST header: 'scanner.invalid'. You may need to add 'scanner.invalid' "
                     "to ALLOWED_HOSTS."]
    assert "Traceback" not in out.stderr and "DisallowedHost" not in out.stderr
