"""Entry points: stdlib `platform` not shadowed, production settings pass `check --deploy`."""
import os
import platform
import secrets
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"DJANGO_SETTINGS_MODULE", "DEBUG"}}
    env.update(extra)
    return env


def test_stdlib_platform_under_pytest():
    assert platform.system() in {"Linux", "Darwin", "Windows"}
    assert hasattr(platform, "python_version")  # the standard library's module, not platform/


def test_stdlib_platform_under_manage_py_shell():
    out = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c",
         "import platform, rlstudio; print(platform.system(), platform.__file__)"],
        cwd=REPO, env=_env(DJANGO_SETTINGS_MODULE="rlstudio.config.settings.test"),
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    system, path = out.stdout.strip().splitlines()[-1].split()
    assert system == platform.system()
    assert not path.startswith(str(REPO / "platform"))


def test_production_settings_pass_check_deploy():
    out = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=REPO,
        env=_env(
            DJANGO_SETTINGS_MODULE="rlstudio.config.settings.production",
            SECRET_KEY=secrets.token_urlsafe(60),
            ALLOWED_HOSTS="example.com",
        ),
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "System check identified no issues" in out.stdout
    assert "WARNING" not in out.stderr


def test_production_settings_refuse_a_missing_secret_key():
    env = _env(DJANGO_SETTINGS_MODULE="rlstudio.config.settings.production", ALLOWED_HOSTS="example.com")
    env.pop("SECRET_KEY", None)
    out = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode != 0
    assert "SECRET_KEY is not set" in out.stderr


def test_migrations_are_complete():
    out = subprocess.run(
        [sys.executable, "manage.py", "makemigrations", "--check", "--dry-run"],
        cwd=REPO, env=_env(DJANGO_SETTINGS_MODULE="rlstudio.config.settings.test"),
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "No changes detected" in out.stdout


def test_the_socket_recheck_interval_comes_from_the_environment():
    """RLSTUDIO_SOCKET_RECHECK_S (accounts.sockets.RecheckedSocket): 30 s by default, any positive number
    of seconds from the environment, and a settings error for 0 or less (a re-check loop would spin)."""
    from django.conf import settings

    assert "RLSTUDIO_SOCKET_RECHECK_S" in os.environ or settings.RLSTUDIO_SOCKET_RECHECK_S == 30.0
    show = "from django.conf import settings; print(settings.RLSTUDIO_SOCKET_RECHECK_S)"
    for value, expected in (("2.5", "2.5"), ("0", None)):
        out = subprocess.run(
            [sys.executable, "manage.py", "shell", "-c", show], cwd=REPO, capture_output=True, text=True, timeout=60,
            env=_env(DJANGO_SETTINGS_MODULE="rlstudio.config.settings.test", RLSTUDIO_SOCKET_RECHECK_S=value),
        )
        if expected is None:
            assert out.returncode != 0 and "RLSTUDIO_SOCKET_RECHECK_S must be > 0 seconds (got 0.0)" in out.stderr
        else:
            assert out.returncode == 0, out.stderr
            assert out.stdout.strip().splitlines()[-1] == expected


def test_the_platform_starts_without_loading_torch():
    """Every Django process of the platform (web, Celery worker and beat, manage.py) starts without
    torch or numpy: the trainer's heavy modules are imported only where a task really trains or loads
    a model (once, trainer.checkpoint at import time cost each process about 1.5 s and 200 MB)."""
    probe = ("import sys, django; django.setup(); "
             "from rlstudio.config.celery import app; app.loader.import_default_modules(); "
             "import rlstudio.config.asgi; from django.urls import get_resolver; get_resolver().url_patterns; "
             "print(sorted(m for m in ('torch', 'numpy', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60,
                         env=_env(DJANGO_SETTINGS_MODULE="rlstudio.config.settings.test",
                                  PYTHONPATH=os.pathsep.join([str(REPO / "platform"), str(REPO)])))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"
