"""The client against answers the platform itself never gives but a proxy or a restart does: a 5xx in
plain text or HTML, a redirect (never followed: the token would go along), a page that is not JSON.
A real HTTP server (the standard library's, in a thread) plays them; no database."""
from __future__ import annotations

import http.server
import json
import threading

import pytest

from rlstudio_cli import common as cli_common
from rlstudio_cli import runs as cli_runs


class _Server:
    def __init__(self, answer):
        self.requests: list[dict] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                server.requests.append({"path": self.path, "auth": self.headers.get("Authorization")})
                status, headers, body = answer(self.path)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve():
    started = []

    def start(answer) -> _Server:
        started.append(_Server(answer))
        return started[-1]

    yield start
    for s in started:
        s.close()


def test_a_5xx_is_exit_1_with_the_servers_words(serve, cli):
    html = serve(lambda path: (502, {"Content-Type": "text/html"}, b"<html><h1>Bad Gateway</h1></html>"))
    r = cli("--url", html.url, "--token", "rls_secret", "runs", "list")
    assert r.code == 1 and r.err.strip() == "error: the server answered HTTP 502", r
    assert html.requests[0]["auth"] == "Token rls_secret"

    envelope = {"error": {"code": "error", "message": "database \x1b[31mdown", "field": None, "line": None}}
    js = serve(lambda path: (503, {"Content-Type": "application/json"}, json.dumps(envelope).encode()))
    r = cli("--url", js.url, "--token", "rls_secret", "runs", "show", "3")
    assert r.code == 1 and r.err.strip() == "error: database down", r  # the escape stripped too


def test_a_redirect_is_not_followed_so_the_token_stays(serve, cli):
    elsewhere = serve(lambda path: (200, {"Content-Type": "application/json"}, b'{"count": 0, "results": []}'))
    moved = serve(lambda path: (302, {"Location": elsewhere.url + path}, b""))
    r = cli("--url", moved.url, "--token", "rls_secret", "runs", "list")
    assert r.code == 1 and "redirecting to" in r.err and "rls_secret" not in r.err, r
    assert elsewhere.requests == []  # never asked, so never handed the token


def test_an_answer_that_is_not_json_is_exit_1(serve, cli):
    page = serve(lambda path: (200, {"Content-Type": "text/html"}, b"<html>a login page</html>"))
    r = cli("--url", page.url, "--token", "rls_x", "models", "list")
    assert r.code == 1 and "not JSON" in r.err, r


def test_watch_rides_out_a_few_failed_polls_then_gives_up(serve, cli, monkeypatch):
    """A restart (502s) mid-watch: each failed poll is tried again, up to WATCH_RETRIES in a row."""
    down = serve(lambda path: (502, {"Content-Type": "text/plain"}, b"restarting"))
    monkeypatch.setattr(cli_common, "sleep", lambda s: None)
    r = cli("--url", down.url, "--token", "rls_x", "runs", "watch", "5")
    assert r.code == 1, r
    assert r.err.count("trying again") == cli_runs.WATCH_RETRIES
    assert r.err.splitlines()[-1] == "error: restarting"
    assert len(down.requests) == cli_runs.WATCH_RETRIES + 1


def test_a_bare_rlstudio_prints_its_help(cli):
    """`rlstudio` alone lists its commands (exit 0), where argparse answered a usage error."""
    r = cli()
    assert r.code == 0, r
    assert r.out.startswith("usage: rlstudio") and "runs" in r.out and "datasets" in r.out
    assert r.err == ""
